"""Every TMA mistake is a specific error naming the rule, the value and the user's source line;
a stride that breaks the 16-byte rule only at launch is a KernelArgumentError naming it."""
import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

from . import source_lines

BF16 = lk.Pointer[lk.bf16]
SW128 = Swizzle(3, 3, 3)


def line_of(text: str) -> int:
    return source_lines.line_of(__file__, text)


def load_kernel(shared_layout, tile=(128, 64), tensor=None, multicast=None, cluster=None,
                shared_tile=None, partition=False, scope=True, align=128):
    """A kernel that TMA-loads the (0, 0) tile of a (M, K) bf16 tensor into `shared_layout`."""
    @lk.kernel(num_warps=4, cluster=cluster)
    def k(a: BF16, M: lk.i32, K: lk.i32):
        A = lk.global_tensor(a, tensor(M, K) if tensor else Layout((M, K), (K, 1)))
        s_a = lk.shared_tensor(shared_layout, lk.bf16, align=align)
        if shared_tile is not None:
            s_a = s_a.tile(*shared_tile)
        full = lk.sm90.mbarrier_array(1, arrive_count=1, name="full")
        with lk.if_(lk.thread_id() < 1):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        src = A.tile(tile, (0, 0))
        if partition:
            src = src.partition(lk.tv_layout(Layout((128, 1)), Layout((1, 64))))
        with lk.if_(lk.thread_id() < 1):        # one thread arms full[0] (count 1) and loads
            if scope:
                with lk.sm90.expect_tx(full[0]):
                    lk.sm90.tma_load(s_a, src, full[0], multicast=multicast)  # THE LOAD
            else:
                lk.sm90.tma_load(s_a, src, full[0])  # UNSCOPED LOAD
        lk.sm90.mbarrier_wait(full[0], 0)
    return k


def error_of(kernel, *args, kind=lk.sm90.TmaError):
    with pytest.raises(kind) as info:
        kernel.ir(*args)
    return info.value


def assert_at(error, marker: str) -> None:
    assert error.location.line == line_of(marker), str(error)
    assert f"test_tma_errors.py:{line_of(marker)}" in str(error)


def test_byte_level_swizzle_on_element_offsets_is_refused():
    k = load_kernel(ComposedLayout(Swizzle(3, 4, 3), 0, Layout((128, 64), (64, 1))))
    err = error_of(k, BF16, 1000, 1024)
    assert "Sw<3,4,3> is not a TMA swizzle for 2-byte elements" in str(err)
    assert "Sw<3,3,3> (128B)" in str(err)
    assert_at(err, "# THE LOAD")


def test_transposed_shared_tile_is_refused():
    # K is contiguous in global memory but the shared tile puts M innermost
    k = load_kernel(ComposedLayout(SW128, 0, Layout((64, 128), (1, 64))), tile=(64, 128))
    err = error_of(k, BF16, 1000, 1024)
    assert "contiguous along mode 1" in str(err) and "innermost (stride 1)" in str(err)
    assert_at(err, "# THE LOAD")


def test_row_wider_than_the_swizzle_span_must_be_column_blocks():
    k = load_kernel(ComposedLayout(SW128, 0, Layout((128, 128), (128, 1))), tile=(128, 128))
    err = error_of(k, BF16, 1000, 1024)
    assert "no other mode of the shared tile steps by 64 (mode 0 is laid out as 128:128)" \
        in str(err) and "64-element-wide column blocks" in str(err)
    assert_at(err, "# THE LOAD")


def test_row_narrower_than_the_swizzle_span_is_refused():
    k = load_kernel(ComposedLayout(SW128, 0, Layout((128, 32), (32, 1))), tile=(128, 32))
    err = error_of(k, BF16, 1000, 1024)
    assert "a TMA box row is 64 elements (128 bytes)" in str(err)
    assert "contiguous run along mode 1 is 32 elements" in str(err)


def test_misaligned_shared_tile_is_refused():
    # rows 1.. of a 16 x 8 buffer: the box would start 64 bytes into the buffer
    k = load_kernel(Layout((16, 8), (8, 1)), tile=(4, 8), shared_tile=((4, 8), (1, 0)))
    err = error_of(k, BF16, 1000, 1024)
    assert "starts at element offset 32" in str(err) and "128 bytes" in str(err)
    assert_at(err, "# THE LOAD")


def test_unswizzled_buffer_needs_128_byte_alignment():
    k = load_kernel(Layout((128, 64), (64, 1)), align=None)
    err = error_of(k, BF16, 1000, 1024)
    assert "the shared buffer smem0 is 16-byte aligned" in str(err)
    assert "lk.shared_tensor(..., align=128)" in str(err)
    assert_at(err, "# THE LOAD")


def test_inner_box_below_16_bytes_is_refused():
    k = load_kernel(Layout((64, 4), (4, 1)), tile=(64, 4))
    err = error_of(k, BF16, 1000, 1024)
    assert "inner extent is 4 elements = 8 bytes" in str(err)


