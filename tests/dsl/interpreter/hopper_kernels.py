"""TMA and wgmma kernels for the interpreter tests, some deliberately racy (module level, so
errors name this file's lines). The racy ones are debug builds: the static protocol check
would refuse them at trace time, and the point here is the interpreter's diagnosis."""
import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

BF16 = lk.Pointer[lk.bf16]
BK = 64
SW128 = Swizzle(3, 3, 3)


def k_major(rows: int):
    """rows x 64 bf16, K contiguous, 128-byte swizzle: a TMA box and a wgmma K-major operand."""
    return ComposedLayout(SW128, 0, Layout((rows, BK), (BK, 1)))


def first_thread():
    return lk.if_(lk.eq(lk.thread_id(), 0))


READ_TV = lk.tv_layout(Layout((16, 8), (8, 1)), Layout((1, 8), (1, 1)))   # 16 x 64, 8 each


@lk.kernel(num_warps=4, debug=True)
def tma_then_read(a: BF16, out: BF16, M: lk.i32, WAIT_FIRST: lk.constexpr):
    """out = the (64, 64) tile of a at the block's row, TMA-loaded into a swizzled tile, read
    back by every thread; when WAIT_FIRST is false the threads read before waiting on full."""
    A = lk.global_tensor(a, Layout((M, BK), (BK, 1)))
    Out = lk.global_tensor(out, Layout((M, BK), (BK, 1)))
    s = lk.shared_tensor(k_major(64), lk.bf16, name="s")
    full = lk.sm90.mbarrier_array(1, 1, name="full")
    with first_thread():
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    with first_thread():
        with lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(s, A.tile((64, BK), (lk.block_id(0), 0)), full[0])
    if WAIT_FIRST:
        lk.sm90.mbarrier_wait(full[0], 0)
    for i in range(4):
        values = lk.load(s.tile((16, BK), (i, 0)).partition(READ_TV))   # the stage read
        lk.store(Out.tile((64, BK), (lk.block_id(0), 0)).tile((16, BK), (i, 0))
                 .partition(READ_TV), values)
    if not WAIT_FIRST:
        lk.sm90.mbarrier_wait(full[0], 0)


@lk.kernel(num_warps=1, debug=True)
def store_then_overwrite(c: BF16, WAIT_FIRST: lk.constexpr):
    """c (32 x 64) = 1.0 by a TMA store of a shared tile that the thread then overwrites with
    2.0, after lk.sm90.tma_store_wait() when WAIT_FIRST, else before it."""
    tv = lk.tv_layout(Layout((32, 1), (1, 1)), Layout((1, 64), (64, 1)))     # a row each
    s = lk.shared_tensor(Layout((32, BK), (BK, 1)), lk.bf16, name="s", align=128)
    C = lk.global_tensor(c, Layout((32, BK), (BK, 1)))
    lk.store(s.partition(tv), lk.full(tv, 1.0, lk.bf16))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    with first_thread():
        lk.sm90.tma_store(C.tile((32, BK), (0, 0)), s)
        lk.sm90.tma_store_commit()
        if WAIT_FIRST:
            lk.sm90.tma_store_wait(0)
    lk.barrier()
    lk.store(s.partition(tv), lk.full(tv, 2.0, lk.bf16))                    # the overwrite
    with first_thread():
        lk.sm90.tma_store_wait(0, writes=True)


@lk.kernel(num_warps=8, debug=True)
def ring_gemm(a: BF16, b: BF16, c: lk.Pointer[lk.f32], K: lk.i32, N: lk.constexpr,
              STAGES: lk.constexpr, RELEASE_EARLY: lk.constexpr):
    """c (64 x N, f32) = a (64 x K) @ b (N x K)^T: warpgroup 0 TMA-loads (64 x 64, N x 64)
    tiles into a STAGES-deep ring, warpgroup 1 multiplies them with wgmma. Each consumer thread
    gives its stage back (arrives on empty) after lk.sm90.wgmma_wait, or, when RELEASE_EARLY,
    before it, while the wgmma may still read the stage."""
    A = lk.global_tensor(a, Layout((64, K), (K, 1)))
    B = lk.global_tensor(b, Layout((N, K), (K, 1)))
    ring = lambda rows: ComposedLayout(SW128, 0, Layout((rows, BK, STAGES),  # noqa: E731
                                                        (BK, 1, rows * BK)))
    sA = lk.shared_tensor(ring(64), lk.bf16, name="sA")
    sB = lk.shared_tensor(ring(N), lk.bf16, name="sB")
    full = lk.sm90.mbarrier_array(STAGES, 1, name="full")
    empty = lk.sm90.mbarrier_array(STAGES, 128, name="empty")
    with first_thread():
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    with lk.sm90.warp_role("producer", warpgroups=(0,)):
        with lk.if_(lk.eq(lk.warp_id(), 0)):
            for k in lk.range(0, K // BK):
                p = lk.sm90.producer_state(k, STAGES)
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                with lk.sm90.elect_one(), lk.sm90.expect_tx(full[p.stage]):
                    lk.sm90.tma_load(sA[:, :, p.stage], A.tile((64, BK), (0, k)), full[p.stage])
                    lk.sm90.tma_load(sB[:, :, p.stage], B.tile((N, BK), (0, k)), full[p.stage])
    with lk.sm90.warp_role("consumer", warpgroups=(1,)):
        loop = lk.range(0, K // BK, carry=(lk.sm90.wgmma_accumulator(N),))
        for k, (acc,) in loop:
            s = lk.sm90.consumer_state(k, STAGES)
            lk.sm90.mbarrier_wait(full[s.stage], s.phase)
            lk.sm90.wgmma_fence()
            acc = lk.sm90.wgmma(acc, sA[:, :, s.stage], sB[:, :, s.stage], accumulate=k > 0)
            lk.sm90.wgmma_commit()
            if RELEASE_EARLY:
                lk.sm90.mbarrier_arrive(empty[s.stage])               # the early release
            lk.sm90.wgmma_wait(0)
            if not RELEASE_EARLY:
                lk.sm90.mbarrier_arrive(empty[s.stage])
            loop.next(acc)
        (acc,) = loop.results
        lk.store(lk.global_tensor(c, Layout((64, N), (N, 1))).partition(acc.layout), acc)


@lk.kernel(num_warps=4)
def wgmma_forms(a: BF16, b: BF16, c: lk.Pointer[lk.f32], A_TILE: lk.constexpr,
                B_TILE: lk.constexpr, K: lk.constexpr):
    """c (64 x 64, f32) = a (64 x K) @ b (64 x K)^T with the shared operands laid out as A_TILE
    and B_TILE (64 x K layouts, any canonical wgmma form), filled element by element."""
    tv = lk.TVLayout((64, K), Layout((128, K // 2), (1, 128)))
    sA = lk.shared_tensor(A_TILE, lk.bf16, name="sA")
    sB = lk.shared_tensor(B_TILE, lk.bf16, name="sB")
    for s, x in ((sA, a), (sB, b)):
        lk.store(s.partition(tv), lk.load(lk.global_tensor(x, Layout((64, K), (K, 1)))
                                          .partition(tv)))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    lk.sm90.wgmma_fence()
    acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    lk.store(lk.global_tensor(c, Layout((64, 64), (64, 1))).partition(acc.layout), acc)
