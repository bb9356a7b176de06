"""Static bounds: shared slices, tiles and views inside their buffer, non-negative shared
strides, unique shared buffer names, TV layouts inside their tile, and bounds checks whose
bound does not fit 32 bits. Each refuted rule is a TraceError with its exact text and line;
an undecided one a BoundsWarning at the line; a bound past 32 bits takes the 64-bit path."""
import warnings

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

from ..dsl.source_lines import line_of
from .harness import I32, check, diagnose

TV = lk.tv_layout(Layout(128), Layout(1))


def L(marker: str) -> int:
    return line_of(__file__, marker)


def test_slice_index_past_the_rows_of_a_shared_buffer():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((32, 8), (8, 1)), lk.i32, name="rows")
        s[40, :]                                                      # ROW 40
    check(diagnose(k, I32, 8), __file__, "# ROW 40",
          "rows[40, :]: index 40 is outside mode 0 of the shared tensor (32,8):(8,1) (buffer "
          "rows), whose extent 32 allows indices 0..31")


def test_slice_index_that_is_out_of_range_for_every_iteration():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((4, 32), (32, 1)), lk.i32, name="ring")
        for i in lk.range(0, 2):
            s[i + 4, :]                                               # PAST THE RING
    check(diagnose(k, I32, 8), __file__, "# PAST THE RING",
          "ring[i0 + 4, :]: index i0 + 4 (range 4..5) is outside mode 0 of the shared tensor "
          "(4,32):(32,1) (buffer ring), whose extent 4 allows indices 0..3")


def test_tile_reaching_element_1039_of_a_1024_element_buffer():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout(1024), lk.i32, name="buf")
        s.tile((16,), (64,))                                          # TILE 64
    check(diagnose(k, I32, 8), __file__, "# TILE 64",
          f"buf.tile((16,), (64,)): tile 64 covers indices 1024..1039 of mode 0, past the "
          f"mode's extent 1024 (shared tensor {Layout(1024)}, buffer buf); a shared tile is "
          "never masked, it lies inside its tensor: along mode 0 its tiles of 16 are 0..63")


def test_partial_last_tile_of_a_shared_tensor():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((100, 8), (8, 1)), lk.i32, name="a")
        s.tile((32, 8), (3, 0))                                       # PARTIAL TILE
    check(diagnose(k, I32, 8), __file__, "# PARTIAL TILE",
          "a.tile((32, 8), (3, 0)): tile 3 covers indices 96..127 of mode 0, past the mode's "
          "extent 100 (shared tensor (100,8):(8,1), buffer a); a shared tile is never masked, "
          "it lies inside its tensor: along mode 0 its tiles of 32 are 0..2")


def test_tile_of_a_ring_stage_past_the_last_stage_in_a_loop():
    """lk.range(0, 4) over 3 stages: iteration 3 certainly slices past the ring."""
    def k(x: I32, n: lk.i32):
        ring = lk.shared_tensor(Layout((128, 3), (1, 128)), lk.i32, name="ring")
        for i in lk.range(0, 4):
            ring.tile((128, 1), (0, i))                               # STAGE I
    check(diagnose(k, I32, 8), __file__, "# STAGE I",
          "ring.tile((128, 1), (0, i0)): tile i0 covers indices 0..3 of mode 1, past the mode's "
          "extent 3 (shared tensor (128,3):(1,128), buffer ring); a shared tile is never "
          "masked, it lies inside its tensor: along mode 1 its tiles of 1 are 0..2")


def test_ring_stage_of_a_loop_to_a_parameter_is_a_warning():
    def k(x: I32, n: lk.i32):
        ring = lk.shared_tensor(Layout((128, 3), (1, 128)), lk.i32, name="ring")
        for i in lk.range(0, n):
            ring.tile((128, 1), (0, i))                               # STAGE TO N
    with pytest.warns(lk.BoundsWarning) as record:
        lk.Kernel(k, 4).ptx(I32, 8)
    (warning,) = record.list
    assert str(warning.message) == (
        "ring.tile((128, 1), (0, i0)): could not prove that tile i0 lies inside mode 1: from "
        "the declared facts it covers indices 0..2147483646, against the mode's extent 3 "
        "(shared tensor (128,3):(1,128), buffer ring); a shared tile is never masked, it lies "
        "inside its tensor: along mode 1 its tiles of 1 are 0..2")
    assert (warning.filename, warning.lineno) == (__file__, L("# STAGE TO N"))


