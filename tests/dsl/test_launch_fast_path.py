"""The DSL's launch fast path (layoutkit.dsl.core.launch_fast) on the CPU: after a first launch through
the checked path, plain calls launch without it, pick the specialization the checked path would
(alignment, int facts, constexprs, debug flag) and pack the same bytes; every other call still
goes through the checked path and its worded errors. Fakes: tests/dsl/fake_gpu.py.
"""
import os
import struct

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.core.launch_fast import FastLaunch, fast_launch_source
from layoutkit.ptx import LaunchArgumentError
from layoutkit.ptx import LaunchConfigError, SettingsError, settings

from .fake_gpu import BASE, STREAM, FakeGPU, Tensor


@lk.kernel(num_warps=1)
def scale(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32, a: lk.f32):
    """y = a * x over n elements, 4 consecutive per thread (vector accesses when aligned)."""
    tv = lk.tv_layout(Layout(32), Layout(4))
    X = lk.global_tensor(x, Layout(n)).tile((128,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y, Layout(n)).tile((128,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a)


@lk.kernel(num_warps=1)
def scale_by(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32, a: lk.f32,
             VALUES: lk.constexpr):
    """`scale` with VALUES consecutive elements per thread."""
    tv = lk.tv_layout(Layout(32), Layout(VALUES))
    X = lk.global_tensor(x, Layout(n)).tile((32 * VALUES,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y, Layout(n)).tile((32 * VALUES,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a)


X, Y = Tensor(BASE), Tensor(BASE + 0x10000)


def packed(x, y, n, a) -> bytes:
    """The parameter buffer of scale/scale_by: x (u64), y (u64), n (s32), a (f32)."""
    return struct.pack("<QQif", x.ptr, y.ptr, n, a)


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGPU(monkeypatch, [scale, scale_by])
    yield fake
    fake.reset()


@pytest.fixture
def checked(monkeypatch):
    """The calls that went through Kernel.launch (the checked path), per kernel name."""
    calls = []
    for k in (scale, scale_by):
        def spy(grid, *args, _real=k.launch, _name=k.name, **kwargs):
            calls.append(_name)
            return _real(grid, *args, **kwargs)
        monkeypatch.setitem(k.__dict__, "launch", spy)
    return calls


def test_a_second_launch_takes_the_fast_path_with_the_same_bytes(gpu, checked):
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 2.0)
    scale[4](Tensor(BASE + 0x20000), Y, 8192, 0.5)     # same facts, other values: packed
    assert checked == ["scale"]
    first, second, third = gpu.calls
    assert first.spec is second.spec is third.spec and first.spec.key == scale.key(X, Y, 4096, 2.0)
    assert first.packed == second.packed == packed(X, Y, 4096, 2.0)
    assert third.packed == packed(Tensor(BASE + 0x20000), Y, 8192, 0.5)
    assert (first.grid, first.block, first.stream) == ((4, 1, 1), 32, STREAM)


def test_an_unaligned_pointer_after_an_aligned_one_picks_the_other_specialization(gpu, checked):
    x4 = Tensor(BASE + 4)                              # 4-byte aligned only
    for x in (X, X, x4, x4, X, x4):
        scale[4](x, Y, 4096, 2.0)
    specs = [c.spec for c in gpu.calls]
    aligned, unaligned = specs[0], specs[2]
    assert specs == [aligned, aligned, unaligned, unaligned, aligned, unaligned]
    assert aligned.key[0] is True and unaligned.key[0] is False
    assert unaligned.param_specs()[0].pointer_align == 4 and aligned.ptx != unaligned.ptx
    assert [c.packed for c in gpu.calls] == [packed(x, Y, 4096, 2.0) for x in (X, X, x4, x4, X, x4)]
    assert checked == ["scale", "scale"]              # one first launch per specialization


def test_an_unaligned_pointer_never_reaches_the_aligned_launcher(gpu, checked):
    scale[4](X, Y, 4096, 2.0)
    aligned = gpu.calls[0].spec
    for offset in (4, 8, 12, 20):
        scale[4](Tensor(BASE + offset), Y, 4096, 2.0)
        assert gpu.calls[-1].spec is not aligned and gpu.calls[-1].spec.key[0] is False


@pytest.mark.parametrize("values", [(4096, 8192), (4095, 17), (4104, 24), (1, 1), (0, -3)])
def test_a_changed_int_fact_picks_its_specialization(gpu, checked, values):
    scale[4](X, Y, 4096, 2.0)
    for n in values:
        scale[4](X, Y, n, 2.0)
        assert gpu.calls[-1].spec.key == scale.key(X, Y, n, 2.0)
        assert gpu.calls[-1].packed == packed(X, Y, n, 2.0)
    facts = {c.spec.key[2] for c in gpu.calls}
    assert facts == {scale.key(X, Y, n, 2.0)[2] for n in (4096,) + values}
    assert len(checked) == len(facts)                  # a new fact: its first launch is checked


def test_keywords_bind_like_positionals(gpu, checked):
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, n=4096, a=2.0)
    scale[4](x=X, a=2.0, n=4096, y=Y)
    assert checked == ["scale"]
    assert len({id(c.spec) for c in gpu.calls}) == 1
    assert {c.packed for c in gpu.calls} == {packed(X, Y, 4096, 2.0)}


def test_constexprs_positional_and_by_keyword(gpu, checked):
    scale_by[4](X, Y, 4096, 2.0, 4)
    scale_by[4](X, Y, 4096, 2.0, 4)
    scale_by[4](X, Y, 4096, 2.0, VALUES=4)
    scale_by[8](X, Y, 4096, 2.0, VALUES=2)
    scale_by[8](X, Y, 4096, 2.0, 2)
    specs = [c.spec for c in gpu.calls]
    assert specs[0] is specs[1] is specs[2] and specs[3] is specs[4] is not specs[0]
    assert specs[0].key[4] == ("int", 4) and specs[3].key[4] == ("int", 2)
    assert checked == ["scale_by", "scale_by"]
    with pytest.raises(lk.ConstexprError, match="constexpr VALUES = \\[4\\] is not hashable"):
        scale_by[4](X, Y, 4096, 2.0, [4])
    assert len(gpu.calls) == 5


@pytest.mark.parametrize("args, kwargs, message", [
    ((X, Y, 4096), {}, r"kernel scale: missing argument\(s\) a"),
    ((X, Y, 4096, 2.0, 5), {}, r"kernel scale takes 4 arguments \(x, y, n, a\), got 5"),
    ((X, Y, 4096), {"a": 2.0, "b": 1}, r"kernel scale has no parameter 'b'"),
    ((X, Y, 4096, 2.0), {"n": 3}, r"kernel scale: argument 'n' given twice"),
    ((Tensor(BASE, "bfloat16"), Y, 4096, 2.0), {}, r"argument x: an array of bf16 given for "
     r"x: Pointer\[f32\]"),
    ((Tensor(BASE, "int8"), Y, 4096, 2.0), {}, r"argument x: a tensor of torch.int8 given for "
     r"x: Pointer\[f32\]"),
    ((X, Y, 2 ** 31, 2.0), {}, r"argument n: 2147483648 does not fit i32"),
    ((X, Y, True, 2.0), {}, r"argument n: True is not an integer"),
    ((X, Y, 4096, "2"), {}, r"argument a: '2' is not a number"),
    ((X, None, 4096, 2.0), {}, r"argument y: None is not an array"),
])
def test_wrong_arguments_are_refused_by_the_checked_path(gpu, checked, args, kwargs, message):
    scale[4](X, Y, 4096, 2.0)
    with pytest.raises(lk.KernelArgumentError, match=message):
        scale[4](*args, **kwargs)
    assert len(gpu.calls) == 1 and checked == ["scale", "scale"]


def test_a_missing_trailing_constexpr_is_refused_by_the_checked_path(gpu, checked):
    scale_by[4](X, Y, 4096, 2.0, 4)
    scale_by[4](X, Y, 4096, 2.0, 4)
    with pytest.raises(lk.KernelArgumentError, match=r"kernel scale_by: missing argument\(s\) VALUES"):
        scale_by[4](X, Y, 4096, 2.0)
    assert len(gpu.calls) == 2 and checked == ["scale_by", "scale_by"]


def test_an_int_for_a_float_launches_through_the_checked_path(gpu, checked):
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 2)
    assert gpu.calls[0].spec is gpu.calls[1].spec and gpu.calls[1].packed == packed(X, Y, 4096, 2.0)
    assert checked == ["scale", "scale"]


def test_an_explicit_stream_or_a_list_grid_launches_through_the_checked_path(gpu, checked):
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 2.0, stream=0x77)
    scale[[4]](X, Y, 4096, 2.0)
    scale[[4]](X, Y, 4096, 2.0)
    assert [c.stream for c in gpu.calls] == [STREAM, 0x77, STREAM, STREAM]
    assert {c.grid for c in gpu.calls} == {(4, 1, 1)} and len(checked) == 4
    assert len({c.packed for c in gpu.calls}) == 1


