"""Mistakes the DSL refuses while tracing (layouts, shared memory, TMA boxes and alignment,
register budgets, named barriers, roles, barrier use, wgmma accumulators) or at launch
(argument dtypes, host memory for a TMA tensor, strides): each with its exact diagnostic."""
import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.ptx import Device, DeviceBuffer

from ..dsl.source_lines import line_of
from .harness import F32, I32, check, diagnose

BF16 = lk.Pointer[lk.bf16]
SW128 = Swizzle(3, 3, 3)


def L(marker: str) -> int:
    return line_of(__file__, marker)


def tma_kernel(shared_layout=None, align=None, tile=(64, 64)):
    """One TMA load of the (0, 0) tile of a (M, K) bf16 tensor, waited on by every thread."""
    layout = shared_layout or ComposedLayout(SW128, 0, Layout((64, 64), (64, 1)))

    def k(a: BF16, M: lk.i32, K: lk.i32):
        A = lk.global_tensor(a, Layout((M, K), (K, 1)))
        s_a = lk.shared_tensor(layout, lk.bf16, align=align)
        full = lk.sm90.mbarrier_array(1, 1, name="full")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            with lk.sm90.expect_tx(full[0]):
                lk.sm90.tma_load(s_a, A.tile(tile, (0, 0)), full[0])      # TMA LOAD
        lk.sm90.mbarrier_wait(full[0], 0)
    return lk.Kernel(k, 4)


def initialised(count=2, arrive_count=1):
    bars = lk.sm90.mbarrier_array(count, arrive_count, name="full")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(bars)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return bars


def test_operands_in_different_layouts():
    def k(x: I32, n: lk.i32):
        a = lk.full(lk.tv_layout(Layout(128), Layout(2)), 0, lk.i32)
        b = lk.full(lk.tv_layout(Layout(128, 2), Layout(2, 1)), 0, lk.i32)
        a + b                                                         # MISMATCH
    check(diagnose(k, I32, 8, error=lk.LayoutMismatchError), __file__, "# MISMATCH",
          "operator +: the operands' layouts differ\n "
          "     i32 tensor: (128,2):(2,1) over tile (256,)\n "
          "     i32 tensor: (128,2):(1,128) over tile (256,)\n "
          " layoutkit never converts layouts implicitly: build both operands with the same TV "
          "layout")


def test_shared_memory_over_the_limit():
    def k(x: I32, n: lk.i32):
        lk.shared_tensor(Layout((256, 256)), lk.f32, name="big")      # TOO BIG
    check(diagnose(k, I32, 8, error=lk.SharedMemoryError), __file__, "# TOO BIG",
          "lk.shared_tensor: the kernel's shared memory would total 262144 bytes, over the "
          "232448-byte (227 KB) per-block limit of sm_90; allocations:\n "
          "     big: 262144 B, align 16, at +0 (lk.shared_tensor; "
          f"{__file__}:{L('# TOO BIG')})")


def test_tma_buffer_under_aligned():
    err = diagnose(tma_kernel(Layout((64, 64), (64, 1))).fn, BF16, 1024, 1024,
                   error=lk.sm90.TmaError)
    check(err, __file__, "# TMA LOAD",
          "lk.sm90.tma_load: the shared buffer smem0 is 16-byte aligned, but a TMA box's shared "
          "address is a multiple of 128 bytes; allocate it with lk.shared_tensor(..., "
          "align=128)")


def test_tma_pointer_not_16_byte_aligned():
    host = np.zeros(64, dtype=np.uint16)[1:]                          # 2-byte aligned
    with pytest.raises(lk.sm90.TmaError) as info:
        tma_kernel().ir(host, 1024, 1024)
    check(info.value, __file__, "# TMA LOAD",
          "lk.sm90.tma_load: the pointer a is not 16-byte aligned in this specialization; a TMA "
          "tensor's global address is a multiple of 16 bytes")


def test_tma_box_of_another_shape_than_the_shared_tile():
    err = diagnose(tma_kernel(tile=(64, 32)).fn, BF16, 1024, 1024, error=lk.TraceError)
    check(err, __file__, "# TMA LOAD",
          "lk.sm90.tma_load: the global tile has shape (64, 32) but the shared tile (64,64):(64,1) "
          "has shape (64, 64); they must match mode by mode")


