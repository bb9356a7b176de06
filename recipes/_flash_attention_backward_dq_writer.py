"""DQ_WRITE = "producer_warps" of recipes/_flash_attention_backward_kernel.py: the consumer
warpgroups hand each step's dQ part to warps 1-3 of the producer warpgroup (idle otherwise)
through one shared f32 tile instead of reducing it into the global dQ accumulator themselves,
so their 64 x head_dim reductions per step leave the wgmma warpgroups' critical path:

    consumers, per step (after dQ = dS K retired):  [sync DQ_EMPTY] dQ -> sdQ  [arrive DQ_FULL]
    writer warps, per step:  [arrive DQ_EMPTY] [sync DQ_FULL] sdQ (summed over the consumers'
                             partials when DQ_SPLIT = "keys") -> red.global.add.v4.f32

One named-barrier pair, each step's arrive on one side matched by a sync on the other (the
writers announce "sdQ free for step i" only after reading step i-1's), so the barriers never
mix steps. sdQ: DQ_SPLIT "head_dim", one (64 queries, head_dim) tile, each warpgroup its half
of the columns; "keys", one tile per consumer, each warpgroup's full-width partial over its
own keys, summed by the writers (one reduction per dQ element per CTA). Rows are 8 floats
laid out so that both sides' accesses are free of bank conflicts (sdq_layout).

DQ_WRITE = "tma_reduce": the same hand-off, one shared tile per consumer warpgroup, each
reduced into the accumulator by a TMA reduce-add (`cp.reduce.async.bulk.tensor ... .add`)
that one lane of writer warp 1 issues; the TMA unit reads the tile and adds it in L2:

    consumer w, per step:  [sync TMA_EMPTY[w]] dQ -> sdQ[w]; fence.proxy.async [arrive TMA_FULL[w]]
    lane 0 of warp 1:      for w: [wait until tile w of the last step is read] [arrive TMA_EMPTY[w]]
                           for w: [sync TMA_FULL[w]] TMA reduce-add sdQ[w] -> dQ rows; commit

A warpgroup's hand-off waits only for its own tile (two barrier pairs), and the reductions
cost the issuing lane one instruction per tile instead of the 16-byte reductions of three warps
(tma_sdq_layout: 128-byte swizzled f32, the tensor map's box layout; DQ_SPLIT "head_dim" each
warpgroup's half of the columns, "keys" each its full-width partial, the two added in L2,
"rows" each its 64 of a 128-row step).
"""
from __future__ import annotations

import layoutkit as lk

DQ_FULL, DQ_EMPTY = 7, 8    # named barrier ids past the kernel's 1..5 and the varlen kernel's 6
TMA_FULL, TMA_EMPTY = (7, 8), (9, 10)   # tma_reduce: one pair per consumer warpgroup
TMA_WARP = 1                        # of the producer warpgroup: its lane 0 issues the reductions
CONSUMERS = 2         # the kernel's consumer warpgroups (its module takes them from here)
TMA_THREADS = 128 + 32              # a consumer warpgroup and the issuing warp
WRITER_WARPS = (1, 2, 3)            # of the producer warpgroup (warp 0 issues the TMA loads)
VALUES = 16                         # f32 per writer thread and slab, 4 at a time (16 bytes)
THREADS = 128 * CONSUMERS + 32 * len(WRITER_WARPS)     # the consumers and the writer warps


def parts(dq_split: str) -> int:
    """Partial dQ tiles in sdQ: one per consumer when each sums over its own keys only."""
    return 2 if dq_split == "keys" else 1


