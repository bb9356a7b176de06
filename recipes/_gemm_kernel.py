"""The warp-specialized persistent GEMM pipeline that recipes/gemm_hopper.py (bf16) and
recipes/gemm_fp8.py (e4m3/e5m2 with scales) both run: `gemm_tiles`, called inside a kernel
body at trace time, with the element types taken from the tensors and the epilogue a function.

    persistent grid: min(#resident, #tiles) CTAs (or 2-CTA clusters); unit u takes output tiles
    u, u + units, ... in a grouped order (GROUP_M tile-rows at a time, so concurrent CTAs share
    A and B tiles in L2)

    warpgroup 0, producer (40 registers): one elected thread, per tile and k-step:
        wait empty[s] (phase from the ring counter) -> expect_tx(full[s]) { TMA A tile, TMA B tile }
    warpgroups 1, 2, consumers (232 registers), each owning 64 rows of the BM=128-row tile:
        per k-step: wait full[s] -> wgmma 64 x BN x BK -> commit -> wait_group 1 (the previous
                    k-step's wgmma is done) -> arrive empty[previous s]
        epilogue:   wait_group 0, release the last stage; per EPI-column chunk of the
                    accumulator: epilogue(chunk, fragment) (f32: scales, bias, ... loaded in the
                    chunk's layout), cast to C's type into the warpgroup's swizzled half of the
                    C tile in shared memory; fence.proxy.async; named barrier over the
                    warpgroup; one thread TMA-stores it (clipped at M, N)
        a fused epilogue's loads (recipes/_epilogues.py FusedEpilogue): before the tile's
                    main loop, thread 0 TMAs chunk 0 of C / a residual of C's type into its
                    half of the C tile (staged_full[wg], read after the loop) and the first
                    chunks' other loads are issued into registers; later chunks' loads go one
                    chunk ahead, before the previous chunk's store

Every shared tile is made of 128-byte swizzled rows: a k-step is one such row of A and of B
(BK = 128 bytes = 64 bf16 or 128 fp8 elements, 4 wgmma instructions either way) and an
epilogue chunk is 64 rows x 256 bytes of C per consumer (128 bf16 or 64 f32 columns), so the
ring's bytes and the shared-memory budget are the same for every element type. The stage and
phase of both sides come from one counter, `tile_iteration * K_TILES + k` (lk.sm90.producer_state
/ consumer_state). Ragged M, N, K are exact through TMA bounds: loads past the edge fill zeros
and stores past the edge are dropped. CLUSTER = 2: pairs of CTAs along M share each B tile,
every CTA TMA-multicasting half of it to both; a stage is free once the consumers of both CTAs
released it.
"""
from __future__ import annotations

from dataclasses import dataclass

import layoutkit as lk
from layoutkit.algebra import ComposedLayout, Layout
from layoutkit.ptx.isa import smem_swizzle

SWIZZLE = "128B"              # every shared tile: rows of 128 bytes, the widest swizzle
ROW_BYTES = smem_swizzle.span(SWIZZLE)      # 128: one swizzled row
EPILOGUE_BYTES = 256          # columns of C per epilogue chunk, in bytes (64 rows per consumer)
CONSUMERS = 2                 # consumer warpgroups of the default BM = 128 tile, 64 rows each
WG_ROWS = 64                  # rows of one wgmma (m64)
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 40, 232
WARPS = 4 * (1 + CONSUMERS)
TILE_N = (64, 128, 256)       # BN: a wgmma N made of whole 128-byte rows of every C chunk
TILE_M = (WG_ROWS, CONSUMERS * WG_ROWS)     # BM: one or two consumer warpgroups