def test_stream_none_given_by_name_is_torchs_current_stream_on_the_fast_path(gpu, checked):
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 2.0, stream=None)
    scale[4](X, Y, n=4096, a=2.0, stream=None)
    assert checked == ["scale"] and [c.stream for c in gpu.calls] == [STREAM] * 3
    assert {c.packed for c in gpu.calls} == {packed(X, Y, 4096, 2.0)}


def test_layoutkit_debug_is_read_at_every_launch(gpu, checked, monkeypatch):
    """A value of LAYOUTKIT_DEBUG not seen before is parsed by the checked path, then known."""
    monkeypatch.delitem(settings._DEBUG_BY_RAW, os.environ.encodevalue("off"), raising=False)
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "0")
    scale[4](X, Y, 4096, 2.0)
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "1")
    scale[4](X, Y, 4096, 2.0)
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "off")
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 2.0)
    release, debug, again, fast = (c.spec for c in gpu.calls)
    assert release.key[-1].debug is False and debug.key[-1].debug is True and again is release is fast
    assert checked == ["scale", "scale", "scale"]
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "maybe")
    with pytest.raises(SettingsError, match="LAYOUTKIT_DEBUG='maybe'"):
        scale[4](X, Y, 4096, 2.0)


class KeyRecorder(dict):
    """Stands for a fast path's remembered launchers: records each key looked up and answers with
    a launcher that records its arguments."""

    def __init__(self):
        super().__init__()
        self.keys, self.launched = [], []

    def get(self, key, default=None):
        self.keys.append(key)
        return lambda *values: self.launched.append(values)


