"""Kernels with shared memory, reductions and layout conversions, shared by the CPU tests
(PTX, errors) and the GPU tests (tests/gpu/test_recipes_gpu.py)."""
import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

T = 64
# thread (c, r): row r, columns 8c..8c+7, then rows r+16, r+32, r+48 (tile index = row + 64*col)
ROWS_TV = lk.TVLayout((T, T), Layout(((8, 16), (8, 4)), ((512, 1), (64, 16))))
SWIZZLED = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((T, T), (T, 1)))


@lk.kernel(num_warps=4)
def transpose_tile(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32, n: lk.i32):
    """y (n, m) = x (m, n) transposed, row-major, through a swizzled 64x64 bf16 shared tile."""
    tile = lk.shared_tensor(SWIZZLED, lk.bf16)
    X = lk.global_tensor(x, Layout((m, n), (n, 1))).tile((T, T), (lk.block_id(0),
                                                                  lk.block_id(1)))
    lk.store(tile.partition(ROWS_TV), lk.load(X.partition(ROWS_TV)))
    lk.barrier()
    # the transposed tile: tile element (j, i) of y is x's (i, j)
    Y = lk.global_tensor(y, Layout((n, m), (m, 1))).tile((T, T), (lk.block_id(1),
                                                                  lk.block_id(0)))
    transposed = tile.view(ComposedLayout(SWIZZLED.outer, 0, Layout((T, T), (1, T))))
    lk.store(Y.partition(ROWS_TV), lk.load(transposed.partition(ROWS_TV)))


@lk.kernel(num_warps=8)
def row_stats(x: lk.Pointer[lk.f32], mx: lk.Pointer[lk.f32], sm: lk.Pointer[lk.f32], m: lk.i32,
              n: lk.i32, ROWS: lk.constexpr, K: lk.constexpr):
    """mx[r] = max and sm[r] = sum of row r; ROWS rows per block of 256 threads, each thread
    K consecutive columns (rows spread over lanes, or over warps when ROWS == 1)."""
    P = 256 // ROWS
    tv = lk.TVLayout((ROWS, P * K), Layout(((P, ROWS), K), ((ROWS * K, 1), ROWS)))
    X = lk.global_tensor(x, Layout((m, n), (n, 1))).tile(tv.tile, (lk.block_id(0), 0))
    v = lk.load(X.partition(tv), other=float("-inf"))
    biggest = lk.reduce_max(v, 1)
    total = lk.reduce_sum(lk.where(v > float("-inf"), v, 0.0), 1)
    out = lk.TVLayout((ROWS, 1), biggest.layout.layout)
    for ptr, value in ((mx, biggest), (sm, total)):
        Y = lk.global_tensor(ptr, Layout((m, 1), (1, 1))).tile((ROWS, 1), (lk.block_id(0), 0))
        lk.store(Y.partition(out), lk.RegisterTensor(lk.f32, out, value.values))


@lk.kernel(num_warps=2)
def convert_roundtrip(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], SRC: lk.constexpr,
                      DST: lk.constexpr):
    """y = x (256 f32), loaded under TV layout SRC, converted to DST, stored under DST."""
    a = lk.TVLayout((256,), Layout(*SRC))
    b = lk.TVLayout((256,), Layout(*DST))
    v = lk.load(lk.global_tensor(x, Layout(256)).partition(a))
    lk.store(lk.global_tensor(y, Layout(256)).partition(b), lk.convert_layout(v, b))


# (shape, stride) pairs of 64-thread x 4-value TV layouts over 256 elements
BLOCKED = ((64, 4), (4, 1))                        # thread t: 4t .. 4t+3
STRIDED = ((64, 4), (1, 64))                       # thread t: t, t+64, t+128, t+192
WARP_LOCAL = (((32, 2), 4), ((1, 128), 32))        # warp w: 128w + lane + 32v
WARP_BLOCKED = (((32, 2), 4), ((4, 128), 1))       # warp w: 128w + 4 lane + v