def test_loop_index_guarded_by_an_if_takes_the_conditions_range():
    """Inside lk.if_(i < 32) the index i is 0..31: proven, no warning. A guard that leaves
    part of the range outside (i < 36) is a warning with the narrowed range, not an error:
    whether the branch runs for those indices is not known here."""
    def k(x: I32, n: lk.i32):
        rows = lk.shared_tensor(Layout((32, 8), (8, 1)), lk.i32, name="rows")
        for i in lk.range(0, 40):
            with lk.if_(i < 32):
                rows[i, :]
            with lk.if_((i >= 8) & (i < 40)):
                rows[i - 8, :]
            with lk.if_(i < 36):
                rows[i, :]                                            # GUARDED ROW
    with pytest.warns(lk.BoundsWarning) as record:
        lk.Kernel(k, 4).ptx(I32, 8)
    (warning,) = record.list
    assert str(warning.message) == (
        "rows[i0, :]: could not prove that index i0 is inside mode 0 of the shared tensor "
        "(32,8):(8,1) (buffer rows), whose extent 32 allows indices 0..31; from the declared "
        "facts it ranges over 0..35")
    assert (warning.filename, warning.lineno) == (__file__, L("# GUARDED ROW"))


def test_a_guard_that_proves_nothing_keeps_the_warning():
    """An | of conditions, a comparison with a runtime value, or a guard no index satisfies
    (a branch that never runs) narrow nothing."""
    def k(x: I32, n: lk.i32):
        rows = lk.shared_tensor(Layout((32, 8), (8, 1)), lk.i32, name="rows")
        for i in lk.range(0, 40):
            with lk.if_((i < 32) | (i < n)):
                rows[i, :]                                            # OR GUARD
            with lk.if_(i < n):
                rows[i, :]                                            # RUNTIME GUARD
            with lk.if_(i >= 64):
                rows[i, :]                                            # DEAD GUARD
    with pytest.warns(lk.BoundsWarning) as record:
        lk.Kernel(k, 4).ptx(I32, 8)
    assert [w.lineno for w in record.list] == [L("# OR GUARD"), L("# RUNTIME GUARD"),
                                              L("# DEAD GUARD")]
    assert all(str(w.message).endswith("from the declared facts it ranges over 0..39")
               for w in record.list)


def test_slice_by_an_unbounded_runtime_index_is_a_warning():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((4, 32), (32, 1)), lk.i32, name="ring")
        s[n, :]                                                       # STAGE N
    with pytest.warns(lk.BoundsWarning) as record:
        lk.Kernel(k, 4).ptx(I32, 8)
    (warning,) = record.list
    assert str(warning.message) == (
        "ring[n, :]: could not prove that index n is inside mode 0 of the shared tensor "
        "(4,32):(32,1) (buffer ring), whose extent 4 allows indices 0..3; from the declared "
        "facts it ranges over 1..2147483647")
    assert (warning.filename, warning.lineno) == (__file__, L("# STAGE N"))


def test_hierarchical_index_past_its_nested_mode():
    """A run-time entry of a nested coordinate is not checked by the algebra (its bound is a
    run-time fact): the view's reach, offset + cosize - 1, is, against the buffer."""
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout(((4, 8), 8), ((1, 4), 32)), lk.i32, name="blk")
        for i in lk.range(8, 10):
            s[(1, i), :]                                              # NESTED INDEX
    check(diagnose(k, I32, 8), __file__, "# NESTED INDEX",
          f"blk[(1, i0), :]: the view {Layout((8,), (32,))} at offset 4*i0 + 1 reaches elements "
          "33..261, but the shared buffer blk holds 256 elements (0..255); a view of a shared "
          "buffer lies inside it")


def test_negative_stride_of_a_shared_tensor():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((128, 2), (-1, 128)), lk.i32)    # BACKWARDS
        lk.store(s[:, 0].partition(TV), lk.full(TV, 1, lk.i32))
    check(diagnose(k, I32, 8), __file__, "# BACKWARDS",
          "lk.shared_tensor: the layout (128,2):(-1,128) has the negative stride -1 (stride "
          "leaf 0); a shared tensor's strides are >= 0 (a stride of 0 repeats an element), so "
          "that no offset it computes lies below the buffer's start")


def test_negative_stride_in_a_swizzled_view():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((64, 8), (8, 1)), lk.bf16, name="s")
        s.view(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (-64, 1))))   # VIEW
    check(diagnose(k, I32, 8), __file__, "# VIEW",
          "SharedTensor.view: the layout Sw<3,3,3> o 0 o (8,64):(-64,1) has the negative "
          "stride -64 (stride leaf 0); a shared tensor's strides are >= 0 (a stride of 0 "
          "repeats an element), so that no offset it computes lies below the buffer's start")


