"""The kernel of recipes/flash_attention_varlen.py: the FlashAttention-3-class forward kernel of
recipes/_flash_attention_kernel.py (same roles, rings, ping-pong and online softmax, reused
from there) on packed variable-length batches.

One CTA per (BM-row query tile, head, sequence); the grid's x extent covers the longest
sequence. Each CTA reads its sequence's bounds from cu_seqlens_q and cu_seqlens_k (every thread
loads the same two elements of each: lk.index_value makes them kernel integers), clamped to 0
<= start <= end, and stores no row past the packed tensor: a malformed cu_seqlens gives wrong
rows, never an access outside the tensors (TMA clips its boxes at the tensors' ends). The
sequence's rows are windows of the packed tensors (GlobalTensor.window), so tile coordinates,
the key-block counts (`key_blocks`, bottom-right causal on the sequence's own lengths) and the
score mask are the padded kernel's, on the sequence's lengths. Where the tile starts past its
sequence, both roles skip their work (an lk.if_ inside each role: the CTA only initialises its
barriers and exits).

What differs from the padded kernel, and why:
- TMA boxes of Q, K and V go through the whole packed tensor's map at rows shifted by the
  sequence's start: rows past the sequence's end are the next sequence's (or zeros past the
  tensor). Keys there are masked to -inf like any key past seqlen_k (so P is 0 there and their V
  rows add nothing); query rows there compute rows that are never stored.
- O is stored from shared memory with masked 16-byte stores by the warpgroup's 128 threads,
  rows below the sequence's end only: a TMA box is not clipped at the sequence's end, so a tile
  that crosses it would overwrite the next sequence's first rows. The log-sum-exp rows are
  masked the same way (lse is (heads_q, total_q), FlashAttention's varlen layout).
"""
from __future__ import annotations

import layoutkit as lk
from layoutkit.algebra import Layout

from recipes import _flash_attention_kernel as base

BM, WG_ROWS, CONSUMERS, WARPS = base.BM, base.WG_ROWS, base.CONSUMERS, base.WARPS


def everyone(warps: int) -> lk.TVLayout:
    """Every thread of a block of `warps` warps on one element (the same for all)."""
    return lk.TVLayout((1,), Layout((32 * warps, 1), (0, 0)))


EVERYONE = everyone(WARPS)     # the default's block
CHUNK = 8                      # bf16 elements of one 16-byte store


def sequence_bounds(cu, seq, name: str, consumers: int = CONSUMERS):
    """(start, end) rows of sequence `seq`: cu[seq] and cu[seq + 1] (broadcast loads by every
    thread of the block of `consumers` consumer warpgroups, made kernel integers) clamped to 0
    <= start <= end."""
    threads = everyone(base.warps(consumers))
    first, last = (lk.index_value(lk.load(cu.tile((1,), (seq + i,)).partition(threads)),
                                  name=f"{name}{i}") for i in (0, 1))
    start = lk.maximum(first, 0)
    return start, lk.maximum(last, start)