@pytest.mark.parametrize("debug", ["0", "1"])
def test_the_fast_key_is_the_checked_key(gpu, monkeypatch, debug):
    monkeypatch.setenv("LAYOUTKIT_DEBUG", debug)
    scale_by[4](X, Y, 4096, 2.0, 4)                  # builds the fast path; binds the fake torch
    recorder = KeyRecorder()
    scale_by._fast.namespace["_lk_launchers"] = recorder
    for grid in (4, (4, 2), (1, 1, 3)):
        for x in (X, Tensor(BASE + 4), Tensor(BASE + 16)):
            for n in (1, 2, 8, 16, 17, 24, 0, -16, 2 ** 31 - 1, -2 ** 31):
                for values in ((4,), (2,), ("4",), ((1, 2),), (None,)):
                    scale_by[grid](x, Y, n, 2.0, *values)
                    key = scale_by.key(x, Y, n, 2.0, *values)
                    assert recorder.keys[-1] == key[:-1] + (debug == "1", grid)
                    assert recorder.launched[-1] == (x, Y, n, 2.0, x.ptr, Y.ptr)


def test_no_fast_path_for_parameters_named_like_its_own_names(gpu, checked):
    @lk.kernel(num_warps=1)
    def odd(_lk_x: lk.Pointer[lk.f32], n: lk.i32):
        pass
    assert FastLaunch("odd", odd.params, None, None).make is None
    assert "def launch(x=_lk_NO, y=_lk_NO, n=_lk_NO, a=_lk_NO, /," in fast_launch_source(scale.params, debug=True)
    assert "_lk_flags" not in fast_launch_source(scale.params, debug=True)