def warps(bm: int) -> int:
    """Warps of the kernel of a BM-row tile: the producer warpgroup and one consumer
    warpgroup per 64 rows."""
    return 4 * (1 + bm // WG_ROWS)


def row_elements(dtype) -> int:
    """Elements of `dtype` in one 128-byte swizzled row: the k-step BK of A and B (64 bf16, 128
    fp8) and the TMA box width."""
    return ROW_BYTES // dtype.nbytes


def _swizzle(dtype):
    return lk.sm90.tma_swizzle(SWIZZLE, dtype.nbytes)


def k_major(rows: int, stages: int, dtype) -> ComposedLayout:
    """A ring of `stages` rows x BK tiles, K contiguous, 128-byte swizzle (TMA box {BK, rows}):
    the canonical K-major wgmma operand."""
    bk = row_elements(dtype)
    return ComposedLayout(_swizzle(dtype), 0, Layout((rows, bk, stages), (bk, 1, rows * bk)))


def n_major(n: int, stages: int, dtype) -> ComposedLayout:
    """A ring of BK (K) x n tiles stored N-major in BK-column chunks of BK rows x 128 bytes,
    128-byte swizzle: a K x N tile of a row-major B (TMA boxes {BK, BK}; 16-bit types only,
    wgmma transposes no others)."""
    bk = row_elements(dtype)
    return ComposedLayout(_swizzle(dtype), 0, Layout((bk, (bk, n // bk), stages),
                                                     (bk, (1, bk * bk), n * bk)))


def c_tile(bm: int, bn: int, dtype) -> ComposedLayout:
    """The bm x bn output tile in chunks of bm rows x 128 bytes (TMA store boxes of one
    128-byte row wide per consumer's half)."""
    w = row_elements(dtype)
    return ComposedLayout(_swizzle(dtype), 0, Layout((bm, (w, bn // w)), (w, (1, w * bm))))


def epilogue_columns(bn: int, dtype) -> int:
    """Columns of C one epilogue chunk holds (EPILOGUE_BYTES of them, at most BN)."""
    return min(bn, EPILOGUE_BYTES // dtype.nbytes)


@dataclass(frozen=True)
class Config:
    """One tile configuration: BM x BN output tile (BM 64: one consumer warpgroup, 128: two),
    STAGES in the ring, GROUP_M raster, CLUSTER CTAs along M sharing B, SPLIT_K CTAs per output
    tile over K ranges (their f32 partials summed by a second kernel). BK is one 128-byte row
    of the operand type (row_elements). SWAP: the operands swapped (recipes/_gemm_swap_kernel.py,
    for few rows of A): a tile is BM rows of B^T (weight rows, C's columns) by BN rows of A
    (tokens, any multiple of 8), CLUSTER 1, GROUP_M unused, SPLIT_K the consumer warpgroups
    per 64 weight rows that share a tile's k-steps in the CTA (1 or 2; BM * SPLIT_K <= 128)."""

    BN: int = 256
    STAGES: int = 3
    GROUP_M: int = 8
    CLUSTER: int = 2
    BM: int = CONSUMERS * WG_ROWS
    SPLIT_K: int = 1
    SWAP: bool = False

    def smem_bytes(self, c=lk.bf16) -> int:
        """Shared memory of the ring (the same bytes for every operand type) and the buffer of
        one C chunk of type `c` (barriers aside; the swapped kernel stores C from registers)."""
        stage = (self.BM + self.BN) * ROW_BYTES
        if self.SWAP:       # and parts 1.. of a split tile hand over their f32 sums
            return self.STAGES * stage + self.BM * (self.SPLIT_K - 1) * self.BN * 4
        return self.STAGES * stage + self.BM * epilogue_columns(self.BN, c) * c.nbytes


class Fragment:
    """Where one epilogue chunk lies in C: the chunk's accumulator values are C's elements of
    the `tile` (rows x columns) at tile coordinate `coord`, in the wgmma accumulator `layout`."""

    def __init__(self, tile: tuple, coord: tuple, layout):
        self.tile, self.coord, self.layout = tile, coord, layout

    def load(self, t, other: float = 0.0):
        """The elements of `t`, an M x N global tensor of any strides (a Tensor parameter, e.g.
        a bias expanded to (M, N) with strides (0, 1)), at the chunk's positions, as a register
        tensor in the chunk's layout. Positions past M or N read `other`; a stride-0 (broadcast)
        mode is not masked, so each distinct element is loaded once."""
        return lk.load(broadcast_view(t).tile(self.tile, self.coord).partition(self.layout),
                       other=other)


def broadcast_view(t):
    """The global tensor `t` with its stride-0 modes unmasked (lk.global_tensor bounds None:
    every coordinate along such a mode reads the same element)."""
    bounds = tuple(None if isinstance(s, int) and s == 0 else n
                   for n, s in zip(t.shape, t.stride))
    return lk.global_tensor(t.ptr, t.layout, bounds)


def split_rows(tiles_m: int, cluster: int, bm: int) -> int:
    """Rows of one K range's slab of the split-K workspace: whole cluster rows of tiles, so the
    tiles a cluster's CTA computes past M stay inside its own slab."""
    return -(-tiles_m // cluster) * cluster * bm


def b_operand(sB, stage, B_MAJOR: str):
    """Stage `stage` of the B ring as wgmma's B operand (BN x BK; an N-major ring transposed)."""
    return sB[:, :, stage] if B_MAJOR == "K" else sB[:, :, stage].T


def a_operand(sA, stage, wg: int, BK: int, A_MAJOR: str = "K"):
    """Consumer wg's 64 rows of stage `stage` of the A ring as wgmma's A operand (64 x BK): a
    K-major ring's rows, or an MN-major ring's (n_major: BK x rows, 16-bit types) transposed."""
    tile = sA[:, :, stage] if A_MAJOR == "K" else sA[:, :, stage].T
    return tile.tile((WG_ROWS, BK), (wg, 0))


def load_k_steps(sA, sB, full, empty, a_tile, b_tile, *, first, steps, STAGES, multicast=None):
    """The producer's k-steps 0..steps-1 of one output tile, at ring counter first + k: wait
    empty[s], then (one elected thread) expect_tx(full[s]) { TMA a_tile(k) -> sA[s], TMA
    b_tile(k) -> sB[s] } (a_tile, b_tile: k -> the global tile of that k-step)."""
    for k in lk.range(0, steps):
        p = lk.sm90.producer_state(first + k, STAGES)
        lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
        with lk.sm90.elect_one(), lk.sm90.expect_tx(full[p.stage]):
            lk.sm90.tma_load(sA[:, :, p.stage], a_tile(k), full[p.stage])
            lk.sm90.tma_load(sB[:, :, p.stage], b_tile(k), full[p.stage], multicast=multicast)


def mma_k_steps(sA, sB, full, release, *, wg, first, steps, STAGES, BN, BK, B_MAJOR,
                promote=0, after_first=None):
    """One consumer warpgroup's k-steps 0..steps-1 of one output tile (its 64 rows `wg` of the
    A tile), at ring counter first + k: wait full[s] -> wgmma 64 x BN x BK -> commit ->
    wait_group 1 -> release(previous stage); then wait_group 0 and release(last stage).
    `release(stage)` hands a stage back to the producer(s). Returns the f32 accumulator.
    promote > 0: the wgmma accumulator holds `promote` k-steps at a time, then is added into
    an f32 register accumulator (fp8: the tensor cores sum with fewer bits than f32).
    `after_first()` runs once k-step 0's wgmma is issued (promote > 0: before the first one),
    outside the loop: work whose waits the tensor cores hide (the epilogue's loads)."""
    if promote:
        if after_first is not None:      # issued before the loop: their waits come at first use
            after_first()
        return _promoted_k_steps(sA, sB, full, release, wg=wg, first=first, steps=steps,
                                 STAGES=STAGES, BN=BN, BK=BK, B_MAJOR=B_MAJOR, promote=promote)
    start, acc = 0, lk.sm90.wgmma_accumulator(BN)
    if after_first is not None:          # k-step 0 peeled off the loop
        acc = _mma_k_step(sA, sB, full, release, acc, 0, False, wg=wg, first=first,
                          STAGES=STAGES, BK=BK, B_MAJOR=B_MAJOR, pending=None)
        after_first()                    # (its waits overlap k-step 0's wgmma)
        lk.sm90.wgmma_wait(0)
        start = 1
    loop = lk.range(start, steps, carry=(acc,))
    for k, (acc,) in loop:
        acc = _mma_k_step(sA, sB, full, release, acc, k, k > 0, wg=wg, first=first,
                          STAGES=STAGES, BK=BK, B_MAJOR=B_MAJOR)
        loop.next(acc)
    (acc,) = loop.results
    lk.sm90.wgmma_wait(0)
    release((lk.sm90.consumer_state(first, STAGES).stage + steps - 1) % STAGES)
    return acc


def _mma_k_step(sA, sB, full, release, acc, k, accumulate, *, wg, first, STAGES, BK, B_MAJOR,
                pending=1):
    """k-step k of mma_k_steps: wait full[s] -> wgmma (acc + or, where `accumulate` is false,
    in place of acc) -> commit -> wait_group 1 -> release(previous stage) when k > 0
    (pending None: no wait_group, no release; k-step 0 peeled, its caller waits)."""
    s = lk.sm90.consumer_state(first + k, STAGES)
    lk.sm90.mbarrier_wait(full[s.stage], s.phase)
    lk.sm90.wgmma_fence()
    acc = lk.sm90.wgmma(acc, a_operand(sA, s.stage, wg, BK),
                        b_operand(sB, s.stage, B_MAJOR), accumulate=accumulate)
    lk.sm90.wgmma_commit()
    if pending is not None:
        lk.sm90.wgmma_wait(pending)    # the previous k-step's wgmma has finished:
        with lk.if_(k > 0):            # its stage goes back to the producer(s)
            release((s.stage + STAGES - 1) % STAGES)
    return acc


PROMOTE_COLUMNS = 128     # columns of the promoted wgmma accumulator: 64 registers a thread


def _promoted_k_steps(sA, sB, full, release, *, wg, first, steps, STAGES, BN, BK, B_MAJOR,
                      promote):
    """mma_k_steps in groups of `promote` k-steps, the tile's BN columns in parts of
    PROMOTE_COLUMNS: per group and part, the part's wgmmas over the group's stages start the
    wgmma accumulator afresh (scale-d 0), then wait_group 0 and total[part] += accumulator, so a
    thread holds BN / 2 + 64 f32 registers (192 at BN 256) where one accumulator per total
    would take BN. The first part waits full[s]; the last releases each stage once its wgmma
    has read it (the group's last one after its wait_group 0). Consumer wg's groups are shifted
    by wg * promote // 2 k-steps (its first group that much shorter), so the two warpgroups'
    drains fall apart and the other's wgmmas keep the tensor cores busy. Returns the BN-wide
    total, f32 in the accumulator layout."""
    part = min(BN, PROMOTE_COLUMNS)
    parts = BN // part
    shift = wg * promote // 2 % promote
    groups = (steps + shift + promote - 1) // promote
    part_layout = lk.sm90.wgmma_accumulator_layout(part)
    totals = tuple(lk.full(part_layout, 0.0) for _ in range(parts))
    outer = lk.range(0, groups, carry=(*totals, lk.sm90.wgmma_accumulator(part)))
    for g, carried in outer:
        totals, acc = list(carried[:parts]), carried[parts]
        start = lk.maximum(g * promote - shift, 0) if shift else g * promote
        end = lk.minimum(g * promote - shift + promote, steps)
        for p in range(parts):
            last = p == parts - 1
            inner = lk.range(start, end, carry=(acc,))
            for k, (acc,) in inner:
                s = lk.sm90.consumer_state(first + k, STAGES)
                if p == 0:
                    lk.sm90.mbarrier_wait(full[s.stage], s.phase)
                lk.sm90.wgmma_fence()
                acc = lk.sm90.wgmma(acc, a_operand(sA, s.stage, wg, BK),
                                    b_operand(sB, s.stage, B_MAJOR).tile((part, BK), (p, 0)),
                                    accumulate=k > start)
                lk.sm90.wgmma_commit()
                if last:
                    lk.sm90.wgmma_wait(1)      # the previous k-step's wgmma has read its stage
                    with lk.if_(k > start):
                        release((s.stage + STAGES - 1) % STAGES)
                inner.next(acc)
            (acc,) = inner.results
            lk.sm90.wgmma_wait(0)
            totals[p] = totals[p] + acc
        release(lk.sm90.consumer_state(first + end - 1, STAGES).stage)
        outer.next(*totals, acc)
    totals = outer.results[:parts]
    return lk.RegisterTensor(lk.f32, lk.sm90.wgmma_accumulator_layout(BN),
                             [v for t in totals for v in t.values])


def accumulator_chunk(acc, chunk_layout, j: int):
    """Chunk j of the accumulator as a register view: values [j*v, (j+1)*v) are columns
    [j*EPI, (j+1)*EPI) in the EPI-wide accumulator layout `chunk_layout` (the wgmma
    accumulator layout repeats every 8 columns)."""
    per_chunk = chunk_layout.num_values
    return lk.RegisterTensor(lk.f32, chunk_layout, acc.values[j * per_chunk:(j + 1) * per_chunk])


def store_chunk(C, at, chunk, mine, chunk_layout, wg: int):
    """One consumer's f32 chunk, cast to C's type, to tile `at` of C (tiles of chunk_layout's
    shape) by TMA through `mine`, its warpgroup's part of the C buffer: wait for the previous
    store's read of `mine`, named barrier, st.shared, fence.proxy.async, named barrier, one
    thread's TMA store (clipped at C's extents, not at a window's end)."""
    # the previous chunk's TMA store has read sC before it is rewritten
    with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
        lk.sm90.tma_store_wait(0)
    lk.sm90.named_barrier_sync(1 + wg, 128)
    lk.store(mine.partition(chunk_layout), lk.cast(chunk, C.dtype))
    lk.sm90.fence_proxy_async()
    lk.sm90.named_barrier_sync(1 + wg, 128)
    with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
        lk.sm90.tma_store(C.tile(chunk_layout.tile, at), mine)
        lk.sm90.tma_store_commit()


PREFETCH_BYTES = 128      # registers per consumer thread for epilogue loads held over a main loop
CHUNK_LOAD_BYTES = 256    # at most, per thread and chunk, beside the accumulator (more spilled)


def chunk_columns(epilogue, bn: int, c_dtype) -> int:
    """The epilogue chunk's columns (epilogue_columns), halved while a fused epilogue's loads
    of one chunk would take more than CHUNK_LOAD_BYTES of registers per thread (C, bias and
    an f32 residual beside a bf16 output: 512 bytes at 128 columns, which spilled), down to
    one 128-byte row of C."""
    epi = epilogue_columns(bn, c_dtype)
    if hasattr(epilogue, "load_bytes"):
        while epi > row_elements(c_dtype) and epilogue.load_bytes(
                lk.sm90.wgmma_accumulator_layout(epi).num_values) > CHUNK_LOAD_BYTES:
            epi //= 2
    return epi


def prefetched_chunks(epilogue, chunks: int, values: int) -> int:
    """How many of a tile's `chunks` epilogue chunks (`values` accumulator values per thread
    each) have their loads issued before the main loop: as many as fit PREFETCH_BYTES of
    registers beside the accumulator (0 for an epilogue without a load / apply split, or one
    whose chunk does not fit). The other chunks' loads are then issued one chunk ahead,
    before the previous chunk's store."""
    if epilogue is None or not hasattr(epilogue, "load_bytes"):
        return 0
    per_chunk = epilogue.load_bytes(values)
    return min(chunks, PREFETCH_BYTES // per_chunk) if per_chunk else 0


def staged_input(epilogue, c_dtype, split_k: int, chunks: int, values: int) -> str | None:
    """The name of the epilogue input gemm_tiles stages by TMA (recipes/_epilogues.py's
    staged_operand: C, or a residual of C's type), or None: only for a FusedEpilogue whose
    loads are split from its arithmetic (prefetched_chunks of its `chunks` chunks of `values`
    values > 0), and not under split-K (the reduction runs the epilogue)."""
    if split_k > 1 or not hasattr(epilogue, "staged") or \
            not prefetched_chunks(epilogue, chunks, values):
        return None
    return epilogue.staged(c_dtype)


def stage_chunk(t, tile: tuple, at, mine, bar) -> None:
    """Thread 0 of the warpgroup: once the previous tile's last store has read `mine`, TMA the
    `tile`-shaped tile `at` of the global tensor t into it, completing on `bar`; the warpgroup
    reads it after the main loop (mbarrier_wait(bar, tile iteration % 2))."""
    with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
        lk.sm90.tma_store_wait(0)
        with lk.sm90.expect_tx(bar):
            lk.sm90.tma_load(mine, t.tile(tile, at), bar)


def gemm_tiles(A, B, C, *, GRID, B_MAJOR, BN, STAGES, GROUP_M, CLUSTER, epilogue=None,
               BM=CONSUMERS * WG_ROWS, SPLIT_K=1, PROMOTE=0):
    """The pipeline (module docstring) inside a kernel of warps(BM) warps: C (M x N) =
    epilogue(A (M x K) @ B), B given as the N x K tensor B (B_MAJOR "K": B[n, k]) or the K x N
    tensor B (B_MAJOR "N": B[k, n], 16-bit types only), each with its last mode contiguous.
    `epilogue(chunk, fragment)` maps an f32 accumulator chunk (a register tensor) and its
    Fragment to the f32 values stored; None stores the accumulator. The tile counts are kernel
    arithmetic on the extents (M from A, N from C, K from A).

    SPLIT_K > 1 (CLUSTER 1): output tile (tm, tn) is computed SPLIT_K times, split s over k-steps
    [s * KS, (s + 1) * KS) with KS = ceil(K_TILES / SPLIT_K) (steps past K load zeros), and
    its accumulator stored unchanged (no epilogue) at rows s * split_rows(...) + tm * BM of C,
    the (SPLIT_K * split_rows, N) workspace recipes/_gemm_splitk.py sums. PROMOTE > 0: the
    wgmma accumulator is added into an f32 register one every PROMOTE k-steps (mma_k_steps)."""
    assert BM in TILE_M and (SPLIT_K == 1 or (epilogue is None and CLUSTER == 1)), (BM, SPLIT_K)
    consumers, BK = BM // WG_ROWS, row_elements(A.dtype)
    TILES_M, TILES_N, K_TILES = (-(-A.shape[0] // BM), -(-C.shape[1] // BN),
                                 -(-A.shape[1] // BK))
    KS = -(-K_TILES // SPLIT_K)                      # k-steps of one output tile's K range
    sB = lk.shared_tensor(k_major(BN, STAGES, B.dtype) if B_MAJOR == "K" else
                          n_major(BN, STAGES, B.dtype), B.dtype, name="sB")
    sA = lk.shared_tensor(k_major(BM, STAGES, A.dtype), A.dtype, name="sA")
    EPI = chunk_columns(epilogue, BN, C.dtype)       # C leaves through smem in EPI-wide chunks
    sC = lk.shared_tensor(c_tile(BM, EPI, C.dtype), C.dtype, name="sC")
    full = lk.sm90.mbarrier_array(STAGES, 1, name="full")     # own producer's arrive + TMA bytes
    empty = lk.sm90.mbarrier_array(STAGES, CLUSTER * consumers * 4, name="empty")
    # cluster kernels: every consumer warp of the cluster arrives once when it is done
    finished = lk.sm90.mbarrier_array(1, CLUSTER * consumers * 4, name="finished")
    # the epilogue input staged by TMA into each consumer's part of sC (staged_input)
    staged = staged_input(epilogue, C.dtype, SPLIT_K, BN // EPI,
                          lk.sm90.wgmma_accumulator_layout(EPI).num_values)
    staged_full = [lk.sm90.mbarrier_array(consumers, 1, name="staged_full")] if staged else []
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full, empty, finished, *staged_full)
        lk.sm90.fence_mbarrier_init()
    if CLUSTER == 1:
        lk.barrier()
        rank, unit = 0, lk.block_id(0)               # a scheduling unit is one CTA
    else:
        lk.sm90.cluster_sync()                       # the peer's barriers are initialised
        rank, unit = lk.sm90.block_rank_in_cluster(), lk.block_id(0) // CLUSTER
    units = GRID // CLUSTER
    pair_rows = (TILES_M + CLUSTER - 1) // CLUSTER   # tile rows in steps of CLUSTER
    tiles = pair_rows * TILES_N                      # unit tiles of one K range

    def tile_coords(t):
        """Unit tile t (of SPLIT_K * tiles) in GROUP_M-row groups: (tile row of this CTA,
        tile column, first k-step); split s = t // tiles."""
        split, t = (t // tiles, t % tiles) if SPLIT_K > 1 else (0, t)
        per_group = GROUP_M * TILES_N
        row = (t // per_group) * GROUP_M + t % GROUP_M
        return CLUSTER * row + rank, (t % per_group) // GROUP_M, split * KS

    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=PRODUCER_REGISTERS):
        with lk.if_(lk.eq(lk.warp_id(), 0)):
            for t in lk.range(unit, SPLIT_K * tiles, units):
                tm, tn, k0 = tile_coords(t)
                first = (t // units) * KS           # t = unit + j * units, unit < units
                load_k_steps(sA, sB, full, empty, lambda k: A.tile((BM, BK), (tm, k0 + k)),
                             lambda k: B.tile((BN, BK), (tn, k0 + k)) if B_MAJOR == "K" else
                             B.tile((BK, BN), (k0 + k, tn)), first=first, steps=KS,
                             STAGES=STAGES, multicast="x" if CLUSTER > 1 else None)
            if CLUSTER > 1:     # the CTA's shared memory outlives every peer's arrivals
                lk.sm90.mbarrier_wait(finished[0], 0)

    def release(stage):
        """This warp's wgmmas are done reading `stage` (after lk.sm90.wgmma_wait): one arrive
        per CTA of the cluster, cta-scoped (only async-proxy reads to report: a cluster-scoped
        release would cost a MEMBAR.ALL.GPU per arrive, half the GEMM's speed)."""
        with lk.sm90.elect_one():
            if CLUSTER == 1:
                lk.sm90.mbarrier_arrive(empty[stage])
            else:
                for peer in range(CLUSTER):
                    lk.sm90.mbarrier_arrive(empty[stage], cta=peer, scope="cta")

    for wg in range(consumers):     # one role per consumer warpgroup: wg is a trace-time int
        with lk.sm90.warp_role(f"consumer{wg}", warpgroups=(1 + wg,),
                               registers=CONSUMER_REGISTERS):
            mine = sC.tile((WG_ROWS, EPI), (wg, 0))
            chunk_layout = lk.sm90.wgmma_accumulator_layout(EPI)
            early = prefetched_chunks(epilogue, BN // EPI, chunk_layout.num_values)
            split_loads = early > 0      # else each chunk loads where it is computed
            for t in lk.range(unit, SPLIT_K * tiles, units):
                tm, tn, _ = tile_coords(t)
                first = (t // units) * KS
                row = tm if SPLIT_K == 1 else \
                    t // tiles * (pair_rows * CLUSTER) + tm         # the split's slab
                ats = [(consumers * row + wg, (BN // EPI) * tn + j) for j in range(BN // EPI)]
                frags = [Fragment((WG_ROWS, EPI), at, chunk_layout) for at in ats]
                loaded = {}

                def prefetch():
                    """Once k-step 0's wgmma runs: chunk 0 of the staged input by TMA into
                    `mine`, the first chunks' other loads into registers (the main loop
                    hides their latency)."""
                    if staged:
                        stage_chunk(getattr(epilogue, staged), (WG_ROWS, EPI), ats[0], mine,
                                    staged_full[0][wg])
                    loaded.update({j: epilogue.load(frags[j], skip=(staged,) if j == 0 else ())
                                   for j in range(early)})
                acc = mma_k_steps(sA, sB, full, release, wg=wg, first=first, steps=KS,
                                  STAGES=STAGES, BN=BN, BK=BK, B_MAJOR=B_MAJOR,
                                  promote=PROMOTE, after_first=prefetch if early else None)
                for j in range(BN // EPI):       # the epilogue, EPI columns at a time
                    chunk = accumulator_chunk(acc, chunk_layout, j)
                    if split_loads:
                        if j not in loaded:
                            loaded[j] = epilogue.load(frags[j],
                                                      skip=(staged,) if j == 0 else ())
                        if staged and j == 0:       # the TMA has landed: read it from `mine`
                            lk.sm90.mbarrier_wait(staged_full[0][wg], (t // units) % 2)
                            loaded[j][staged] = lk.load(mine.partition(chunk_layout))
                        chunk = epilogue.apply(chunk, loaded.pop(j))
                        if j + 1 < BN // EPI and j + 1 not in loaded:    # one chunk ahead:
                            loaded[j + 1] = epilogue.load(frags[j + 1])  # behind this store
                    elif epilogue is not None:
                        chunk = epilogue(chunk, frags[j])
                    store_chunk(C, ats[j], chunk, mine, chunk_layout, wg)
            with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
                lk.sm90.tma_store_wait(0)
            if staged:     # the last staged TMA has landed (it completed before its chunk was
                # read; parity of the last of the CTA's n tiles, 1 - a completed phase - if none)
                n = (SPLIT_K * tiles - unit + units - 1) // units
                lk.sm90.mbarrier_wait(staged_full[0][wg], (n + 1) % 2)
            if CLUSTER > 1:
                with lk.sm90.elect_one():
                    for peer in range(CLUSTER):
                        lk.sm90.mbarrier_arrive(finished[0], cta=peer)
