"""Shared tensors, barriers, reductions, broadcast and convert_layout on the CPU: PTX that
assembles, the layout reasoning checked by simulating it, and every error with its line."""
import itertools

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.lang.convert import shuffle_plan
from layoutkit.dsl.lang.ownership import plan_reduction
from layoutkit.ptx import assemble

from .block_kernels import (BLOCKED, STRIDED, WARP_BLOCKED, WARP_LOCAL, convert_roundtrip,
                            row_stats, transpose_tile)
from . import source_lines

THIS_FILE = __file__


def line_of(text: str) -> int:
    return source_lines.line_of(THIS_FILE, text)

B, F = lk.Pointer[lk.bf16], lk.Pointer[lk.f32]


# ---- shared memory -------------------------------------------------------------------------
def test_swizzled_tile_is_aligned_to_its_period_and_vectorized():
    ir = transpose_tile.ir(B, B, 128, 256)
    (alloc,) = ir.shared
    assert (alloc.nbytes, alloc.align) == (64 * 64 * 2, 1024) and ir.shared_bytes == 8192
    ptx = transpose_tile.ptx(B, B, 128, 256)
    assert ".extern .shared .align 1024 .b8 smem[];" in ptx
    assert "st.shared.v4.b32" in ptx and "xor.b32" in ptx and ptx.count("bar.sync 0;") == 1
    assemble(ptx)


@lk.kernel(num_warps=1)
def too_much_shared(x: lk.Pointer[lk.f32]):
    lk.shared_tensor(Layout(32768), lk.f32, name="first")
    lk.shared_tensor(Layout(32768), lk.f32, name="second")  # OVER


def test_over_the_limit_lists_every_allocation():
    with pytest.raises(lk.SharedMemoryError) as info:
        too_much_shared.ptx(F)
    text = str(info.value)
    assert "would total 262144 bytes" in text and "232448-byte (227 KB)" in text
    assert f"first: 131072 B, align 16, at +0" in text and "second: 131072 B, align 16, at +131072" in text
    assert info.value.location.line == line_of("# OVER")


@lk.kernel(num_warps=4)
def barrier_in_branch(x: lk.Pointer[lk.f32], n: lk.i32):
    with lk.if_(lk.thread_id() < n):
        lk.barrier()  # BRANCH


@lk.kernel(num_warps=1)
def reduce_in_divergent_loop(x: lk.Pointer[lk.f32], n: lk.i32):
    tv = lk.tv_layout(Layout(32), Layout(1))
    for i in lk.range(0, lk.thread_id() + n):
        lk.reduce_sum(lk.full(tv, 1.0), 0)  # LOOP


def test_block_wide_ops_must_be_reached_by_every_thread():
    with pytest.raises(lk.TraceError, match=r"lk.barrier\(\) inside lk.if_ \(opened at line "
                       r"\d+\): every thread of the block must reach it, or the barrier/shuffle "
                       r"hangs; move it out of the branch, or branch on a condition every thread "
                       r"of the block shares \(kernel integers without the thread index\)") as info:
        barrier_in_branch.ptx(F, 10)
    assert info.value.location.line == line_of("# BRANCH")
    with pytest.raises(lk.TraceError, match="thread-dependent bounds") as info:
        reduce_in_divergent_loop.ptx(F, 10)
    assert info.value.location.line == line_of("# LOOP")


@lk.kernel(num_warps=4)
def sums_of_live_blocks(x: lk.Tensor[lk.f32, 1], out: lk.Tensor[lk.f32, 1],
                        live: lk.Tensor[lk.i32, 1]):
    """out[b] = sum of x[128 b .. 128 b + 127] (a shuffle and shared-memory reduction behind
    lk.barrier) where live[b] > b, else untouched: the branch is the same in all the block."""
    b = lk.block_id(0)
    tv = lk.tv_layout(Layout(128), Layout(1))
    one = lk.TVLayout((1,), Layout((128, 1), (0, 0)))
    n = lk.index_value(lk.load(live.tile((1,), (b,)).partition(one)))
    with lk.if_(b < n):
        total = lk.reduce_sum(lk.load(x.tile((128,), (b,)).partition(tv)), 0)
        lk.barrier()
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.store(out.tile((1,), (b,)).partition(total.layout), total)