def test_tma_global_tensor_and_shared_tile_of_other_dtypes():
    def k(a: F32, M: lk.i32, K: lk.i32):
        A = lk.global_tensor(a, Layout((M, K), (K, 1)))
        s_a = lk.shared_tensor(ComposedLayout(SW128, 0, Layout((64, 64), (64, 1))), lk.bf16)
        full = initialised(1)
        with lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(s_a, A.tile((64, 64), (0, 0)), full[0])      # DTYPES
    check(diagnose(k, F32, 1024, 1024, error=lk.TraceError), __file__, "# DTYPES",
          "lk.sm90.tma_load: a f32 global tensor and a bf16 shared tile; TMA copies bits, the "
          "element types must match")


def test_tma_tensor_map_needs_device_memory():
    spec = tma_kernel().specialize(BF16, 1024, 1024)
    with pytest.raises(lk.KernelArgumentError) as info:
        spec.hidden_values((np.zeros(8, dtype=np.uint16), 1024, 1024))   # HOST ARRAY
    check(info.value, __file__, "# HOST ARRAY",
          "argument a: the TMA tensor map needs a device tensor (a ndarray whose "
          "__dlpack_device__() is (1, 0) is not device memory (CUDA memory has DLPack device "
          "type 2))")


def test_tma_global_stride_not_a_multiple_of_16_bytes():
    spec = tma_kernel().specialize(BF16, 1000, 100)         # K = 100: not provably aligned
    buf = DeviceBuffer(0x7F0000001000, (1000 * 100,), "uint16", Device(0, None, None),
                       owner=False)
    with pytest.raises(lk.KernelArgumentError) as info:
        spec.hidden_values((buf, 1000, 100))                          # BAD STRIDE
    check(info.value, __file__, "# BAD STRIDE",
          "argument a: mode 0 of the tensor has stride K = 100 elements = 200 bytes; TMA needs "
          "every stride but the contiguous one to be a positive multiple of 16 bytes")


def test_argument_of_the_wrong_dtype():
    def k(x: BF16, n: lk.i32):
        pass
    with pytest.raises(lk.KernelArgumentError) as info:
        lk.Kernel(k, 4).ptx(F32, 8)                                    # WRONG DTYPE
    check(info.value, __file__, "# WRONG DTYPE",
          "argument x: Pointer[f32] given for x: Pointer[bf16]")


def test_argument_that_is_not_an_array():
    def k(x: BF16, n: lk.i32):
        pass
    with pytest.raises(lk.KernelArgumentError) as info:
        lk.Kernel(k, 4).ptx([1, 2, 3], 8)                                    # NOT ARRAY
    check(info.value, __file__, "# NOT ARRAY",
          "argument x: [1, 2, 3] is not an array (a torch tensor, DeviceBuffer or "
          "array-interface object) for x: Pointer[bf16]")


def test_integer_argument_given_a_float():
    def k(x: BF16, n: lk.i32):
        pass
    with pytest.raises(lk.KernelArgumentError) as info:
        lk.Kernel(k, 4).ptx(BF16, 8.5)                                    # FLOAT N
    check(info.value, __file__, "# FLOAT N",
          "argument n: 8.5 is not an integer for n: i32")


def roles(registers=(40, 232), count=(1, 2)):
    def k(x: I32, n: lk.i32):
        with lk.sm90.warp_role("producer", warpgroups=0, registers=registers[0]):   # ROLE P
            pass
        with lk.sm90.warp_role("consumer", warpgroups=tuple(range(1, 1 + count[1])),  # M1
                               registers=registers[1]):                    # ROLE C
            pass
    return k


def test_register_budget_over_the_sm_pool():
    check(diagnose(roles(registers=(40, 256)), I32, 8, num_warps=12), __file__, "# ROLE P",

          "warp roles: register budgets = 70656: 128*40 (producer) + 256*256 (consumer) = "
          "70656 registers exceed the CTA's pool of 64512 (384 threads x 168 at entry, 65536 "
          "per SM / 1 CTA(s)); setmaxnreg.inc would block forever")


def test_register_budget_not_a_multiple_of_8():
    check(diagnose(roles(registers=(40, 230)), I32, 8, num_warps=12), __file__, "# M1",

          "lk.sm90.warp_role('consumer'): role 'consumer' registers = 230: must be a multiple of 8 "
          "in 24..256 (setmaxnreg's register count)")


def test_roles_leaving_a_warpgroup_out():
    check(diagnose(roles(count=(1, 1)), I32, 8, num_warps=12), __file__, "# ROLE P",
          "the warp roles leave warpgroup(s) [2] of the block's 3 without a role; roles must "
          "cover the block (num_warps=12)")


