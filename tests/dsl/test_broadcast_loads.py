"""Broadcast (stride-0) modes of global tensors: lk.global_tensor's bounds may leave such a mode
unmasked (None), and lk.load reads the elements that several values name once. Checked on the
interpreter against numpy (ragged rows masked, every column of a broadcast row equal), in the
PTX (one load per distinct element), and the errors."""
import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import interpret

TV = lk.tv_layout(Layout((4, 8), (8, 1)), Layout((4, 4), (1, 4)))       # 32 threads, 16 values


@lk.kernel(num_warps=1)
def row_scale(s: lk.Tensor[lk.f32, 1], out: lk.Tensor[lk.f32, 2], ROWS: lk.constexpr):
    """out[r, c] = s[r] over a (16, 32) tile: s seen as out's shape with strides (1, 0), its
    column mode unmasked (bounds None), rows masked at s's extent."""
    m = s.shape[0]
    view = lk.global_tensor(s.ptr, Layout((m, 32), (1, 0)), bounds=(m, None))
    tile = (16, 32)
    values = lk.load(view.tile(tile, (lk.block_id(0), 0)).partition(TV), other=-1.0)
    lk.store(out.tile(tile, (lk.block_id(0), 0)).partition(TV), values)


def test_broadcast_rows_on_the_interpreter():
    s = np.arange(20, dtype=np.float32) + 1
    out = np.zeros((32, 32), np.float32)
    interpret(row_scale, 2, s, out, 16)
    want = np.where(np.arange(32)[:, None] < 20, np.arange(32)[:, None] + 1.0, -1.0)
    assert np.array_equal(out, np.broadcast_to(want, (32, 32)))


def test_each_distinct_element_is_loaded_once():
    ptx = row_scale.ptx(lk.TensorSpec(lk.f32, (20,)), lk.TensorSpec(lk.f32, (32, 32)), 16)
    loads = [x for x in ptx.splitlines() if "ld.global" in x]
    # a thread's 16 values lie in 4 rows (value mode of stride 1 along rows) x 4 columns: the
    # columns name one element of s, so 4 loads, each masked by its row alone
    assert len(loads) == 4, loads


def test_a_masked_mode_still_masks():
    @lk.kernel(num_warps=1)
    def full_mask(s: lk.Tensor[lk.f32, 1], out: lk.Tensor[lk.f32, 2]):
        m, n = s.shape[0], out.shape[1]
        view = lk.global_tensor(s.ptr, Layout((m, n), (1, 0)))     # default bounds: (m, n)
        lk.store(out.tile((16, 32), (0, 0)).partition(TV),
                 lk.load(view.tile((16, 32), (0, 0)).partition(TV)))
    ptx = full_mask.ptx(lk.TensorSpec(lk.f32, (20,)), lk.TensorSpec(lk.f32, (32, 32)))
    assert len([x for x in ptx.splitlines() if "ld.global" in x]) == 16    # each its own mask


def test_only_a_broadcast_mode_may_go_unmasked():
    @lk.kernel(num_warps=1)
    def bad(s: lk.Tensor[lk.f32, 2]):
        lk.global_tensor(s.ptr, s.layout, bounds=(None, s.shape[1]))
    with pytest.raises(lk.TraceError, match=r"global_tensor: bounds\[0\] is None, but mode 0 of "
                                            r".* has stride .*; only a broadcast mode \(stride "
                                            r"0: one element for every coordinate\) may be "
                                            r"unmasked") as info:
        bad.ptx(lk.TensorSpec(lk.f32, (64, 64)))
    assert "test_broadcast_loads.py" in str(info.value)


def test_tma_needs_every_extent():
    @lk.kernel(num_warps=4)
    def tma(s: lk.Tensor[lk.f32, 2]):
        view = lk.global_tensor(s.ptr, s.layout, bounds=(s.shape[0], None))
        smem = lk.shared_tensor(Layout((8, 32), (32, 1)), lk.f32, name="smem")
        bar = lk.sm90.mbarrier_array(1, 1, name="bar")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(bar)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        with lk.sm90.elect_one(), lk.sm90.expect_tx(bar[0]):
            lk.sm90.tma_load(smem, view.tile((8, 32), (0, 0)), bar[0])
    with pytest.raises(lk.TraceError, match=r"lk.sm90.tma_load: the global tensor was made with "
                                            r"bounds \(.*, None\); TMA needs every mode's "
                                            r"extent"):
        tma.ptx(lk.TensorSpec(lk.f32, (64, 64), (1, 0)))