def test_block_wide_ops_run_under_a_branch_the_whole_block_takes():
    from layoutkit.dsl.interpreter import interpret
    x = np.arange(4 * 128, dtype=np.float32)
    out = np.full(4, -1.0, np.float32)
    interpret(sums_of_live_blocks, 4, x, out, np.array([1, 0, 5, 3], np.int32))
    sums = x.reshape(4, 128).sum(axis=1)
    assert out.tolist() == [sums[0], -1.0, sums[2], -1.0]
    ptx = sums_of_live_blocks.ptx(lk.TensorSpec(lk.f32, (512,)), lk.TensorSpec(lk.f32, (4,)),
                                  lk.TensorSpec(lk.i32, (4,)))
    assert "shfl.sync.bfly" in ptx and "bar.sync 0;" in ptx


def test_a_cluster_barrier_needs_no_branch_at_all():
    @lk.kernel(num_warps=4, cluster=(2, 1, 1))
    def k(x: lk.Pointer[lk.f32], n: lk.i32):
        with lk.if_(lk.block_id(0) < n):        # the same in a CTA, not across the cluster
            lk.sm90.cluster_sync()  # CLUSTER BRANCH
    with pytest.raises(lk.TraceError, match=r"lk.sm90.cluster_sync\(\) inside lk.if_ \(opened "
                       r"at line \d+\): every thread of the cluster must reach it, or the "
                       r"barrier/shuffle hangs; move it out of the branch\n") as info:
        k.ptx(F, 10)
    assert info.value.location.line == line_of("# CLUSTER BRANCH")


# ---- reductions ----------------------------------------------------------------------------
def simulate_reduction(tv, mode, data):
    """Run the plan's steps on per-thread values; returns the reduced tensor per thread."""
    plan = plan_reduction(tv, mode)
    threads = tv.num_threads
    partial = [[sum(data[tv.layout(t, v)] for v in g) for g in plan.groups] for t in range(threads)]
    for b in plan.lane_bits + plan.warp_bits:                       # butterflies, then warps
        partial = [[a + c for a, c in zip(partial[t], partial[t ^ (1 << b)])]
                   for t in range(threads)]
    return plan, partial


@pytest.mark.parametrize("tile, shape, stride, mode", [
    ((4, 64), ((8, 4), 8), ((32, 1), 4), 1),               # rows over 8 lanes x 8 values
    ((1, 2048), (256, (4, 2)), (4, (1, 1024)), 1),         # a row over 8 warps
    ((8, 32), ((8, 8), 4), ((1, 8), 64), 0),               # columns over lanes
    ((16, 8), ((4, 8, 2), 4), ((4, 16, 0), 1), 1),         # replicated over the last bit
])
def test_reduction_plan_sums_each_coordinate_once(tile, shape, stride, mode):
    tv = lk.TVLayout(tile, Layout(shape, stride))
    data = np.random.default_rng(0).integers(-9, 9, size=int(np.prod(tile)))
    plan, partial = simulate_reduction(tv, mode, data)
    want = data.reshape(tile, order="F").sum(axis=mode, keepdims=True).reshape(-1, order="F")
    for t in range(tv.num_threads):
        for j, value in enumerate(partial[t]):
            assert value == want[plan.layout.layout(t, j)]


