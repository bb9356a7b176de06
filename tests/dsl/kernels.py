"""Small kernels shared by the DSL tests (defined at module level so errors name this file)."""
import layoutkit.dsl as lk
from layoutkit.algebra import Layout

F32 = lk.Pointer[lk.f32]
BF16 = lk.Pointer[lk.bf16]


@lk.kernel(num_warps=4)
def axpb(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32, a: lk.f32, b: lk.f32,
         VALUES: lk.constexpr):
    """y = a * x + b over n elements; each of 128 threads owns VALUES consecutive elements."""
    tv = lk.tv_layout(Layout(128), Layout(VALUES))
    tile = (128 * VALUES,)
    X = lk.global_tensor(x, Layout(n)).tile(tile, (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y, Layout(n)).tile(tile, (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a + b)


@lk.kernel(num_warps=4)
def axpb_bf16(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], n: lk.i32, a: lk.f32,
              b: lk.f32):
    """y = bf16(a * f32(x) + b), 8 bf16 (16 bytes) per thread."""
    tv = lk.tv_layout(Layout(128), Layout(8))
    X = lk.global_tensor(x, Layout(n)).tile((1024,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y, Layout(n)).tile((1024,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.cast(lk.fma(lk.cast(lk.load(X), lk.f32), a, b), lk.bf16))


@lk.kernel(num_warps=1)
def row_sums(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], m: lk.i32, n: lk.i32):
    """y[r] = sum of row r of the row-major (m, n) matrix x, one block per row: each of 32
    threads sums columns lane, lane+32, ... in a runtime loop (a carried register tensor),
    then lane 0.. write their partial sums to y[r*32 + lane]."""
    tv = lk.tv_layout(Layout((1, 32), (32, 1)), Layout((1, 1)))   # thread t -> (0, t)
    row = lk.block_id(0)
    X = lk.global_tensor(x, Layout((m, n), (n, 1)))
    acc = lk.full(tv, 0.0, lk.f32)
    loop = lk.range(0, (n + 31) // 32, carry=(acc,))
    for j, (acc,) in loop:
        loop.next(acc + lk.load(X.tile((1, 32), (row, j)).partition(tv)))
    (total,) = loop.results
    with lk.if_(row < m):
        Y = lk.global_tensor(y, Layout((m, 32), (32, 1))).tile((1, 32), (row, 0)).partition(tv)
        lk.store(Y, total)
