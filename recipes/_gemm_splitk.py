"""The second pass of a split-K GEMM (recipes/_gemm_kernel.py's gemm_tiles with SPLIT_K > 1):
C = epilogue(sum over s of W[s * SLAB + m, n]) for the (SPLITS * SLAB, N) f32 workspace W
the GEMM kernel wrote, one K range's partial product per slab of SLAB rows.

    grid (ceil(M / ROWS), ceil(N / COLS)), 4 warps; warp w takes row w of the ROWS x COLS tile,
    lane l its columns 8l .. 8l + 7 (two 16-byte loads per slab, one 16-byte bf16 store)

The epilogue is the GEMM's own (recipes/_epilogues.py), applied to the summed tile through a
Fragment in this kernel's TV layout, so bias, activation, residual and alpha/beta mean the
same in both passes. Rows past M and columns past N are masked.
"""
from __future__ import annotations

import layoutkit as lk
from recipes._gemm_kernel import Fragment

REDUCE_WARPS = 4
ROWS = REDUCE_WARPS           # one tile row per warp
VALUES = 8                    # consecutive columns per thread: 32 bytes of f32 partials
COLS = 32 * VALUES            # one warp's columns

# (thread, value) -> column-major index of the ROWS x COLS tile: lane l, warp w, value v is
# row w, column VALUES * l + v
TILE_TV = lk.TVLayout((ROWS, COLS), lk.Layout(((32, REDUCE_WARPS), VALUES),
                                              ((ROWS * VALUES, 1), ROWS)))


def reduce_splits(W, C, *, SPLITS, epilogue=None):
    """Inside a kernel of REDUCE_WARPS warps on the grid above: C (M x N) = epilogue(sum of
    the SPLITS slabs of W), W of shape (SPLITS * SLAB, N) with SLAB >= M (f32), slab s holding
    K range s's product in its first M rows. `epilogue(values, fragment)` as in gemm_tiles."""
    M, N = C.shape
    slab = W.shape[0] // SPLITS
    at = (lk.block_id(0), lk.block_id(1))
    total = None
    for s in range(SPLITS):
        part = lk.load(W.window(0, s * slab, s * slab + M).tile((ROWS, COLS), at)
                       .partition(TILE_TV))
        total = part if total is None else total + part
    if epilogue is not None:
        total = epilogue(total, Fragment((ROWS, COLS), at, TILE_TV))
    lk.store(C.tile((ROWS, COLS), at).partition(TILE_TV), lk.cast(total, C.dtype))


def reduce_grid(m: int, n: int) -> tuple[int, int]:
    """The reduction kernel's grid for an M x N result."""
    return -(-m // ROWS), -(-n // COLS)
