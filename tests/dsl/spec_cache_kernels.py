"""Small kernels for the tests of the on-disk specialization cache, do_not_specialize,
precompile and autotune (module level: their fingerprints read this file)."""
import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

SCALE_BLOCK = 512             # a global the kernels read: part of their fingerprint
TILE = (64, 64)


def scaled(x, a):
    """A helper the kernels call: part of their fingerprint too."""
    return x * a


@lk.kernel(num_warps=4)
def scale(x: lk.Tensor[lk.f32, 1], y: lk.Tensor[lk.f32, 1], a: lk.f32, VALUES: lk.constexpr):
    """y = a * x, VALUES consecutive elements per thread."""
    tv = lk.tv_layout(Layout(128), Layout(VALUES))

    def mine(t):
        return t.tile((128 * VALUES,), (lk.block_id(0),)).partition(tv)
    lk.store(mine(y), scaled(lk.load(mine(x)), a))


def axpy_body(x: lk.Tensor[lk.f32, 1], y: lk.Tensor[lk.f32, 1], n: lk.i32, a: lk.f32,
              BLOCK: lk.constexpr):
    """y[:n] = a * x[:n] + y[:n] (n <= the tensors' extent), BLOCK elements per block."""
    tv = lk.tv_layout(Layout(128), Layout(BLOCK // 128))
    X = lk.global_tensor(x.ptr, Layout(n)).tile((BLOCK,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y.ptr, Layout(n)).tile((BLOCK,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a + lk.load(Y))


axpy = lk.kernel(axpy_body, num_warps=4)
axpy_any_n = lk.kernel(axpy_body, num_warps=4, do_not_specialize=("n",))
axpy_any_size = lk.kernel(axpy_body, num_warps=4, do_not_specialize=("n", "x", "y_shape0"))


def _first_thread():
    return lk.if_(lk.thread_id() < 1)


@lk.kernel(num_warps=4)
def tma_copy(a: lk.Tensor[lk.bf16, 2], out: lk.Tensor[lk.bf16, 2], c: lk.Pointer[lk.bf16],
             M: lk.i32, K: lk.i32):
    """Tile (m, k) of `a` through shared memory (a TMA load) to `out` (plain stores) and to the
    (M, K) row-major `c` (a TMA store): two tensor maps, over a Tensor's extents and strides
    and over integer parameters."""
    layout = ComposedLayout(Swizzle(3, 3, 3), 0, Layout(TILE, (TILE[1], 1)))
    s_a = lk.shared_tensor(layout, lk.bf16, name="s_a", align=128)
    C = lk.global_tensor(c, Layout((M, K), (K, 1)))
    full = lk.sm90.mbarrier_array(1, arrive_count=1, name="full")
    with _first_thread():
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    m, k = lk.block_id(0), lk.block_id(1)
    with _first_thread():
        with lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(s_a, a.tile(TILE, (m, k)), full[0])
    lk.sm90.mbarrier_wait(full[0], 0)
    tv = lk.tv_layout(Layout((16, 8), (8, 1)), Layout((1, 8), (1, 1)))
    for i in range(TILE[0] // 16):
        lk.store(out.tile(TILE, (m, k)).tile((16, 64), (i, 0)).partition(tv),
                 lk.load(s_a.tile((16, 64), (i, 0)).partition(tv)))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    with _first_thread():
        lk.sm90.tma_store(C.tile(TILE, (m, k)), s_a)
        lk.sm90.tma_store_commit()
        lk.sm90.tma_store_wait(0)


tma_copy_debug = lk.kernel(tma_copy.fn, num_warps=4, debug=True)

LIST_GLOBAL = [1, 2]          # a mutable global: a kernel reading it cannot be cached


@lk.kernel(num_warps=1)
def reads_a_list(x: lk.Tensor[lk.f32, 1]):
    """Stores LIST_GLOBAL[0] into x[0..31]: its fingerprint cannot be written down."""
    tv = lk.tv_layout(Layout(32), Layout(1))
    lk.store(x.tile((32,), (0,)).partition(tv), lk.full(tv, float(LIST_GLOBAL[0]), lk.f32))


@lk.kernel(num_warps=4)
def axpy_tuned(x: lk.Tensor[lk.f32, 1], y: lk.Tensor[lk.f32, 1], n: lk.i32, a: lk.f32,
               BLOCK: lk.constexpr, THREADS: lk.constexpr):
    """axpy_body with THREADS threads per block (32 * num_warps: an autotune config sets both)."""
    tv = lk.tv_layout(Layout(THREADS), Layout(BLOCK // THREADS))
    X = lk.global_tensor(x.ptr, Layout(n)).tile((BLOCK,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y.ptr, Layout(n)).tile((BLOCK,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a + lk.load(Y))