def test_whole_block_barrier_inside_a_role():
    def k(x: I32, n: lk.i32):
        with lk.sm90.warp_role("producer", warpgroups=0, registers=40):
            lk.barrier()                                              # BAR IN ROLE
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=232):
            pass
    check(diagnose(k, I32, 8, num_warps=12), __file__, "# BAR IN ROLE",
          "lk.barrier() (bar.sync 0 over the whole CTA) inside warp role 'producer': the other "
          "roles never reach it, so it hangs; synchronise roles with "
          "lk.sm90.named_barrier_sync/arrive and explicit thread counts")


def test_named_barrier_id_0():
    def k(x: I32, n: lk.i32):
        lk.sm90.named_barrier_sync(0, 128)                                 # ID 0
    check(diagnose(k, I32, 8), __file__, "# ID 0",
          "lk.sm90.named_barrier_sync(0, 128): id 0 is the whole-CTA barrier of lk.barrier(); "
          "named barriers use ids 1..15")


def test_named_barrier_id_16():
    def k(x: I32, n: lk.i32):
        lk.sm90.named_barrier_sync(16, 128)                                # ID 16
    check(diagnose(k, I32, 8), __file__, "# ID 16",
          "lk.sm90.named_barrier_sync(16, 128): named barrier id = 16: must be in 0..15 (a CTA has "
          "16 named barriers)")


def test_named_barrier_count_not_whole_warps():
    def k(x: I32, n: lk.i32):
        lk.sm90.named_barrier_sync(1, 100)                                 # COUNT 100
    check(diagnose(k, I32, 8), __file__, "# COUNT 100",
          "lk.sm90.named_barrier_sync(1, 100): named barrier threads = 100: must be a multiple of "
          "32 in 32..1024 (warps take part whole)")


def test_named_barrier_with_two_counts():
    def k(x: I32, n: lk.i32):
        lk.sm90.named_barrier_sync(1, 128)  # M2
        lk.sm90.named_barrier_sync(1, 64)                                  # TWO COUNTS
    check(diagnose(k, I32, 8), __file__, "# TWO COUNTS",
          f"named barrier 1 counts 64 threads here but 128 at line {L('# M2')}; every "
          "participant must give the same count")


def test_wait_on_a_barrier_never_initialised():
    def k(x: I32, n: lk.i32):
        full = lk.sm90.mbarrier_array(2, 1, name="full")
        lk.sm90.mbarrier_wait(full[0], 0)                                  # UNINIT
    check(diagnose(k, I32, 8), __file__, "# UNINIT",
          "lk.sm90.mbarrier_wait on full[0]: mbarrier array 'full' is not initialised in this "
          "kernel before this point; call lk.sm90.mbarrier_init(full) (one thread), "
          "lk.sm90.fence_mbarrier_init() and a barrier first")


def test_expect_tx_with_no_copy():
    def k(x: I32, n: lk.i32):
        full = initialised()
        with lk.sm90.elect_one(), lk.sm90.expect_tx(full[0]):                   # NO COPY
            pass
    check(diagnose(k, I32, 8), __file__, "# NO COPY",
          "lk.sm90.expect_tx(full[0]): no async copy was attached inside the scope; the arrive "
          "would expect 0 bytes and complete the phase before any data lands (issue the TMA "
          "copies completing on this barrier inside it)")


def test_tma_load_outside_an_expect_tx_scope():
    def k(a: BF16, M: lk.i32, K: lk.i32):
        A = lk.global_tensor(a, Layout((M, K), (K, 1)))
        s_a = lk.shared_tensor(ComposedLayout(SW128, 0, Layout((64, 64), (64, 1))), lk.bf16)
        full = initialised(1)
        lk.sm90.tma_load(s_a, A.tile((64, 64), (0, 0)), full[0])          # UNSCOPED
    check(diagnose(k, BF16, 1024, 1024), __file__, "# UNSCOPED",
          "lk.sm90.tma_load of a (64, 64) into smem0 completes on full[0], but no "
          "lk.sm90.expect_tx(full[0]) scope is open; wrap the copies that complete on it in `with "
          "lk.sm90.expect_tx(full[0]):`")


def test_wait_inside_elect_one():
    def k(x: I32, n: lk.i32):
        full = initialised()
        with lk.sm90.elect_one():
            lk.sm90.mbarrier_wait(full[0], 0)                              # ELECT WAIT
    check(diagnose(k, I32, 8), __file__, "# ELECT WAIT",
          "lk.sm90.mbarrier_wait on full[0] inside lk.sm90.elect_one(): wait with the whole warp, "
          "then elect the thread that issues")


