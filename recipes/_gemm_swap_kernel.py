"""The GEMM pipeline with its operands swapped, for few rows of A (decode: M <= 64 tokens):
C^T (N x M) = B^T (N x K) @ A^T, so the weights B fill the wgmma's 64-row M side and the
tokens its narrow N side (BN = 8 .. 64 columns, a multiple of 8). The shared memory then holds
the weights' stream, not 64-row A tiles of which M rows exist: a k-step is BM x 128 bytes of B
and BN x 128 bytes of A, so a ring of 16-24 stages keeps 128-192 KB of B in flight per SM in
one launch (no split-K partials, no reduction kernel).

    persistent grid: min(#SMs, #tiles) CTAs; tile t = (weight rows tw, token columns tt), tt
    fastest, so the CTAs working at once stream different weight rows
    warpgroup 0, producer (one elected thread): per tile and k-step, wait empty[s] ->
        expect_tx(full[s]) { TMA B tile (BM weight rows x BK, K-major or N-major) -> sW[s],
        TMA A tile (BN token rows x BK) -> sX[s] }            (recipes/_gemm_kernel.load_k_steps)
    warpgroups 1 .. BM/64, consumers, each owning 64 weight rows: per k-step wait full[s] ->
        wgmma 64 x BN x BK (A = its sW rows, MN-major where B is N-major; B = sX) -> commit ->
        wait_group 1 -> arrive empty[previous s]               (recipes/_gemm_kernel.mma_k_steps)
        epilogue: the f32 accumulator (64 weight rows x BN tokens) through `epilogue` (its
        Fragment reads C-shaped tensors transposed), cast to C's type and stored by masked
        st.global into C^T's view of C (each value one element of C: C's rows are the tokens,
        a few per tile, so the scattered stores are a few KB per tile)

Ragged M, N, K are exact: TMA fills zeros past the edges (zero weight rows and token rows add
nothing) and the stores are masked at M and N.
"""
from __future__ import annotations

import layoutkit as lk

from recipes._gemm_kernel import (PRODUCER_REGISTERS, CONSUMER_REGISTERS, ROW_BYTES, WG_ROWS,
                                  Fragment, broadcast_view, k_major, load_k_steps, mma_k_steps,
                                  n_major, row_elements)

TOKEN_STEP = 8                # BN: a multiple of the wgmma N granularity (n8 .. n256)
MAX_TOKENS = 256              # BN at most: the widest wgmma N (an accumulator of BN / 2
                              # registers a thread)


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


def smem_bytes(bm: int, bn: int, stages: int) -> int:
    """Shared memory of the swapped kernel's ring (barriers aside): per stage BM weight rows
    and BN token rows of one 128-byte k-step each."""
    return stages * (bm + bn) * ROW_BYTES


def gemm_tiles_swapped(A, B, C, *, GRID, B_MAJOR, BN, STAGES, epilogue=None, BM=WG_ROWS):
    """The pipeline (module docstring) inside a kernel of 4 * (1 + BM / 64) warps: C (M x N) =
    epilogue(A (M x K) @ B), B the N x K tensor B (B_MAJOR "K": B[n, k]) or the K x N tensor B
    (B_MAJOR "N": B[k, n]), each with its last mode contiguous; C of any strides. BM weight
    rows (64 per consumer warpgroup) by BN tokens per tile."""
    assert BM % WG_ROWS == 0 and BN % TOKEN_STEP == 0, (BM, BN)
    consumers, BK = BM // WG_ROWS, row_elements(A.dtype)
    m, k = A.shape
    n = C.shape[1]
    TILES_W, TILES_T, K_TILES = -(-n // BM), -(-m // BN), -(-k // BK)
    sW = lk.shared_tensor(k_major(BM, STAGES, B.dtype) if B_MAJOR == "K" else
                          n_major(BM, STAGES, B.dtype), B.dtype, name="sW")
    sX = lk.shared_tensor(k_major(BN, STAGES, A.dtype), A.dtype, name="sX")
    full = lk.sm90.mbarrier_array(STAGES, 1, name="full")     # the producer's arrive + TMA bytes
    empty = lk.sm90.mbarrier_array(STAGES, consumers * 4, name="empty")   # each consumer warp
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
    for wg in range(consumers):     # one role per consumer warpgroup: wg is a trace-time int
        with lk.sm90.warp_role(f"consumer{wg}", warpgroups=(1 + wg,),
                               registers=CONSUMER_REGISTERS):
            for t in lk.range(unit, tiles, GRID):
                tw, tt = t // TILES_T, t % TILES_T
                acc = mma_k_steps(sW, sX, full, release, wg=wg, first=(t // GRID) * K_TILES,
                                  steps=K_TILES, STAGES=STAGES, BN=BN, BK=BK, B_MAJOR="K",
                                  A_MAJOR=B_MAJOR)
                at = (consumers * tw + wg, tt)
                if epilogue is not None:
                    acc = epilogue(acc, TransposedFragment((WG_ROWS, BN), at, layout))
                lk.store(CT.tile((WG_ROWS, BN), at).partition(layout), lk.cast(acc, C.dtype))
