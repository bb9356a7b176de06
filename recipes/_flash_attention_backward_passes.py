"""The pre- and post-pass kernels of recipes/flash_attention_backward.py, one CTA per (64-query
block, query head, batch), 128 threads walking the block in slabs of 2048 / d rows (16 values
per thread), each thread 8 consecutive head_dim columns (16-byte accesses) of 2 rows a slab:

    pre_pass:  D = rowsum(dO * O) (f32), neg_lse2 = -lse * log2 e, both in the backward
               kernel's row order (batch, head, query) padded to whole blocks of the kernel's
               step (ROWS = 64 or 128 queries: D = 0, neg_lse2 = -inf on padding rows); the
               block's rows of the f32 dQ accumulator zeroed
    post_pass: dq = dQ_acc * scale as bf16, the padding rows dropped

The accumulator and the row vectors are seen as (sqp, d, heads_q, batch) and (sqp, 1,
heads_q, batch) tensors (sqp = seqlen_q padded to a multiple of ROWS), so every tile here is
the same (slab, d, 1, 1) shape as the (seqlen, d, heads, batch) views of q, dO, O and dq.
"""
from __future__ import annotations

import math

import layoutkit as lk

BQ = 64                           # query rows per CTA (a block of the kernel's step)
THREADS = 128
COLUMNS = 8                       # consecutive head_dim columns per thread (16 bytes of bf16)
VALUES = 16                       # per thread and slab: few registers, many CTAs per SM
LOG2E = math.log2(math.e)


def slab_rows(d: int) -> int:
    """Rows of one slab: 16 values for each of the 128 threads."""
    return THREADS * VALUES // d


def rows_layout(d: int) -> lk.TVLayout:
    """(slab, d, 1, 1) tile: thread t holds columns (t % g) * 8 .. + 7 (g = d / 8 column
    groups) of rows t // g and t // g + 128 / g."""
    groups, rows = d // COLUMNS, slab_rows(d)
    per_pass = THREADS // groups
    return lk.TVLayout((rows, d, 1, 1),
                       lk.Layout(((groups, per_pass), (COLUMNS, rows // per_pass)),
                                 ((rows * COLUMNS, 1), (rows, per_pass))))


def _padded(x: lk.GlobalTensor, sqp, cols, hq, batch) -> lk.GlobalTensor:
    """A contiguous (batch * heads * sqp, cols) f32 buffer as (sqp, cols, heads, batch)."""
    return lk.global_tensor(x.ptr, lk.Layout((sqp, cols, hq, batch),
                                             (cols, 1, sqp * cols, hq * sqp * cols)))


def pre_pass_body(do: lk.Tensor[lk.bf16, 4], o: lk.Tensor[lk.bf16, 4], lse: lk.Tensor[lk.f32, 3],
                  neg_lse2: lk.Tensor[lk.f32, 1], delta: lk.Tensor[lk.f32, 1],
                  dq_acc: lk.Tensor[lk.f32, 2], D: lk.constexpr, ROWS: lk.constexpr = BQ):
    """do, o (batch, seqlen_q, heads_q, D), lse (batch, heads_q, seqlen_q); neg_lse2, delta
    (batch * heads_q * sqp,) and dq_acc (that many rows, D) written, sqp = seqlen_q padded to a
    multiple of ROWS. Grid (sqp / 64, heads_q, batch)."""
    SQ, HQ, B = do.shape[1], do.shape[2], do.shape[0]
    sqp = -(-SQ // ROWS) * ROWS
    m, h, b = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    # lse as (seqlen_q, 1, heads, batch): +inf past seqlen_q gives neg_lse2 = -inf there
    lse_rows = lk.global_tensor(lse.ptr, lk.Layout((SQ, 1, HQ, B), (lse.stride[2], 0,
                                                                   lse.stride[1], lse.stride[0])))
    pre_pass_block(do.permute(1, 3, 2, 0), o.permute(1, 3, 2, 0), lse_rows,
                   *(_padded(x, sqp, c, HQ, B) for x, c in ((delta, 1), (neg_lse2, 1),
                                                            (dq_acc, D))), m, m, h, b, D)


def pre_pass_block(DO, O, LSE, DELTA, NEG_LSE2, DQ_ACC, m, out_m, h, b, D: int) -> None:
    """The pre-pass of one 64-row query block: rows of block m of DO, O (seqlen, D, heads,
    batch) and LSE (seqlen, 1, heads, batch; +inf past its rows) give rows of block out_m of
    DELTA, NEG_LSE2 (rows, 1, heads, batch) and zeroed DQ_ACC (rows, D, heads, batch)."""
    tv = rows_layout(D)
    slabs = BQ // tv.tile[0]
    for t in lk.range(0, slabs):
        where = (m * slabs + t, 0, h, b)
        at = where if out_m is m else (out_m * slabs + t, 0, h, b)
        x, y = (lk.load(z.tile(tv.tile, where).partition(tv)) for z in (DO, O))
        sums = lk.reduce_sum(lk.cast(x, lk.f32) * lk.cast(y, lk.f32), 1)  # 0 on padding rows
        rows = sums.layout
        neg = lk.load(LSE.tile(rows.tile, where).partition(rows), other=math.inf) * -LOG2E
        with lk.if_(lk.eq(lk.thread_id() % (D // COLUMNS), 0)):      # one thread per row
            for values, view in ((sums, DELTA), (neg, NEG_LSE2)):
                lk.store(view.tile(rows.tile, at).partition(rows), values)
        lk.store(DQ_ACC.tile(tv.tile, at).partition(tv), lk.full(tv, 0.0))


def post_pass_body(dq_acc: lk.Tensor[lk.f32, 2], dq: lk.Tensor[lk.bf16, 4], SCALE: lk.f32,
                   D: lk.constexpr, ROWS: lk.constexpr = BQ):
    """dq (batch, seqlen_q, heads_q, D) = dq_acc's rows (pre_pass's order, seqlen_q padded to a
    multiple of ROWS) * SCALE as bf16. Grid (ceil(seqlen_q / 64), heads_q, batch)."""
    SQ, HQ, B = dq.shape[1], dq.shape[2], dq.shape[0]
    sqp = -(-SQ // ROWS) * ROWS
    m, h, b = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    post_pass_block(_padded(dq_acc, sqp, D, HQ, B), dq.permute(1, 3, 2, 0), SCALE, m, m, h, b,
                    D)


def post_pass_block(DQ_ACC, DQ, SCALE, m, acc_m, h, b, D: int) -> None:
    """The post-pass of one 64-row query block: rows of block m of DQ (seqlen, D, heads,
    batch) = rows of block acc_m of DQ_ACC (rows, D, heads, batch) * SCALE as bf16."""
    tv = rows_layout(D)
    slabs = BQ // tv.tile[0]
    for t in lk.range(0, slabs):
        where = (m * slabs + t, 0, h, b)
        at = where if acc_m is m else (acc_m * slabs + t, 0, h, b)
        acc = lk.load(DQ_ACC.tile(tv.tile, at).partition(tv))
        lk.store(DQ.tile(tv.tile, where).partition(tv), lk.cast(acc * SCALE, lk.bf16))


pre_pass = lk.kernel(pre_pass_body, num_warps=THREADS // 32)
post_pass = lk.kernel(post_pass_body, num_warps=THREADS // 32)