def sdq_layout(D: int, dq_split: str) -> lk.Layout:
    """(64 queries, D columns, part) f32, compact; row r = r0 + 4 r1, column c = c0 + 8 c1 at
    8 r0 + c0 + 32 c1 + 4 D r1: the 4 rows and 8 columns a half-warp's 8-byte accumulator
    stores touch (and a quarter-warp's 16-byte slab loads) fill the 32 banks once."""
    return lk.Layout(((4, 16), (8, D // 8), parts(dq_split)),
                     ((8, 4 * D), (1, 32), 64 * D))


SLAB = (4, 32)      # rows (one r1 of sdq_layout), columns a writer warp reduces at once: 4
                    # values per lane (8 summing two partials) in the producer's 24 registers


def slab_layout() -> lk.TVLayout:
    """The (4, 32) slab over the producer warpgroup's 128 threads, every warp the whole slab
    (warp stride 0: each writer warp walks its own slabs), one 16-byte column run per lane:
    columns 4 (l % 2) + 8 (l // 8) .. + 3 of row (l // 2) % 4 for lane l."""
    return lk.TVLayout(SLAB, lk.Layout(((2, 4, 4, 4), 4), ((16, 1, 32, 0), 4)))


def consumer_hand_off(e, dQ, part: int, col: int) -> None:
    """Consumer side of one step: this warpgroup's dQ accumulator (64 x dQ columns, column
    block `col` of that width) into sdQ's tile `part`, once the writers have read the last."""
    lk.sm90.named_barrier_sync(DQ_EMPTY, THREADS)
    width = dQ.layout.tile[1]
    tile = e.sdQ[:, :, part].tile((64, width), (0, col))
    lk.store(tile.partition(dQ.layout), dQ)
    lk.sm90.named_barrier_arrive(DQ_FULL, THREADS)


def write_dq(e) -> None:
    """Writer warps (inside the producer role, warps 1-3): every step's sdQ into its 64 rows
    of the dQ accumulator (e.query_row), in the consumers' step order."""
    tv, (rows, cols) = slab_layout(), SLAB
    # warps 1, 2, 3 start at slab rows 0, 1, 2 (written so the start is provably >= 0)
    first = (lk.warp_id() + 4 - WRITER_WARPS[0]) % 4
    # rows padded to 64 (unmasked); contiguous, as the host allocates it: static strides keep
    # the address arithmetic inside the producer's 24 registers
    dq_acc = lk.global_tensor(e.dq_acc.ptr, lk.Layout((e.dq_acc.shape[0], e.D), (e.D, 1)), None)
    for g in lk.range(0, e.GROUP):
        h = e.hk * e.GROUP + g
        for j in lk.range(0, e.nq):
            # one kernel integer per step: the slab loop's addresses then add to it
            row = lk.index_value(lk.cast(e.query_row(h, e.m_begin + j), lk.i64), lo=0)
            lk.sm90.named_barrier_arrive(DQ_EMPTY, THREADS)
            lk.sm90.named_barrier_sync(DQ_FULL, THREADS)
            block = dq_acc.tile((64, e.D), (row, 0))
            for r in lk.range(first, 64 // rows, len(WRITER_WARPS)):
                # one column slab at a time where nothing is summed (a Python loop there
                # let ptxas hoist all four at head dim 128 and spill at some shapes)
                for c in (lk.range(0, e.D // cols) if parts(e.DQ_SPLIT) == 1 else
                          range(e.D // cols)):
                    sums = None
                    for part in range(parts(e.DQ_SPLIT)):
                        x = lk.load(e.sdQ[:, :, part].tile(SLAB, (r, c)).partition(tv))
                        sums = x if sums is None else sums + x
                    lk.atomic_add(block.tile(SLAB, (r, c)).partition(tv), sums)


def tile_at(dq_split: str, row, wg: int) -> tuple:
    """(64-row block, column block) in the dQ accumulator of consumer `wg`'s dQ tile for the
    step at block `row` (in steps' rows): DQ_SPLIT "rows" its 64 of the step's 128 rows,
    "head_dim" and "keys_summed" its half of the columns, "keys" the whole step."""
    if dq_split == "rows":
        return row * CONSUMERS + wg, 0
    return row, wg if dq_split in ("head_dim", "keys_summed") else 0


def tile_columns(D: int, dq_split: str) -> int:
    """dQ columns of one consumer warpgroup's tile: half of them with DQ_SPLIT "head_dim"."""
    return D // 2 if dq_split == "head_dim" else D


def tma_sdq_layout(D: int, dq_split: str) -> lk.ComposedLayout:
    """(64 queries, columns, consumer) f32 for DQ_WRITE "tma_reduce": each consumer's tile
    (tile_columns) in the TMA box layout, 128-byte swizzled rows of 32 floats, column blocks of
    64 such rows."""
    cols = tile_columns(D, dq_split)
    atom = 128 // lk.f32.nbytes                 # floats in one 128-byte swizzled row
    inner = lk.Layout((64, (atom, cols // atom), CONSUMERS),
                      (atom, (1, 64 * atom), 64 * cols))
    return lk.ComposedLayout(lk.sm90.tma_swizzle("128B", lk.f32.nbytes), 0, inner)


def consumer_hand_off_tma(e, dQ, wg: int) -> None:
    """Consumer `wg`'s side of one step: its dQ tile into sdQ[wg] once the TMA has read the
    last step's, fenced for the async proxy, then announced to the issuing lane."""
    lk.sm90.named_barrier_sync(TMA_EMPTY[wg], TMA_THREADS)
    lk.store(e.sdQ[:, :, wg].partition(dQ.layout), dQ)
    lk.sm90.fence_proxy_async()                 # generic stores, then the TMA's reads
    lk.sm90.named_barrier_arrive(TMA_FULL[wg], TMA_THREADS)


def write_dq_tma(e) -> None:
    """Writer warp 1 (inside the producer role): every step's consumer tiles reduce-added into
    its 64 rows of the dQ accumulator (e.query_row), in the consumers' step order; lane 0 issues
    the TMA reductions and waits for their reads, the warp's 32 threads take part in the
    barriers."""
    cols = tile_columns(e.D, e.DQ_SPLIT)
    issuer = lk.eq(lk.lane_id(), 0)
    for g in lk.range(0, e.GROUP):
        h = e.hk * e.GROUP + g
        for j in lk.range(0, e.nq):
            row = e.query_row(h, e.m_begin + j)
            for w in range(CONSUMERS):
                with lk.if_(issuer):            # tile w of the last step read: it may be reused
                    lk.sm90.tma_store_wait(CONSUMERS - 1 - w)
                lk.sm90.named_barrier_arrive(TMA_EMPTY[w], TMA_THREADS)
            for w in range(CONSUMERS):
                lk.sm90.named_barrier_sync(TMA_FULL[w], TMA_THREADS)
                at = tile_at(e.DQ_SPLIT, row, w)
                with lk.if_(issuer):
                    lk.sm90.tma_store(e.dq_acc.tile((64, cols), at), e.sdQ[:, :, w],
                                      reduce="add")
                    lk.sm90.tma_store_commit()
    with lk.if_(issuer):
        lk.sm90.tma_store_wait(0)               # the CTA's shared memory read before it exits