def attention_varlen_body(q: lk.Tensor[lk.bf16, 4], k: lk.Tensor[lk.bf16, 4],
                          v: lk.Tensor[lk.bf16, 4], o: lk.Tensor[lk.bf16, 4],
                          lse: lk.Tensor[lk.f32, 2], cu_seqlens_q: lk.Tensor[lk.i32, 1],
                          cu_seqlens_k: lk.Tensor[lk.i32, 1], GROUP: lk.i32, SCALE_LOG2: lk.f32,
                          D: lk.constexpr, BN: lk.constexpr, STAGES: lk.constexpr,
                          CAUSAL: lk.constexpr, OVERLAP: lk.constexpr, PINGPONG: lk.constexpr,
                          PRODUCER_REGISTERS: lk.constexpr, CONSUMER_REGISTERS: lk.constexpr,
                          CONSUMERS: lk.constexpr, LONGEST_FIRST: lk.constexpr):
    """The kernel (see the module docstring). q, o are (1, total_q, heads_q, head_dim), k, v (1,
    total_k, heads_kv, head_dim), head_dim contiguous (= D); lse (heads_q, total_q); sequence s
    is rows cu_seqlens_q[s] .. cu_seqlens_q[s+1]-1 of q and o and cu_seqlens_k[s] ..
    cu_seqlens_k[s+1]-1 of k and v. Grid (ceil(max_seqlen_q / BM), heads_q, batch), BM = 64 *
    CONSUMERS, base.warps(CONSUMERS) warps."""
    h, seq = lk.block_id(1), lk.block_id(2)
    q_start, q_end = sequence_bounds(cu_seqlens_q, seq, "cu_q", CONSUMERS)
    k_start, k_end = sequence_bounds(cu_seqlens_k, seq, "cu_k", CONSUMERS)
    stored = lk.minimum(q_end, q.shape[1])       # no store past the packed tensor, whatever cu
    # the padded kernel's mode order (seqlen, head_dim, heads, batch), rows of this sequence
    Q = q.permute(1, 3, 2, 0).window(0, q_start, q_end)
    O = o.permute(1, 3, 2, 0).window(0, q_start, stored)
    K, V = (x.permute(1, 3, 2, 0).window(0, k_start, k_end) for x in (k, v))
    LSE = lse.permute(1, 0).window(0, q_start, stored)         # (total_q, heads_q)
    SQ, SK, HQ = q_end - q_start, k_end - k_start, q.shape[2]
    b = 0                                        # the packed tensors' batch mode has extent 1
    BM = WG_ROWS * CONSUMERS
    m_blk = base.query_tile(SQ, BM, CAUSAL and LONGEST_FIRST)   # of this sequence's tiles
    buffers = base.shared_buffers(D, BN, STAGES, CONSUMERS)
    hk = h // GROUP
    n_end, n_masked, DIAG1 = base.key_blocks(SQ, SK, m_blk, BN, CAUSAL, BM)
    base.roles(base.Env(**buffers, **locals()), live=lk.block_id(0) * BM < SQ,
               kind=VarlenConsumer)


def row_chunks(d: int) -> lk.TVLayout:
    """128 threads over a (128 * CHUNK // d, d, 1, 1) slab of O rows: thread t stores the 16
    bytes at column CHUNK * (t % (d / CHUNK)) of row t // (d / CHUNK)."""
    across = d // CHUNK
    tv = lk.tv_layout(Layout((128 // across, across), (across, 1)), Layout((1, CHUNK)))
    return lk.TVLayout(tv.tile + (1, 1), tv.layout)


class VarlenConsumer(base.Consumer):
    """The padded kernel's consumer warpgroup, storing O with masked plain stores."""

    def store_o(self) -> None:
        """This warpgroup's O rows, in sQ2 (written by its threads), to the sequence's rows of
        O: each thread reads 16-byte chunks back and stores those below the sequence's end."""
        e, wg = self.e, self.wg
        # the stores above overwrote Q, which wgmma (the async proxy) read: the protocol
        # check's proxy rule wants the fence between generic and async-proxy uses of bytes
        lk.sm90.fence_proxy_async()
        lk.sm90.named_barrier_sync(base.EPILOGUE_BARRIER + wg, 128)  # every thread's O written
        tv = row_chunks(e.D)
        slab = tv.tile[:2] + (1, 1)
        rows = e.O.tile((WG_ROWS, e.D, 1, 1), (e.m_blk * e.CONSUMERS + wg, 0, e.h, e.b))
        mine = e.sQ.tile((WG_ROWS, e.D, 1, 1), (wg, 0, 0, 0))
        for i in range(WG_ROWS // slab[0]):
            values = lk.load(mine.tile(slab, (i, 0, 0, 0)).partition(tv))
            lk.store(rows.tile(slab, (i, 0, 0, 0)).partition(tv), values)


attention_varlen_kernels = {n: lk.kernel(attention_varlen_body, num_warps=base.warps(n))
                            for n in base.CONSUMER_COUNTS}
attention_varlen_kernel = attention_varlen_kernels[CONSUMERS]     # the default's


def kernel_for(cfg: base.Config):
    """The varlen kernel object launched for cfg (warps(cfg.CONSUMERS) warps)."""
    return attention_varlen_kernels[cfg.CONSUMERS]
