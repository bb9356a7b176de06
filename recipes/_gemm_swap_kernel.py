"""The GEMM pipeline with its operands swapped, for few rows of A (decode: M <= 64 tokens):
C^T (N x M) = B^T (N x K) @ A^T, so the weights B fill the wgmma's 64-row M side and the
tokens its narrow N side (BN = 8 .. 64 columns, a multiple of 8). The shared memory then holds
the weights' stream, not 64-row A tiles of which M rows exist: a k-step is BM x 128 bytes of B
and BN x 128 bytes of A, so a ring of 9-16 stages (recipes/_gemm_choice.max_swap_stages) keeps
72-128 KB of B in flight per SM in one launch (no split-K partials, no reduction kernel).

    persistent grid: GRID CTAs (the host: every SM); tile t = (weight rows tw, token columns
    tt), tt fastest, so the CTAs working at once stream different weight rows
    warpgroup 0, producer (one elected thread): per tile and k-step, wait empty[s] ->
        expect_tx(full[s]) { TMA B tile (BM weight rows x BK, K-major or N-major) -> sW[s],
        TMA A tile (BN token rows x BK) -> sX[s] }            (recipes/_gemm_kernel.load_k_steps)
    warpgroups 1 .. BM/64, consumers, each owning 64 weight rows: per k-step wait full[s] ->
        wgmma 64 x BN x BK into accumulator k % CHAINS (A = its sW rows, MN-major where B is
        N-major; B = sX) -> commit -> wait_group CHAINS - 1 -> arrive empty[s of k-step
        k - CHAINS + 1]; after the tile's last k-step wait_group 0, release the rest, and sum
        the CHAINS accumulators, so no k-step's wgmmas wait on the previous k-step's. (On the
        H200 four chains stream as fast as one, ~35 GB/s of weights a CTA at 64 rows, and so
        do two consumer parts: what paces a CTA is its producer's k-step loop, whose TMA
        coordinates divided by the runtime token-tile count, a constexpr now; docs/
        PERFORMANCE.md.) A tile's
        k-steps are padded to a multiple of CHAINS * PARTS (TMA fills the steps past K with
        zeros).
        epilogue: the f32 accumulator (64 weight rows x BN tokens) through `epilogue` (its
        Fragment reads C-shaped tensors transposed), cast to C's type and stored by masked
        st.global into C^T's view of C (each value one element of C: C's rows are the tokens,
        a few per tile, so the scattered stores are a few KB per tile)

Ragged M, N, K are exact: TMA fills zeros past the edges (zero weight rows and token rows add
nothing) and the stores are masked at M and N.
"""
from __future__ import annotations

import layoutkit as lk
from layoutkit.algebra import Layout

from recipes._gemm_kernel import (PRODUCER_REGISTERS, CONSUMER_REGISTERS, WG_ROWS, Fragment,
                                  a_operand, broadcast_view, k_major, load_k_steps, n_major,
                                  row_elements)

TOKEN_STEP = 8                # BN: a multiple of the wgmma N granularity (n8 .. n256)
MAX_TOKENS = 256              # BN at most: the widest wgmma N (an accumulator of BN / 2
                              # registers a thread)
CHAINS = 4                    # independent accumulators a consumer's k-steps rotate through


def padded_steps(k_steps, parts: int = 1, promote: int = 0):
    """A tile's k-steps (an int or a kernel integer) rounded up to whole chain groups of every
    part and promotion period, CHAINS * parts * max(promote, 1) (TMA fills the steps past K with
    zeros)."""
    unit = CHAINS * parts * max(promote, 1)
    return (k_steps + unit - 1) // unit * unit


def transposed(t):
    """The M x N global tensor `t` (a Tensor parameter, e.g. C or a bias of strides (0, 1)) as
    its N x M transpose, stride-0 modes unmasked (broadcast_view)."""
    return broadcast_view(t).permute(1, 0)


class TransposedFragment(Fragment):
    """A Fragment of C^T: the accumulator's rows are C's columns. `load(t)` reads an M x N
    tensor at the fragment's positions (the epilogue's C, bias and residual, as for Fragment)."""

    def load(self, t, other: float = 0.0):
        return lk.load(transposed(t).tile(self.tile, self.coord).partition(self.layout),
                       other=other)


