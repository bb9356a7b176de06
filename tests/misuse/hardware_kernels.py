"""Broken kernels that only the hardware can show: their fault depends on memory contents, so
the static check can only warn (ProtocolWarning), and a debug build's bounded wait turns the
hang into BarrierTimeoutError on the GPU (tests/gpu/test_misuse_gpu.py runs them).

- `data_dependent_arrive`: each thread arrives on `ready[0]` (count 128) only where its flag in
  memory is positive; with a zero flag the phase never completes and every thread's wait hangs.
"""
import layoutkit.dsl as lk
from layoutkit.algebra import Layout

THREADS = 128


def data_dependent_arrive_body(flags: lk.Pointer[lk.i32], n: lk.i32):
    ready = lk.sm90.mbarrier_array(1, THREADS, name="ready")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(ready)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    tv = lk.tv_layout(Layout(THREADS), Layout(1))
    flag = lk.load(lk.global_tensor(flags, Layout(THREADS)).partition(tv))
    with lk.if_(lk.Scalar((flag > 0).values[0])):                     # DATA BRANCH
        lk.sm90.mbarrier_arrive(ready[0])
    lk.sm90.mbarrier_wait(ready[0], 0)                                     # DATA WAIT


data_dependent_arrive = lk.kernel(data_dependent_arrive_body, num_warps=4, debug=True)