def test_arrive_count_above_the_arrays():
    def k(x: I32, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_arrive(full[0], count=2)                          # COUNT 2
    check(diagnose(k, I32, 8), __file__, "# COUNT 2",
          "lk.sm90.mbarrier_arrive on full[0]: count = 2 must be an int in 1..1 (the array's "
          "arrive count per phase)")


def test_barrier_array_initialised_twice():
    def k(x: I32, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_init(full)                                        # TWICE
    check(diagnose(k, I32, 8), __file__, "# TWICE",
          "lk.sm90.mbarrier_init: mbarrier array 'full' is initialised twice (re-initialising a "
          "live barrier is undefined: PTX ISA mbarrier.init)")


def test_phase_not_provably_a_parity():
    def k(x: I32, n: lk.i32):
        full = initialised()
        for i in lk.range(0, n):
            lk.sm90.mbarrier_wait(full[i % 2], i // 2)                     # NOT PARITY
    check(diagnose(k, I32, 8), __file__, "# NOT PARITY",
          "lk.sm90.mbarrier_wait on full[Mod(i0, 2)]: the phase parity floor(i0/2) is not provably "
          "0 or 1; write it modulo 2, e.g. (k // STAGES) % 2, or use lk.sm90.producer_state / "
          "lk.sm90.consumer_state")


def test_stage_outside_the_array():
    def k(x: I32, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_wait(full[2], 0)                                  # STAGE 2
    check(diagnose(k, I32, 8), __file__, "# STAGE 2",
          "mbarrier array 'full'[2]: the stage is outside 0..1 (the array has 2 barriers)")


def test_cluster_barrier_in_a_kernel_without_clusters():
    def k(x: I32, n: lk.i32):
        lk.sm90.cluster_sync()                                             # NO CLUSTER
    check(diagnose(k, I32, 8), __file__, "# NO CLUSTER",
          "lk.sm90.cluster_sync() needs a cluster kernel: declare @lk.kernel(cluster=(x, y, z))")


def wgmma_tile():
    """A written 64 x 64 bf16 wgmma operand (a read of unwritten shared memory is an error)."""
    s = lk.shared_tensor(ComposedLayout(SW128, 0, Layout((64, 64), (64, 1))), lk.bf16)
    tv = lk.TVLayout((64, 64), Layout(((8, 16), (8, 4)), ((64 * 8, 1), (64, 16))))
    lk.store(s.partition(tv), lk.full(tv, 1.0, lk.bf16))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    return s


def test_accumulator_read_after_the_wgmma_consumed_it():
    def k(x: I32, n: lk.i32):
        s = wgmma_tile()
        acc = lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0, lk.f32)
        lk.sm90.wgmma_fence()
        lk.sm90.wgmma(acc, s, s)  # M3
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        acc + 1.0                                                     # STALE ACC
    check(diagnose(k, I32, 8, error=lk.sm90.AccumulatorUseError), __file__, "# STALE ACC",
          f"%5 was consumed as the accumulator of the wgmma at line {L('# M3')}, which updates "
          "it in place: read the wgmma's result instead (acc = lk.sm90.wgmma(acc, ...)); the old "
          "value is gone")


def test_wgmma_result_read_before_its_wait():
    def k(x: I32, n: lk.i32):
        s = wgmma_tile()
        acc = lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0, lk.f32)
        lk.sm90.wgmma_fence()
        out = lk.sm90.wgmma(acc, s, s)  # M4
        lk.sm90.wgmma_commit()
        out + 1.0                                                     # EARLY READ
        lk.sm90.wgmma_wait(0)
    check(diagnose(k, I32, 8, error=lk.sm90.AccumulatorUseError), __file__, "# EARLY READ",
          f"this op (binary) reads %7, the accumulator result of the wgmma at line {L('# M4')}, "
          "while that wgmma may still run; commit it (lk.sm90.wgmma_commit()) and wait for it "
          "(lk.sm90.wgmma_wait(n)) before reading")


def test_branch_on_loaded_data_around_an_arrive_is_a_warning():
    from .hardware_kernels import data_dependent_arrive_body
    with pytest.warns(lk.ProtocolWarning) as record:
        lk.Kernel(data_dependent_arrive_body, 4).ptx(I32, 8)
    (warning,) = record.list
    from .hardware_kernels import __file__ as path
    assert str(warning.message) == (
        "kernel data_dependent_arrive_body: the static protocol check could not decide: the "
        "condition of this lk.if_ depends on values loaded from memory; the check assumed "
        "every thread takes it")
    assert (warning.filename, warning.lineno) == (path, line_of(path, "# DATA BRANCH"))