def test_two_shared_buffers_with_one_name():
    def k(x: I32, n: lk.i32):
        lk.shared_tensor(Layout(128), lk.i32, name="acc")             # FIRST ACC
        lk.shared_tensor(Layout(256), lk.i32, name="acc")             # SECOND ACC
    check(diagnose(k, I32, 8), __file__, "# SECOND ACC",
          "lk.shared_tensor: the shared buffer name 'acc' is already taken (lk.shared_tensor "
          f"at {__file__}:{L('# FIRST ACC')}); each shared buffer and barrier array takes a "
          "name of its own")


def test_barrier_array_named_like_a_shared_buffer():
    def k(x: I32, n: lk.i32):
        lk.shared_tensor(Layout(128), lk.i32, name="full")            # BUFFER FULL
        lk.sm90.mbarrier_array(2, 1, name="full")                          # BARRIERS FULL
    check(diagnose(k, I32, 8), __file__, "# BARRIERS FULL",
          "lk.sm90.mbarrier_array: the shared buffer name 'full' is already taken "
          f"(lk.shared_tensor at {__file__}:{L('# BUFFER FULL')}); each shared buffer and barrier "
          "array takes a name of its own")


def test_tv_layout_mapping_outside_its_tile():
    def k(x: I32, n: lk.i32):
        tv = lk.TVLayout((128,), Layout((128, 2), (2, 1)))           # TV OUTSIDE
        lk.full(tv, 0, lk.i32)
    check(diagnose(k, I32, 8), __file__, "# TV OUTSIDE",
          "the TV layout (128,2):(2,1) over tile (128,) maps (thread 127, value 1) to tile "
          "index 255, outside its tile of 128 elements (0..127); a TV layout maps every "
          "(thread, value) into its tile")


def test_tv_layout_with_a_negative_stride():
    def k(x: I32, n: lk.i32):
        tv = lk.TVLayout((16, 8), Layout(((4, 8), 4), ((-1, 4), 32)))   # TV NEGATIVE
        lk.full(tv, 0, lk.i32)
    check(diagnose(k, I32, 8, num_warps=1), __file__, "# TV NEGATIVE",
          "the TV layout ((4,8),4):((-1,4),32) over tile (16,8) maps (thread 3, value 0) to "
          "tile index -3, outside its tile of 128 elements (0..127); a TV layout maps every "
          "(thread, value) into its tile")


def _checks(ptx: str) -> list[str]:
    return [line.split()[0] for line in ptx.splitlines() if line.strip().startswith("setp.")]


def test_u32_extent_from_2_31_is_checked_in_64_bits():
    """The issue's case: n = 3e9 in 32-bit signed arithmetic is negative and masked every
    access off; the bound is now zero-extended and compared in 64 bits."""
    def k(x: I32, n: lk.u32):
        X = lk.global_tensor(x, Layout(n)).tile((128,), (lk.block_id(),)).partition(TV)
        lk.store(X, lk.load(X) + 1)
    ptx = lk.Kernel(k, 4).ptx(I32, 3_000_000_000)
    assert _checks(ptx) == ["setp.lt.s64"]
    assert "cvt.s64.u32" in ptx and "setp.lt.s32" not in ptx


def test_flat_extent_of_two_i32_parameters_is_checked_in_64_bits():
    """M*K of two i32 extents can pass 2**31 (a 65536 x 65536 matrix): its product and the
    element's coordinate are computed in 64 bits, not wrapped in 32."""
    def k(x: I32, M: lk.i32, K: lk.i32):
        X = lk.global_tensor(x, Layout(M * K)).tile((128,), (lk.block_id(),)).partition(TV)
        lk.store(X, lk.load(X) + 1)
    ptx = lk.Kernel(k, 4).ptx(I32, 65536, 65536)
    assert _checks(ptx) == ["setp.lt.s64"] and "mul.lo.s64" in ptx and "mul.lo.s32" not in ptx


def test_constant_extent_from_2_31_is_checked_in_64_bits():
    def k(x: I32, N: lk.constexpr):
        X = lk.global_tensor(x, Layout(N)).tile((128,), (lk.block_id(),)).partition(TV)
        lk.store(X, lk.load(X) + 1)
    ptx = lk.Kernel(k, 4).ptx(I32, N=3_000_000_000)
    assert _checks(ptx) == ["setp.lt.s64"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "3000000000" in ptx or "0xB2D05E00" in ptx


OUTSIDE = lk.TVLayout((64,), Layout((32, 4), (1, 32)))      # made at import: no error yet


def test_tv_layout_made_outside_the_kernel_fails_where_the_kernel_uses_it():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout(64), lk.i32, name="s")
        lk.load(s.partition(OUTSIDE))                                 # USED HERE
    check(diagnose(k, I32, 8, num_warps=1), __file__, "# USED HERE",
          "the TV layout (32,4):(1,32) over tile (64,) maps (thread 31, value 3) to tile index "
          "127, outside its tile of 64 elements (0..63); a TV layout maps every (thread, value) "
          "into its tile")
