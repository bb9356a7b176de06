"""SharedTensor[...]: CuTe-style slicing of a shared ring buffer by a run-time stage."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

RING = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((128, 64, 4), (64, 1, 8192)))


def test_a_stage_of_a_ring_keeps_the_swizzle_and_moves_the_offset():
    seen = {}

    @lk.kernel(num_warps=4)
    def k(x: lk.Pointer[lk.bf16], s: lk.i32):
        ring = lk.shared_tensor(RING, lk.bf16)
        seen["stage"], seen["fixed"] = ring[:, :, s], ring[:, 3, 1]

    k.ir(lk.Pointer[lk.bf16], 3)
    stage, fixed = seen["stage"], seen["fixed"]
    assert (str(stage.layout), str(stage.offset)) == ("(128,64):(64,1)", "8192*s")
    assert stage.swizzle == Swizzle(3, 3, 3)
    assert (str(fixed.layout), fixed.offset) == ("(128):(64)", 3 + 8192)


@pytest.mark.parametrize("index, message", [((slice(0, 4), 0, 0), "ranges are tiles")])
def test_bad_slices_raise(index, message):
    @lk.kernel(num_warps=4)
    def k(x: lk.Pointer[lk.bf16]):
        lk.shared_tensor(RING, lk.bf16)[index]

    with pytest.raises(lk.TraceError, match=message):
        k.ir(lk.Pointer[lk.bf16])
