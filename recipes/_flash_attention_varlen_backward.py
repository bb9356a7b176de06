"""The kernels of recipes/flash_attention_varlen_backward.py: the attention backward of
recipes/_flash_attention_backward_kernel.py (same roles, rings, consumers and numerics, reused
from there) and its pre- and post-pass (recipes/_flash_attention_backward_passes.py) on packed
variable-length batches.

The backward kernel runs one CTA per (key block, kv head, sequence); the grid's x extent covers
the longest key sequence. Each CTA reads its sequence's bounds from cu_seqlens_q and
cu_seqlens_k (recipes/_flash_attention_varlen.py's sequence_bounds; what it stores is clamped
to the tensors' rows), so a malformed cu_seqlens gives wrong rows, never an access outside a
tensor.
The sequence's rows are windows of the packed tensors; query-block counts, causal masks (bottom-
right on the sequence's own lengths) and the ring are the padded kernel's. A CTA whose key
block starts past its sequence's keys only initialises its barriers and exits.

The f32 row buffers (dQ accumulator, -lse log2 e, D = rowsum(dO * O)) are per query head
(heads_q, head_rows, ...), head_rows = 64 * (ceil(total_q / 64) + batch): sequence s's query
block m is 64-row block cu_seqlens_q[s] // 64 + s + m of its head, so each sequence owns whole,
disjoint 64-row blocks (block s starts at or past the end of block s-1's rows) without the host
reading cu_seqlens; the pre-pass pads a sequence's last block with D = 0, neg_lse2 = -inf, as the
padded passes pad seqlen_q.

What differs from the padded backward, and why:
- K, V rows past the sequence's end (the last key block) are the next sequence's, not TMA's
  zeros: non-causal, the consumers zero those K rows in shared memory once, before the ring
  (`VarlenMixin.zero_keys_past_end`: a zero K row adds nothing to dQ, as in the padded kernel,
  and its P, dS only reach its own dK, dV rows, which are not stored); causal, every step of
  that block is already masked (its last key is past the last query's diagonal) and the causal
  mask drops those keys.
- Q, dO rows past the sequence's end are the next sequence's: their neg_lse2 = -inf (the
  padding of the sequence's own last block) gives P = 0 and dS = 0, and their dQ rows are that
  padding's, never stored.
- dK, dV are stored with masked 16-byte stores of the warpgroup's threads from shared memory,
  rows below the sequence's end only (a TMA box would write the next sequence's first rows).
"""
from __future__ import annotations

import layoutkit as lk

from recipes import _flash_attention_backward_kernel as base
from recipes import _flash_attention_backward_passes as passes
from recipes._flash_attention_backward_columns import ColumnConsumer
from recipes._flash_attention_kernel import row_col
from recipes._flash_attention_varlen import row_chunks, sequence_bounds

BQ, BN, WG_KEYS, CONSUMERS = base.BQ, base.BN, base.WG_KEYS, base.CONSUMERS
ZERO_BARRIER = 6               # named barrier id past the padded kernel's (1 .. 5)