@pytest.mark.parametrize("grid", [4.0, True, (4.0,), (True, 1), [4]])
def test_a_grid_equal_to_a_plain_one_but_of_another_type_takes_the_checked_path(gpu, checked, grid):
    """4.0 == 4 and True == 1 as dict keys: such a grid must not find the launcher of the int one."""
    scale[4](X, Y, 4096, 2.0)
    scale[1](X, Y, 4096, 2.0)
    if isinstance(grid, list) or True in (grid if isinstance(grid, tuple) else (grid,)):
        scale[grid](X, Y, 4096, 2.0)                   # what launch() accepts, it launches
        assert checked == ["scale"] * 3
    else:
        with pytest.raises(LaunchConfigError, match="give an int or a tuple of 1 to 3 ints"):
            scale[grid](X, Y, 4096, 2.0)
        assert len(gpu.calls) == 2


def test_a_replaced_os_environ_is_read_through_the_checked_path(gpu, checked, monkeypatch):
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 2.0)
    monkeypatch.setattr(os, "environ", {"LAYOUTKIT_DEBUG": "1"})   # a plain mapping: no _data
    scale[4](X, Y, 4096, 2.0)
    assert checked == ["scale", "scale"] and gpu.calls[-1].spec.key[-1].debug is True


def test_launches_between_the_fast_ones_never_leave_stale_parameters(gpu, checked):
    """The configured launcher keeps its last packed values; checked launches of the same
    specialization (another buffer), a refused value and a failed pack must not make a later
    fast launch send anything but its own arguments."""
    X2, Y2 = Tensor(BASE + 0x40000), Tensor(BASE + 0x50000)
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 5)                        # an int for a: the checked path's buffer
    scale[4](X, Y, 4096, 2.0)                      # fast, the launcher's memo: nothing repacked
    with pytest.raises(LaunchArgumentError, match="overflows .f32"):
        scale[4](X2, Y2, 4096, 1e39)               # pack_into fails after writing x and y
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, 4096, 2.0, stream=STREAM)       # an explicit stream: launch(), own buffer
    scale[4](X2, Y2, 4095, 2.0)                    # another specialization ('+'), then back
    scale[4](X, Y, 4096, 2.0)
    assert [c.packed for c in gpu.calls] == [packed(X, Y, 4096, 2.0), packed(X, Y, 4096, 5.0),
                                             packed(X, Y, 4096, 2.0), packed(X, Y, 4096, 2.0),
                                             packed(X, Y, 4096, 2.0), packed(X2, Y2, 4095, 2.0),
                                             packed(X, Y, 4096, 2.0)]
    assert len({id(c.spec) for c in gpu.calls}) == 2


def test_many_grids_each_launch_with_their_own_shape_and_values(gpu, checked):
    grids = list(range(1, 20)) + [(2, 3), (3, 2)]   # more than a specialization keeps launchers
    for rounds in range(2):
        for g in grids:
            n = 128 * (g if isinstance(g, int) else g[0] * g[1])
            scale[g](X, Y, n + rounds, 2.0)
            dims = (g, 1, 1) if isinstance(g, int) else (*g, 1)
            assert gpu.calls[-1].grid == dims and gpu.calls[-1].packed == packed(X, Y, n + rounds, 2.0)


@lk.kernel(num_warps=1)
def nothing():
    """No parameters: only the grid and the keywords can be wrong."""


@lk.kernel(num_warps=1)
def flagged(x: lk.Pointer[lk.f32], n: lk.i32, V: lk.constexpr):
    """A constexpr of any type: 1, True and 1.0 are equal as keys but name three kernels."""