def test_global_stride_not_a_multiple_of_16_bytes_at_trace_time():
    k = load_kernel(Layout((128, 64), (64, 1)), tensor=lambda M, K: Layout((M, 100), (100, 1)))
    err = error_of(k, BF16, 1000, 1024)
    assert "mode 0 of a has stride 100 elements = 200 bytes" in str(err)
    assert "multiple of 16 bytes" in str(err)
    assert_at(err, "# THE LOAD")


def test_global_stride_checked_at_launch_when_symbolic():
    from layoutkit.ptx import Device, DeviceBuffer
    k = load_kernel(Layout((128, 64), (64, 1)))
    buf = DeviceBuffer(0x7F0000001000, (1000 * 100,), "uint16", Device(0, None, None),
                       owner=False)
    spec = k.specialize(BF16, 1000, 100)        # K = 100: positive, not provably 16-aligned
    with pytest.raises(lk.KernelArgumentError) as info:
        spec.hidden_values((buf, 1000, 100))
    message = str(info.value)
    assert "argument a" in message and "mode 0 of the tensor has stride K = 100 elements = " \
        "200 bytes" in message and "multiple of 16 bytes" in message


def test_launch_needs_device_memory_for_the_tensor_map():
    k = load_kernel(Layout((128, 64), (64, 1)))
    spec = k.specialize(BF16, 1000, 1024)
    with pytest.raises(lk.KernelArgumentError, match="argument a: the TMA tensor map needs a "
                                                     "device tensor"):
        spec.hidden_values((np.zeros(8, dtype=np.uint16), 1000, 1024))


def test_unaligned_pointer_is_refused():
    k = load_kernel(Layout((128, 64), (64, 1)))
    host = np.zeros(64, dtype=np.uint16)[1:]          # a 2-byte aligned address
    err = error_of(k, host, 1000, 1024)
    assert "the pointer a is not 16-byte aligned" in str(err)


def test_load_outside_an_expect_tx_scope():
    k = load_kernel(Layout((128, 64), (64, 1)), scope=False)
    err = error_of(k, BF16, 1000, 1024, kind=lk.TraceError)
    assert "completes on full[0], but no lk.sm90.expect_tx(full[0]) scope is open" in str(err)
    assert_at(err, "# UNSCOPED LOAD")


def test_partition_instead_of_a_tile():
    k = load_kernel(Layout((128, 64), (64, 1)), partition=True)
    err = error_of(k, BF16, 1000, 1024, kind=lk.TraceError)
    assert "the global side is a tile of a global tensor" in str(err)
    assert_at(err, "# THE LOAD")


def test_tile_shapes_must_match():
    k = load_kernel(Layout((64, 64), (64, 1)), tile=(128, 64))
    err = error_of(k, BF16, 1000, 1024, kind=lk.TraceError)
    assert "the global tile has shape (128, 64)" in str(err) and "(64, 64)" in str(err)


def test_multicast_needs_a_cluster():
    k = load_kernel(ComposedLayout(SW128, 0, Layout((128, 64), (64, 1))), multicast="x")
    err = error_of(k, BF16, 1000, 1024, kind=lk.TraceError)
    assert "multicast='x' needs a cluster kernel" in str(err)
    assert_at(err, "# THE LOAD")


def test_multicast_over_a_cluster_axis_of_one_cta():
    k = load_kernel(ComposedLayout(SW128, 0, Layout((128, 64), (64, 1))), multicast="y",
                    cluster=(2, 1, 1))
    err = error_of(k, BF16, 1000, 1024, kind=lk.TraceError)
    assert "names 1 CTA of the cluster (2, 1, 1)" in str(err)


def test_multicast_axes_are_checked():
    k = load_kernel(ComposedLayout(SW128, 0, Layout((128, 64), (64, 1))), multicast="w",
                    cluster=(2, 1, 1))
    err = error_of(k, BF16, 1000, 1024, kind=lk.TraceError)
    assert "multicast= is a cluster axis 'x', 'y' or 'z'" in str(err)


def test_multicast_slice_must_divide_the_box():
    k = load_kernel(ComposedLayout(SW128, 0, Layout((20, 64), (64, 1))), tile=(20, 64),
                    multicast="x", cluster=(8, 1, 1))
    err = error_of(k, BF16, 1000, 1024)
    assert "multicast to 8 CTAs slices the box (64, 20)" in str(err)


@lk.kernel(num_warps=1)
def bad_wait(c: BF16):
    lk.sm90.tma_store_wait(-1)  # BAD WAIT


def test_store_wait_count_is_checked():
    err = error_of(bad_wait, BF16, kind=lk.TraceError)
    assert "pending is a non-negative Python int" in str(err)
    assert_at(err, "# BAD WAIT")


@lk.kernel(num_warps=1)
def mixed_dtypes(c: lk.Pointer[lk.f32], M: lk.i32):
    C = lk.global_tensor(c, Layout((M, 64), (64, 1)))
    s_c = lk.shared_tensor(Layout((32, 64), (64, 1)), lk.bf16)
    lk.sm90.tma_store(C.tile((32, 64), (0, 0)), s_c)  # MIXED STORE


def test_store_dtypes_must_match():
    err = error_of(mixed_dtypes, lk.Pointer[lk.f32], 1000, kind=lk.TraceError)
    assert "a f32 global tensor and a bf16 shared tile" in str(err)
    assert_at(err, "# MIXED STORE")