def packed_bounds(cu, seq, rows, name: str, warps: int):
    """(start, end) of sequence `seq` in cu (the varlen forward's sequence_bounds over a block
    of `warps` warps), clamped to the packed tensor's `rows`."""
    start, end = sequence_bounds(cu, seq, name, consumers=warps // 4 - 1)
    start = lk.minimum(start, rows)
    return start, lk.maximum(lk.minimum(end, rows), start)


def first_block(q_start, seq):
    """Sequence seq's first 64-row block in a head's rows of the f32 row buffers."""
    return q_start // BQ + seq


def backward_varlen_body(q: lk.Tensor[lk.bf16, 4], k: lk.Tensor[lk.bf16, 4],
                         v: lk.Tensor[lk.bf16, 4], do: lk.Tensor[lk.bf16, 4],
                         dk: lk.Tensor[lk.bf16, 4], dv: lk.Tensor[lk.bf16, 4],
                         dq_acc: lk.Tensor[lk.f32, 2], neg_lse2: lk.Tensor[lk.f32, 1],
                         delta: lk.Tensor[lk.f32, 1], cu_seqlens_q: lk.Tensor[lk.i32, 1],
                         cu_seqlens_k: lk.Tensor[lk.i32, 1], HEAD_BLOCKS: lk.i32,
                         GROUP: lk.i32, SCALE: lk.f32, SCALE_LOG2: lk.f32,
                         D: lk.constexpr, STAGES: lk.constexpr,
                         CAUSAL: lk.constexpr, DQ_SPLIT: lk.constexpr, DKV_SPLIT: lk.constexpr,
                         DQ_WRITE: lk.constexpr, DS_STORE: lk.constexpr, DQ_FIRST: lk.constexpr,
                         PRODUCER_REGISTERS: lk.constexpr, CONSUMER_REGISTERS: lk.constexpr,
                         BQ: lk.constexpr = BQ, DS_FIRST: lk.constexpr = False,
                         LONGEST_FIRST: lk.constexpr = False):
    """The kernel (module docstring). q, do (1, total_q, heads_q, D); k, v, dk, dv (1, total_k,
    heads_kv, D); dq_acc f32 (heads_q * head_rows, D) added into (zeroed by the pre-pass),
    neg_lse2, delta (heads_q * head_rows,) in its row order; HEAD_BLOCKS = head_rows / 64 (a
    parameter, not neg_lse2's extent / 64 heads_q: a quotient would take a register in the
    main loop, a parameter is read from the constant bank). Grid (ceil(max_seqlen_k / KEYS),
    heads_kv, batch), KEYS as the padded kernel's."""
    n_blk, hk, seq = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    # the bounds as cu_seqlens says (TMA clips loads at the tensors' ends); what is stored
    # is clamped to the tensors: dK, dV rows by their windows, dQ blocks by nq below
    q_start, q_end = sequence_bounds(cu_seqlens_q, seq, "cu_q")
    k_start, k_end = sequence_bounds(cu_seqlens_k, seq, "cu_k")
    Q, DO = (x.permute(1, 3, 2, 0).window(0, q_start, q_end) for x in (q, do))
    K, V = (x.permute(1, 3, 2, 0).window(0, k_start, k_end) for x in (k, v))
    stored_start = lk.minimum(k_start, k.shape[1])
    stored_end = lk.maximum(lk.minimum(k_end, k.shape[1]), stored_start)
    DK, DV = (x.permute(1, 3, 2, 0).window(0, stored_start, stored_end) for x in (dk, dv))
    SQ, SK, HQ = q_end - q_start, k_end - k_start, q.shape[2]
    b = 0                                   # the packed tensors' batch mode has extent 1
    KEYS = BN if DKV_SPLIT == "keys" else WG_KEYS
    m_begin, n_masked, nq, nqb = base.query_blocks(SQ, SK, n_blk, CAUSAL, KEYS)
    first = first_block(q_start, seq)
    nq = lk.minimum(lk.maximum(nq, 0), lk.maximum(HEAD_BLOCKS - first - m_begin, 0))
    n_masked = lk.minimum(n_masked, nq)     # (both bind only where cu_seqlens is malformed)
    buffers = base.shared_buffers(D, STAGES, KEYS, DKV_SPLIT, DQ_SPLIT, DQ_WRITE)

    def query_row(h, m):
        """Block row of the sequence's query block m of head h in the f32 row buffers."""
        return h * HEAD_BLOCKS + first + m
    base.roles(base.Env(**buffers, **locals()), consumer_kind(DKV_SPLIT),
               live=n_blk * KEYS < SK)


class VarlenMixin:
    """What a varlen consumer changes in the padded one (module docstring): the K rows past
    seqlen_k zeroed in shared memory (non-causal) and dK, dV stored with masked stores."""

    def run(self) -> None:
        if not self.e.CAUSAL:
            self.zero_keys_past_end()
        super().run()

    def zero_keys_past_end(self) -> None:
        """In the key block that crosses seqlen_k, this warpgroup's part of the K tile (its
        accumulator's rows and columns: its keys, or its columns of all keys) set to 0 on the
        keys at or past seqlen_k, once, before the ring: those rows hold the next sequence's
        keys, and with K = 0 there (as TMA's zero fill gives the padded kernel) they add
        nothing to dQ; P is clamped to <= 1, and their dK, dV rows are never stored. A 256-
        thread barrier, since either warpgroup's wgmmas may read the other's part."""
        e = self.e
        lk.sm90.mbarrier_wait(e.k_full[0], 0)
        with lk.if_((e.n_blk + 1) * e.KEYS > e.SK):
            layout = self.kv_layout
            part = self.sK_w if layout.tile[1] == e.D else \
                self.sK_w.tile(layout.tile, (0, self.wg))
            row0, _, drow, _ = row_col(layout, lk.sm90.thread_id_in_warpgroup())
            bound = lk.cast(e.SK - 1 - self.first_own_key() - row0, lk.i32)
            keep = lk.RegisterTensor(lk.bool_, layout, [(bound >= dr).value for dr in drow])
            values = lk.cast(lk.load(part.partition(layout)), lk.f32)
            lk.store(part.partition(layout), lk.cast(lk.where(keep, values, 0.0), lk.bf16))
            lk.sm90.fence_proxy_async()                  # generic stores, then wgmma reads
            lk.sm90.named_barrier_sync(ZERO_BARRIER, CONSUMERS * 128)

    def store_dkv(self, box: tuple, out_at: tuple, buf_at: tuple) -> None:
        """The box tiles of sK and sV at buf_at to those of DK and DV at out_at by the
        warpgroup's 128 threads, 16 bytes each, rows below the sequence's end only."""
        e = self.e
        tv = row_chunks(box[1])
        slab = tv.tile[:2] + (1, 1)
        for out, buf in ((e.DK, e.sK), (e.DV, e.sV)):
            rows, mine = out.tile(box, out_at), buf.tile(box, buf_at)
            for i in range(box[0] // slab[0]):
                values = lk.load(mine.tile(slab, (i, 0, 0, 0)).partition(tv))
                lk.store(rows.tile(slab, (i, 0, 0, 0)).partition(tv), values)


class VarlenConsumer(VarlenMixin, base.Consumer):
    """The padded kernel's consumer (keys split between the warpgroups), on a sequence."""


class VarlenColumnConsumer(VarlenMixin, ColumnConsumer):
    """The head_dim split's consumer (head dim 256), on a sequence."""


def consumer_kind(split: str) -> type:
    """The varlen consumer class of DKV_SPLIT `split`."""
    return VarlenColumnConsumer if split == "head_dim" else VarlenConsumer


def pre_pass_varlen_body(do: lk.Tensor[lk.bf16, 4], o: lk.Tensor[lk.bf16, 4],
                         lse: lk.Tensor[lk.f32, 2], neg_lse2: lk.Tensor[lk.f32, 1],
                         delta: lk.Tensor[lk.f32, 1], dq_acc: lk.Tensor[lk.f32, 2],
                         cu_seqlens_q: lk.Tensor[lk.i32, 1], D: lk.constexpr):
    """The padded pre-pass on sequences: do, o (1, total_q, heads_q, D), lse (heads_q,
    total_q); neg_lse2, delta (heads_q * head_rows,) and dq_acc (that many rows, D) written in
    the backward kernel's row order. Grid (ceil(max_seqlen_q / 64), heads_q, batch)."""
    m, h, seq = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    total, HQ = do.shape[1], do.shape[2]
    start, end = packed_bounds(cu_seqlens_q, seq, total, "cu_q", passes.THREADS // 32)
    rows = lk.maximum(neg_lse2.shape[0] // HQ, 1)       # head_rows (>= 1 for the tracer)
    lse_rows = lk.global_tensor(lse.ptr, lk.Layout((total, 1, HQ, 1),
                                                   (lse.stride[1], 0, lse.stride[0], 0)))
    with lk.if_(m * BQ < end - start):
        passes.pre_pass_block(
            *(x.permute(1, 3, 2, 0).window(0, start, end) for x in (do, o)),
            lse_rows.window(0, start, end),
            *(passes._padded(x, rows, c, HQ, 1) for x, c in ((delta, 1), (neg_lse2, 1),
                                                            (dq_acc, D))),
            m, first_block(start, seq) + m, h, 0, D)


def post_pass_varlen_body(dq_acc: lk.Tensor[lk.f32, 2], dq: lk.Tensor[lk.bf16, 4],
                          cu_seqlens_q: lk.Tensor[lk.i32, 1], SCALE: lk.f32, D: lk.constexpr):
    """dq (1, total_q, heads_q, D) = the sequences' rows of dq_acc (the pre-pass's order) *
    SCALE as bf16; rows of no sequence are not written. Grid as the pre-pass's."""
    m, h, seq = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    total, HQ = dq.shape[1], dq.shape[2]
    start, end = packed_bounds(cu_seqlens_q, seq, total, "cu_q", passes.THREADS // 32)
    rows = lk.maximum(dq_acc.shape[0] // HQ, 1)
    with lk.if_(m * BQ < end - start):
        passes.post_pass_block(passes._padded(dq_acc, rows, D, HQ, 1),
                               dq.permute(1, 3, 2, 0).window(0, start, end), SCALE, m,
                               first_block(start, seq) + m, h, 0, D)


backward_varlen_kernel = lk.kernel(backward_varlen_body, num_warps=base.WARPS)
pre_pass_varlen = lk.kernel(pre_pass_varlen_body, num_warps=passes.THREADS // 32)
post_pass_varlen = lk.kernel(post_pass_varlen_body, num_warps=passes.THREADS // 32)