def test_a_bad_keyword_is_refused_even_for_a_kernel_without_parameters(monkeypatch):
    gpu = FakeGPU(monkeypatch, [nothing])
    try:
        nothing[1]()
        nothing[1]()
        with pytest.raises(lk.KernelArgumentError, match="kernel nothing has no parameter 'bogus'"):
            nothing[1](bogus=3)
        assert len(gpu.calls) == 2
    finally:
        gpu.reset()


def test_constexprs_of_equal_value_and_other_type_are_other_specializations(monkeypatch):
    gpu = FakeGPU(monkeypatch, [flagged])
    try:
        for value in (1, True, 1.0, 1, True, 1.0):
            flagged[1](X, 16, value)
        specs = [c.spec for c in gpu.calls]
        assert specs[:3] == specs[3:] and len({id(s) for s in specs}) == 3
        assert [s.key[2] for s in specs[:3]] == [("int", 1), ("bool", True), ("float", 1.0)]
    finally:
        gpu.reset()


@pytest.mark.parametrize("grid, dims", [(True, (1, 1, 1)), ((True, 2), (1, 2, 1)), ([4], (4, 1, 1))])
def test_grids_launch_accepts_but_the_fast_path_does_not_keep_one_launcher(gpu, checked, grid, dims):
    scale[4](X, Y, 4096, 2.0)
    scale[grid](X, Y, 4096, 2.0)
    scale[grid](X, Y, 4096, 2.0)
    assert [c.grid for c in gpu.calls] == [(4, 1, 1), dims, dims] and checked == ["scale"] * 3
    assert gpu.calls[1].spec._launchers[dims] is gpu.calls[2].spec._launchers[dims]


def test_the_launch_function_is_kept_per_plain_grid(gpu, checked):
    assert scale[4] is scale[4] and scale[(4, 2)] is scale[(4, 2)] and scale[4] is not scale[(4,)]
    assert scale[4.0] is not scale[4] and scale[True] is not scale[1] and scale[[4]] is not scale[[4]]


@lk.kernel(num_warps=1)
def scale_stream(x: lk.Pointer[lk.f32], stream: lk.i32, a: lk.f32):
    """`scale` over `stream` elements: a parameter named like the launch's stream keyword."""
    tv = lk.tv_layout(Layout(32), Layout(4))
    X = lk.global_tensor(x, Layout(stream)).tile((128,), (lk.block_id(0),)).partition(tv)
    lk.store(X, lk.load(X) * a)


def test_a_parameter_named_stream_is_positional_on_the_fast_path(monkeypatch):
    gpu = FakeGPU(monkeypatch, [scale_stream])
    try:
        scale_stream[4](X, 4096, 2.0)
        scale_stream[4](X, 4096, 2.0)
        assert len(gpu.calls) == 2 and gpu.calls[0].spec is gpu.calls[1].spec
        assert gpu.calls[1].packed == struct.pack("<Qif", X.ptr, 4096, 2.0)
    finally:
        gpu.reset()


@pytest.mark.parametrize("args, kwargs, message", [
    ((X,), {"y": Y, "n": 4096}, r"kernel scale: missing argument\(s\) a"),
    ((), {"x": X, "y": Y, "n": 4096, "a": 2.0, "z": 1}, r"kernel scale has no parameter 'z'"),
    ((X, Y), {"n": 4096, "a": "2"}, r"argument a: '2' is not a number"),
    ((X, Y), {"n": 4096, "a": 2.0, "x": X}, r"kernel scale: argument 'x' given twice"),
])
def test_keyword_calls_after_a_fast_launch_are_worded_by_the_checked_path(gpu, checked, args,
                                                                           kwargs, message):
    scale[4](X, Y, 4096, 2.0)
    scale[4](X, Y, n=4096, a=2.0)
    with pytest.raises(lk.KernelArgumentError, match=message):
        scale[4](*args, **kwargs)
    assert len(gpu.calls) == 2 and checked == ["scale", "scale"]