def test_row_reductions_use_shuffles_then_shared_memory_across_warps():
    lanes_only = row_stats.ptx(F, F, F, 100, 1000, ROWS=8, K=2)
    across_warps = row_stats.ptx(F, F, F, 100, 1000, ROWS=1, K=4)
    assert lanes_only.count("shfl.sync.bfly.b32") == 10 and "bar.sync" not in lanes_only
    assert across_warps.count("shfl.sync.bfly.b32") == 10 and across_warps.count("bar.sync") == 2
    assert row_stats.ir(F, F, F, 100, 1000, ROWS=1, K=4).shared_bytes == 2 * 8 * 4
    for ptx in (lanes_only, across_warps):
        assemble(ptx)


@lk.kernel(num_warps=1)
def broadcast_wrong(x: lk.Pointer[lk.f32]):
    tv = lk.tv_layout(Layout((4, 8), (8, 1)), Layout((1, 4)))
    other = lk.tv_layout(Layout((4, 8), (1, 4)), Layout((1, 4)))
    r = lk.reduce_max(lk.full(tv, 1.0), 1)
    lk.broadcast(r, other)  # BROADCAST


@lk.kernel(num_warps=1)
def reduce_bf16(x: lk.Pointer[lk.f32]):
    lk.reduce_sum(lk.full(lk.tv_layout(Layout(32), Layout(2)), 1.0, lk.bf16), 0)  # BF16


def test_reduction_errors_name_the_rule_and_line():
    with pytest.raises(lk.LayoutMismatchError, match="reduced tensor:") as info:
        broadcast_wrong.ptx(F)
    assert info.value.location.line == line_of("# BROADCAST")
    with pytest.raises(lk.TraceError, match=r"reduces f32 tensors, got bf16") as info:
        reduce_bf16.ptx(F)
    assert info.value.location.line == line_of("# BF16")


# ---- convert_layout ------------------------------------------------------------------------
@pytest.mark.parametrize("src, dst", [(BLOCKED[:], ((32, 4), (1, 32))), (WARP_LOCAL, WARP_BLOCKED),
                                      (WARP_BLOCKED, WARP_LOCAL)])
def test_shuffle_plan_moves_every_value_to_its_owner(src, dst):
    size = 128 if len(src[0]) == 2 and src[0][0] == 32 else 256
    a = lk.TVLayout((size,), Layout(*src)) if size == 256 else lk.tv_layout(Layout(32), Layout(4))
    b = lk.TVLayout((size,), Layout(*dst))
    plan = shuffle_plan(a, b)
    assert plan is not None
    for t, (v, (lane_fit, index_fit, used)) in itertools.product(range(b.num_threads),
                                                                 enumerate(plan)):
        lane = lane_fit[0] + sum(w for bit, w in lane_fit[1].items() if t >> bit & 1)
        j = index_fit[0] + sum(w for bit, w in index_fit[1].items() if t >> bit & 1)
        assert j in used and a.layout(t // 32 * 32 + lane, j) == b.layout(t, v)


def test_convert_layout_lowers_to_shuffles_inside_a_warp_else_shared_memory():
    inside = convert_roundtrip.ptx(F, F, WARP_LOCAL, WARP_BLOCKED)
    across = convert_roundtrip.ptx(F, F, BLOCKED, STRIDED)
    assert inside.count("shfl.sync.idx.b32") == 16 and "bar.sync" not in inside
    assert "shfl" not in across and across.count("bar.sync 0;") == 1
    assert "st.shared.v4.f32" in across
    for ptx in (inside, across):
        assemble(ptx)


@lk.kernel(num_warps=2)
def convert_other_tile(x: lk.Pointer[lk.f32]):
    v = lk.full(lk.tv_layout(Layout(64), Layout(4)), 0.0)
    lk.convert_layout(v, lk.TVLayout((128,), Layout((64, 2), (2, 1))))  # CONVERT


def test_convert_layout_between_tiles_is_a_mismatch():
    with pytest.raises(lk.LayoutMismatchError, match="different tiles") as info:
        convert_other_tile.ptx(F)
    assert info.value.location.line == line_of("# CONVERT")
