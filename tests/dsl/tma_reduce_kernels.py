"""Kernels that TMA-reduce shared tiles into one global tensor (lk.sm90.tma_store(...,
reduce=op)), for the PTX, interpreter and GPU tests (tests/dsl/test_tma_reduce.py,
tests/dsl/interpreter/test_tma_reduce_cpu.py, tests/gpu/test_dsl_tma_reduce_gpu.py).

`reduce_tiles(dtype, op, mode)`: CTA (m, n, r) of a (tiles_m, tiles_n, R) grid copies the
(m, n) tile of part r of `parts` (R parts of PM x PN: M and N rounded up to whole tiles)
element by element into a `mode`-swizzled shared tile, then one thread reduces that tile into
the (m, n) tile of `out`, an M x N tensor with row stride LD >= N (so the elements past N and
past M exist in the array and must stay untouched: TMA clips the last tiles)."""
import functools

import numpy as np

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout
from layoutkit.ptx.isa import smem_swizzle

THREADS = 128
TILE_ROWS = 64
CHUNK_BYTES = 16                     # each thread copies one 16-byte vector per sub-tile


def tile_shape(dtype, mode: str) -> tuple:
    """(rows, columns) of one CTA's tile: two column blocks of one swizzled row each (64
    bytes wide without a swizzle)."""
    span = smem_swizzle.span(mode) or 64
    return TILE_ROWS, 2 * span // dtype.nbytes


def shared_layout(dtype, mode: str):
    """The tile in column blocks of one swizzle row (TMA writes the box densely)."""
    rows, cols = tile_shape(dtype, mode)
    row = cols // 2
    inner = Layout((rows, (row, 2)), (row, (1, rows * row)))
    swizzle = lk.sm90.tma_swizzle(mode, dtype.nbytes)
    return inner if swizzle is None else ComposedLayout(swizzle, 0, inner)


def copy_tv(dtype, width: int):
    """128 threads, one 16-byte vector each, over a (rows, width) sub-tile."""
    per = CHUNK_BYTES // dtype.nbytes
    across = width // per
    return lk.tv_layout(Layout((THREADS // across, across), (across, 1)),
                        Layout((1, per), (1, 1))), (THREADS // across, width)


@functools.cache
def reduce_tiles(dtype_name: str, op: str = "add", mode: str = "128B"):
    """The kernel for `dtype_name` ("f32", "bf16", ...) tensors reduced with `op`, shared
    tiles swizzled by `mode` (built once per argument tuple)."""
    dtype = getattr(lk, dtype_name)
    pointer = lk.Pointer[dtype]
    tile = tile_shape(dtype, mode)
    layout = shared_layout(dtype, mode)

    @lk.kernel(num_warps=THREADS // 32)
    def reduce_tiles(parts: pointer, out: pointer, M: lk.i32, N: lk.i32, LD: lk.i32,
                     PM: lk.i32, PN: lk.i32, R: lk.i32):
        """out[:M, :N] <op>= parts[r] for every part r, one CTA per tile and part."""
        Parts = lk.global_tensor(parts, Layout((R * PM, PN), (PN, 1)))
        Out = lk.global_tensor(out, Layout((M, N), (LD, 1)))
        s = lk.shared_tensor(layout, dtype, name="s", align=1024)
        m, n, r = lk.block_id(0), lk.block_id(1), lk.block_id(2)
        tiles_m = PM // tile[0]
        mine = Parts.tile(tile, (r * tiles_m + m, n))
        tv, sub = copy_tv(dtype, tile[1] // 2)
        for i in range(tile[0] // sub[0]):
            for j in range(tile[1] // sub[1]):
                values = lk.load(mine.tile(sub, (i, j)).partition(tv))
                lk.store(s.tile(sub, (i, j)).partition(tv), values)
        lk.sm90.fence_proxy_async()                 # generic stores -> the TMA unit's reads
        lk.barrier()
        with lk.if_(lk.thread_id() < 1):
            lk.sm90.tma_store(Out.tile(tile, (m, n)), s, reduce=op)       # THE REDUCTION
            lk.sm90.tma_store_commit()
            lk.sm90.tma_store_wait(0)

    return reduce_tiles


def launch_shape(dtype, mode: str, m: int, n: int, parts: int) -> tuple:
    """(grid, PM, PN) for an M x N output reduced from `parts` parts."""
    rows, cols = tile_shape(dtype, mode)
    tiles_m, tiles_n = -(-m // rows), -(-n // cols)
    return (tiles_m, tiles_n, parts), tiles_m * rows, tiles_n * cols


def leading_dimension(dtype, n: int) -> int:
    """A row stride past N (16 bytes more, rounded to 16 bytes: TMA's stride rule)."""
    per = CHUNK_BYTES // dtype.nbytes
    return -(-n // per) * per + per


def as_parts(values: np.ndarray, pm: int, pn: int) -> np.ndarray:
    """(R, m, n) values padded (with the same values repeated, never zeros) into R x PM x PN."""
    r, m, n = values.shape
    padded = np.resize(values, (r, pm, pn))
    padded[:, :m, :n] = values
    return padded
