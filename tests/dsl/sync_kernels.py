"""DSL kernels with mbarrier rings, warp roles and clusters, shared by the CPU tests (their PTX
and ptxas resources) and the GPU checks (tests/gpu/dsl_sync_checks.py runs them).

- `ring_pingpong`: warpgroup 0 (producer, 24 registers) writes 3*k + 1 + j into slot k % STAGES
  (element j = tid for its 128 threads) and arrives on full; warpgroups 1, 2 (consumers, 240
  registers) wait on full, add element tid % 128 of the slot, arrive on empty. After n rounds
  consumer thread t holds sum_k (3k + 1 + t % 128), stored at out[t].
- `wrong_parity`: every thread waits on a fresh `empty` barrier with parity 0: the classic
  producer bug (must be 1). Built with debug=True: it raises BarrierTimeoutError, not a hang.
- `cluster_ring`: 2-CTA clusters; each CTA's thread 0 arrives on its peer's barrier (mapa +
  remote arrive), every thread waits on its own; out[block] = rank in cluster.
"""
import sympy

import layoutkit.dsl as lk
from layoutkit.algebra import Layout

STAGES = 4
PRODUCER_THREADS = 128
CONSUMER_THREADS = 256
BLOCK_THREADS = PRODUCER_THREADS + CONSUMER_THREADS

# Every thread t of the block sees element t % 128 of a 128-element slot.
SLOT_VIEW = lk.TVLayout((PRODUCER_THREADS,), Layout(((PRODUCER_THREADS, 3), 1), ((1, 0), 0)))
ONE_PER_THREAD = lk.tv_layout(Layout(BLOCK_THREADS), Layout(1))


def is_zero(x):
    """The kernel condition x == 0 (a sympy relation; Python's == would compare expressions)."""
    return sympy.Eq(x, 0)


@lk.kernel(num_warps=12)
def ring_pingpong(out: lk.Pointer[lk.i32], n: lk.i32):
    full = lk.sm90.mbarrier_array(STAGES, PRODUCER_THREADS, name="full")
    empty = lk.sm90.mbarrier_array(STAGES, CONSUMER_THREADS, name="empty")
    slots = lk.shared_tensor(Layout((PRODUCER_THREADS, STAGES)), lk.i32, name="slots")
    with lk.if_(is_zero(lk.thread_id())):
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=24):
        for k in lk.range(0, n):
            p = lk.sm90.producer_state(k, STAGES)
            lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
            mine = slots.tile((PRODUCER_THREADS,), (0, p.stage)).partition(SLOT_VIEW)
            value = lk.cast(3 * k + 1 + lk.sm90.thread_id_in_warpgroup(), lk.i32)
            lk.store(mine, lk.full(SLOT_VIEW, 0, lk.i32) + value)
            lk.sm90.mbarrier_arrive(full[p.stage])
    with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
        loop = lk.range(0, n, carry=(lk.full(SLOT_VIEW, 0, lk.i32),))
        for k, (acc,) in loop:
            c = lk.sm90.consumer_state(k, STAGES)
            lk.sm90.mbarrier_wait(full[c.stage], c.phase)
            got = lk.load(slots.tile((PRODUCER_THREADS,), (0, c.stage)).partition(SLOT_VIEW))
            lk.sm90.mbarrier_arrive(empty[c.stage])
            loop.next(acc + got)
        (total,) = loop.results
        mine = lk.global_tensor(out, Layout(BLOCK_THREADS)).partition(ONE_PER_THREAD)
        lk.store(mine, lk.RegisterTensor(lk.i32, ONE_PER_THREAD, total.values))


@lk.kernel(num_warps=4, debug=True)
def wrong_parity(out: lk.Pointer[lk.i32]):
    full = lk.sm90.mbarrier_array(2, 1, name="full")
    empty = lk.sm90.mbarrier_array(2, 128, name="empty")
    with lk.if_(is_zero(lk.thread_id())):
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    wrong = lk.sm90.consumer_state(0, 2)        # phase 0: the bug (a producer starts at phase 1)
    lk.sm90.mbarrier_wait(empty[wrong.stage], wrong.phase)   # WRONG PARITY LINE


# All 128 threads of the block see the one element of a 1-element tile.
SHARED_ELEMENT = lk.TVLayout((1,), Layout((128, 1), (0, 0)))


@lk.kernel(num_warps=4, cluster=(2, 1, 1), debug=True)
def cluster_ring(out: lk.Pointer[lk.i32], blocks: lk.i32):
    ready = lk.sm90.mbarrier_array(1, 1, name="ready")
    with lk.if_(is_zero(lk.thread_id())):
        lk.sm90.mbarrier_init(ready)
        lk.sm90.fence_mbarrier_init()
    lk.sm90.cluster_sync()                      # the peer's barrier is initialised
    rank = lk.sm90.block_rank_in_cluster()
    with lk.if_(is_zero(lk.thread_id())):
        lk.sm90.mbarrier_arrive(ready[0], cta=(rank + 1) % 2)
    lk.sm90.mbarrier_wait(ready[0], 0)
    mine = lk.global_tensor(out, Layout(blocks)).tile((1,), (lk.block_id(0),))
    with lk.if_(is_zero(lk.thread_id())):
        lk.store(mine.partition(SHARED_ELEMENT),
                 lk.full(SHARED_ELEMENT, 0, lk.i32) + lk.cast(rank, lk.i32))
    lk.sm90.cluster_sync()                      # no CTA exits while its peer may still arrive


def line_of_wrong_parity() -> int:
    """The source line of wrong_parity's wait (what its BarrierTimeoutError must name)."""
    from .source_lines import line_of
    return line_of(__file__, "# WRONG PARITY LINE")