def chained_k_steps(sW, sX, full, release, *, wg, first, steps, STAGES, BN, BK, A_MAJOR,
                    part=0, parts=1, promote=0):
    """One consumer warpgroup's k-steps of one tile at ring counter first + k (module
    docstring): k = part, part + parts, ... below `steps` (a multiple of CHAINS * parts *
    max(promote, 1)), its j-th into accumulator j % CHAINS, on the weight rows `wg` of the
    stage; returns their f32 sum in the wgmma accumulator layout. promote > 0 (fp8 operands,
    whose wgmma adds with fewer bits than f32: recipes/gemm_fp8.py): every `promote` k-steps
    of each accumulator, wait_group 0 and add the accumulators into an f32 total, then start
    them afresh."""
    period = max(promote, 1)                     # trips of CHAINS k-steps per promotion
    accs = tuple(lk.sm90.wgmma_accumulator(BN) for _ in range(CHAINS))
    if promote:
        accs += (lk.full(lk.sm90.wgmma_accumulator_layout(BN), 0.0),)
    loop = lk.range(0, steps // (CHAINS * parts * period), carry=accs)
    for g, carried in loop:
        accs = list(carried)                     # the CHAINS accumulators (and the total)
        for r in range(period):
            for c in range(CHAINS):
                j = (g * period + r) * CHAINS + c
                k = j * parts + part
                s = lk.sm90.consumer_state(first + k, STAGES)
                lk.sm90.mbarrier_wait(full[s.stage], s.phase)
                lk.sm90.wgmma_fence()
                accs[c] = lk.sm90.wgmma(accs[c], a_operand(sW, s.stage, wg, BK, A_MAJOR),
                                        sX[:, :, s.stage],
                                        accumulate=r > 0 if promote else g > 0)
                lk.sm90.wgmma_commit()
                lk.sm90.wgmma_wait(CHAINS - 1)   # its k-step CHAINS - 1 back has read its stage
                with lk.if_(j >= CHAINS - 1):
                    release((s.stage + STAGES - (CHAINS - 1) * parts) % STAGES)
        if promote:             # ptxas keeps accumulators in flight untouched (C7517)
            lk.sm90.wgmma_wait(0)
            for c in range(CHAINS):
                accs[CHAINS] = accs[CHAINS] + accs[c]
        loop.next(*accs)
    accs = loop.results
    lk.sm90.wgmma_wait(0)
    last = lk.sm90.consumer_state(first + steps - parts + part, STAGES).stage
    for back in range(CHAINS - 2, -1, -1):       # the stages of its last CHAINS - 1 k-steps
        release((last + STAGES - back * parts) % STAGES)
    if promote:
        return accs[CHAINS]
    total = accs[0]
    for acc in accs[1:]:
        total = total + acc
    return total


def gemm_tiles_swapped(A, B, C, *, GRID, B_MAJOR, BN, STAGES, TOKEN_TILES, epilogue=None,
                       BM=WG_ROWS, PARTS=1, PROMOTE=0):
    """The pipeline (module docstring) inside a kernel of recipes._gemm_kernel.warps(BM *
    PARTS) warps: C (M x N) = epilogue(A (M x K) @ B), B the N x K tensor B (B_MAJOR "K":
    B[n, k]) or the K x N tensor B (B_MAJOR "N": B[k, n]), each with its last mode contiguous;
    C of any strides. BM weight rows (64 per consumer warpgroup) by BN tokens per tile,
    TOKEN_TILES = ceil(M / BN) token tiles (the host's, from A's rows: a constant, so no k-step
    divides by a runtime count; 1 at decode); STAGES >= CHAINS * PARTS (a consumer holds
    CHAINS - 1 of its stages while it waits for the next) and a multiple of PARTS (so stage s
    serves part s % PARTS only, whose waits then see each of its phases). PARTS > 1: that many
    consumer warpgroups per 64 weight rows take a tile's k-steps in turn (k-step k: part
    k % PARTS), parts 1.. hand their f32 sums to part 0 through shared memory (two named
    barriers over the row group's warpgroups), which runs the epilogue, in one launch.
    PROMOTE > 0 (fp8): each accumulator restarts every PROMOTE of its k-steps, added into an
    f32 total (chained_k_steps)."""
    assert BM % WG_ROWS == 0 and BN % TOKEN_STEP == 0 and STAGES >= CHAINS * PARTS and \
        STAGES % PARTS == 0, (BM, BN, STAGES, PARTS)       # a stage serves one part only
    groups, BK = BM // WG_ROWS, row_elements(A.dtype)
    m, k = A.shape
    n = C.shape[1]
    TILES_W, TILES_T = -(-n // BM), TOKEN_TILES
    K_TILES = padded_steps(-(-k // BK), PARTS, PROMOTE)
    sW = lk.shared_tensor(k_major(BM, STAGES, B.dtype) if B_MAJOR == "K" else
                          n_major(BM, STAGES, B.dtype), B.dtype, name="sW")
    sX = lk.shared_tensor(k_major(BN, STAGES, A.dtype), A.dtype, name="sX")
    full = lk.sm90.mbarrier_array(STAGES, 1, name="full")     # the producer's arrive + TMA bytes
    empty = lk.sm90.mbarrier_array(STAGES, groups * 4, name="empty")  # each warp reading it
    sR = lk.shared_tensor(Layout((WG_ROWS, BN, groups * (PARTS - 1)),
                                 (1, WG_ROWS, WG_ROWS * BN)), lk.f32, name="partials") \
        if PARTS > 1 else None
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    unit, tiles = lk.block_id(0), TILES_W * TILES_T

    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=PRODUCER_REGISTERS):
        with lk.if_(lk.eq(lk.warp_id(), 0)):
            for t in lk.range(unit, tiles, GRID):
                tw, tt = t // TILES_T, t % TILES_T
                load_k_steps(sW, sX, full, empty,
                             lambda s: B.tile((BM, BK), (tw, s)) if B_MAJOR == "K" else
                             B.tile((BK, BM), (s, tw)),
                             lambda s: A.tile((BN, BK), (tt, s)),
                             first=(t // GRID) * K_TILES, steps=K_TILES, STAGES=STAGES)

    def release(stage):
        """This warp's wgmmas are done reading `stage`: one arrive (elected thread)."""
        with lk.sm90.elect_one():
            lk.sm90.mbarrier_arrive(empty[stage])

    layout = lk.sm90.wgmma_accumulator_layout(BN)
    CT = transposed(C)
    for wg in range(groups * PARTS):   # one role per consumer warpgroup: trace-time ints
        rows, part = wg // PARTS, wg % PARTS
        with lk.sm90.warp_role(f"consumer{wg}", warpgroups=(1 + wg,),
                               registers=CONSUMER_REGISTERS):
            for t in lk.range(unit, tiles, GRID):
                tw, tt = t // TILES_T, t % TILES_T
                acc = chained_k_steps(sW, sX, full, release, wg=rows,
                                      first=(t // GRID) * K_TILES, steps=K_TILES,
                                      STAGES=STAGES, BN=BN, BK=BK, A_MAJOR=B_MAJOR,
                                      part=part, parts=PARTS, promote=PROMOTE)
                if PARTS > 1:
                    acc = _sum_parts(sR, acc, layout, rows=rows, part=part, parts=PARTS)
                if part == 0:
                    at = (groups * tw + rows, tt)
                    if epilogue is not None:
                        acc = epilogue(acc, TransposedFragment((WG_ROWS, BN), at, layout))
                    lk.store(CT.tile((WG_ROWS, BN), at).partition(layout),
                             lk.cast(acc, C.dtype))


def _sum_parts(sR, acc, layout, *, rows: int, part: int, parts: int):
    """The k-step parts of weight rows `rows` meet: part p > 0 writes its sum into its slot of
    sR, then named barrier FULL; part 0 waits there, adds the slots, then all meet at FREE
    (the slots may be rewritten by the next tile). Returns the total at part 0 (acc elsewhere)."""
    threads = 128 * parts
    full_id, free_id = 1 + 2 * rows, 2 + 2 * rows
    slot0 = rows * (parts - 1)
    if part > 0:
        lk.store(sR[:, :, slot0 + part - 1].partition(layout), acc)
    lk.sm90.named_barrier_sync(full_id, threads)
    if part == 0:
        for q in range(1, parts):
            acc = acc + lk.load(sR[:, :, slot0 + q - 1].partition(layout))
    lk.sm90.named_barrier_sync(free_id, threads)
    return acc
