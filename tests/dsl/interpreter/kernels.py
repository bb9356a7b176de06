"""Kernels for the interpreter tests (module level, so errors name this file's lines)."""
import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

OWN = lk.TVLayout((32,), Layout((32, 1), (1, 0)))                  # thread t: element t
# thread t: element (t % 2) * 16 + t // 2, another thread's element for every t but 0 and 31
SHUFFLED = lk.TVLayout((32,), Layout(((2, 16), 1), ((16, 1), 0)))
TILE = Layout((8, 64), (64, 1))                                    # row-major 8x64
# thread t: row t % 8, columns 16 * (t // 8) .. + 15 (tile index = row + 8 * column)
ROW_CHUNKS = lk.TVLayout((8, 64), Layout(((8, 4), 16), ((1, 128), 8)))


@lk.kernel(num_warps=1)
def exchange(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], SYNC: lk.constexpr):
    """y = x through shared memory: thread t writes element t, (a barrier when SYNC), then
    reads the elements SHUFFLED gives it (written by other threads)."""
    buffer = lk.shared_tensor(Layout(32), lk.f32)
    lk.store(buffer.partition(OWN), lk.load(lk.global_tensor(x, Layout(32)).partition(OWN)))
    if SYNC:
        lk.barrier()
    got = lk.load(buffer.partition(SHUFFLED))          # the read of another thread's write
    lk.store(lk.global_tensor(y, Layout(32)).partition(SHUFFLED), got)


@lk.kernel(num_warps=1)
def swizzled_roundtrip(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], READ: lk.constexpr):
    """x (8x64 bf16) stored into a Sw<3,3,3> shared tile, read back through a view with the
    swizzle READ ((B, M, S), or None for the raw bytes) into y."""
    sm = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0, TILE), lk.bf16)
    lk.store(sm.partition(ROW_CHUNKS), lk.load(lk.global_tensor(x, TILE).partition(ROW_CHUNKS)))
    lk.barrier()
    view = sm.view(ComposedLayout(Swizzle(*READ), 0, TILE) if READ else TILE)
    lk.store(lk.global_tensor(y, TILE).partition(ROW_CHUNKS), lk.load(view.partition(ROW_CHUNKS)))


@lk.kernel(num_warps=1)
def unmasked_copy(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32]):
    """y[i] = x[i] for 64 elements without bounds (the arrays may be shorter)."""
    tv = lk.tv_layout(Layout(32), Layout(2))
    values = lk.load(lk.global_tensor(x, Layout(64), bounds=None).partition(tv))  # unmasked load
    lk.store(lk.global_tensor(y, Layout(64), bounds=None).partition(tv), values)


@lk.kernel(num_warps=2)
def int_math(x: lk.Pointer[lk.i32], y: lk.Pointer[lk.i32], d: lk.i32):
    """y = (x * 65537 + 7) / d (i32: the product wraps, the quotient truncates)."""
    tv = lk.tv_layout(Layout(64), Layout(1))
    v = lk.load(lk.global_tensor(x, Layout(64)).partition(tv))
    lk.store(lk.global_tensor(y, Layout(64)).partition(tv), (v * 65537 + 7) / d)


@lk.kernel(num_warps=1)
def two_barriers(x: lk.Pointer[lk.f32]):
    """A barrier every thread reaches (the IR is edited by the test to make it conditional)."""
    tv = lk.tv_layout(Layout(32), Layout(1))
    X = lk.global_tensor(x, Layout(32)).partition(tv)
    v = lk.load(X)
    lk.barrier()                                       # the barrier of two_barriers
    lk.store(X, v + 1.0)


def _is_zero(x):
    import sympy
    return sympy.Eq(x, 0)


SLOT = lk.TVLayout((128,), Layout(((128, 2), 1), ((1, 0), 0)))    # 256 threads, element t % 128


@lk.kernel(num_warps=8, debug=True)     # broken variants: the static protocol check refuses them
def ring(out: lk.Pointer[lk.i32], n: lk.i32, PRODUCED: lk.constexpr, CONSUMER_WAITS: lk.constexpr):
    """Warpgroup 0 produces n - PRODUCED rounds into a 2-slot ring (full/empty mbarriers),
    warpgroup 1 consumes n rounds (waiting on full only when CONSUMER_WAITS) and stores the
    sum of k + t % 128 over the rounds at out[t - 128]."""
    full = lk.sm90.mbarrier_array(2, 128, name="full")
    empty = lk.sm90.mbarrier_array(2, 128, name="empty")
    slots = lk.shared_tensor(Layout((128, 2)), lk.i32, name="slots")
    with lk.if_(_is_zero(lk.thread_id())):
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    with lk.sm90.warp_role("producer", warpgroups=(0,)):
        for k in lk.range(0, n - PRODUCED):
            p = lk.sm90.producer_state(k, 2)
            lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
            mine = slots.tile((128,), (0, p.stage)).partition(SLOT)
            value = lk.cast(k + lk.sm90.thread_id_in_warpgroup(), lk.i32)
            lk.store(mine, lk.full(SLOT, 0, lk.i32) + value)             # producer store
            lk.sm90.mbarrier_arrive(full[p.stage])                            # producer arrive
    with lk.sm90.warp_role("consumer", warpgroups=(1,)):
        loop = lk.range(0, n, carry=(lk.full(SLOT, 0, lk.i32),))
        for k, (acc,) in loop:
            c = lk.sm90.consumer_state(k, 2)
            if CONSUMER_WAITS:
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)                 # consumer wait
            got = lk.load(slots.tile((128,), (0, c.stage)).partition(SLOT))  # consumer load
            lk.sm90.mbarrier_arrive(empty[c.stage])
            loop.next(acc + got)
        (total,) = loop.results
        each = lk.tv_layout(Layout(256), Layout(1))
        mine = lk.global_tensor(out, Layout(256)).partition(each)
        lk.store(mine, lk.RegisterTensor(lk.i32, each, total.values))
