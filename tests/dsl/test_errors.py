"""Every user mistake is a specific error naming the rule and the user's source line."""
import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout

from .kernels import F32, axpb

from . import source_lines

THIS_FILE = __file__


def line_of(text: str) -> int:
    return source_lines.line_of(THIS_FILE, text)


@lk.kernel(num_warps=4)
def mismatched(x: lk.Pointer[lk.f32], n: lk.i32):
    rows = lk.tv_layout(Layout(128), Layout(4))
    cols = lk.TVLayout((512,), Layout((128, 4), (1, 128)))      # values 128 apart
    a = lk.load(lk.global_tensor(x, Layout(n)).tile((512,), (0,)).partition(rows))
    b = lk.load(lk.global_tensor(x, Layout(n)).tile((512,), (0,)).partition(cols))
    lk.store(lk.global_tensor(x, Layout(n)).tile((512,), (0,)).partition(rows), a + b)  # MISMATCH


def test_layout_mismatch_shows_both_layouts_and_the_user_line():
    with pytest.raises(lk.LayoutMismatchError) as info:
        mismatched.ptx(F32, 4096)
    message = str(info.value)
    assert "(128,4):(4,1) over tile (512,)" in message
    assert "(128,4):(1,128) over tile (512,)" in message
    assert f"test_errors.py:{line_of('# MISMATCH')}" in message
    assert "a + b" in message                          # the source text of that line
    assert info.value.location.line == line_of("# MISMATCH")


@lk.kernel(num_warps=4)
def mixed_types(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.bf16], n: lk.i32):
    tv = lk.tv_layout(Layout(128), Layout(4))
    a = lk.load(lk.global_tensor(x, Layout(n)).tile((512,), (0,)).partition(tv))
    b = lk.load(lk.global_tensor(y, Layout(n)).tile((512,), (0,)).partition(tv))
    a * b  # DTYPES


def test_no_implicit_dtype_conversion():
    with pytest.raises(lk.TraceError, match=r"operand types differ \(f32 and bf16\)") as info:
        mixed_types.ptx(F32, lk.Pointer[lk.bf16], 4096)
    assert info.value.location.line == line_of("# DTYPES")


@lk.kernel(num_warps=4)
def store_wrong_layout(x: lk.Pointer[lk.f32], n: lk.i32):
    tv = lk.tv_layout(Layout(128), Layout(4))
    other = lk.tv_layout(Layout(128), Layout(2))
    v = lk.full(other, 1.0)
    lk.store(lk.global_tensor(x, Layout(n)).tile((512,), (0,)).partition(tv), v)  # STORE


def test_store_layout_mismatch():
    with pytest.raises(lk.LayoutMismatchError, match=r"register tensor: \(128,2\)") as info:
        store_wrong_layout.ptx(F32, 4096)
    assert info.value.location.line == line_of("# STORE")


@lk.kernel(num_warps=2)
def wrong_thread_count(x: lk.Pointer[lk.f32], n: lk.i32):
    tv = lk.tv_layout(Layout(128), Layout(4))
    lk.global_tensor(x, Layout(n)).tile((512,), (0,)).partition(tv)  # THREADS


def test_tv_layout_must_cover_the_block():
    with pytest.raises(lk.TraceError, match="128 threads but the kernel runs 64") as info:
        wrong_thread_count.ptx(F32, 4096)
    assert info.value.location.line == line_of("# THREADS")


@lk.kernel(num_warps=4)
def runtime_truth(x: lk.Pointer[lk.f32], a: lk.f32):
    if a > 0.0:  # TRUTH
        pass


def test_runtime_value_in_python_if():
    with pytest.raises(lk.TraceError, match="no Python truth value") as info:
        runtime_truth.ptx(F32, 1.0)
    assert info.value.location.line == line_of("# TRUTH")


@lk.kernel(num_warps=4)
def float_with_int(x: lk.Pointer[lk.f32], n: lk.i32, a: lk.f32):
    a * n  # INTMIX


def test_integer_expression_needs_an_explicit_cast():
    with pytest.raises(lk.TraceError, match=r"lk.cast\(n, lk.f32\)") as info:
        float_with_int.ptx(F32, 100, 1.0)
    assert info.value.location.line == line_of("# INTMIX")


@lk.kernel(num_warps=1)
def forgot_next(x: lk.Pointer[lk.f32], n: lk.i32):
    acc = lk.full(lk.tv_layout(Layout(32), Layout(1)), 0.0)
    loop = lk.range(0, n, carry=(acc,))
    for i, (acc,) in loop:  # NEXT
        pass


def test_carried_loop_needs_next():
    with pytest.raises(lk.TraceError, match=r"must call loop.next"):
        forgot_next.ptx(F32, 100)


@lk.kernel(num_warps=4)
def bad_tile(x: lk.Pointer[lk.f32], n: lk.i32):
    lk.global_tensor(x, Layout(n)).tile((3, 3), (0, 0))  # BADTILE


def test_algebra_errors_carry_the_user_line():
    with pytest.raises(lk.TraceError) as info:
        bad_tile.ptx(F32, 4096)
    assert info.value.location is not None and info.value.location.line == line_of("# BADTILE")


def test_missing_annotation_points_at_the_def_line():
    with pytest.raises(lk.KernelDefinitionError, match="parameter n needs an annotation") as info:
        @lk.kernel
        def unannotated(x: lk.Pointer[lk.f32], n):  # UNANNOTATED
            pass
    assert info.value.location.line == line_of("# UNANNOTATED")


def test_bad_num_warps():
    with pytest.raises(lk.KernelDefinitionError, match=r"num_warps=0 must be an int in 1..32"):
        lk.kernel(num_warps=0)(lambda x: None)


@pytest.mark.parametrize("args, message", [
    ((F32, F32, 4.5, 1.0, 1.0), r"argument n: 4.5 is not an integer for n: i32"),
    ((F32, F32, 2 ** 31, 1.0, 1.0), r"argument n: 2147483648 does not fit i32"),
    ((F32, F32, 10, "a", 1.0), r"argument a: 'a' is not a number for a: f32"),
    ((np.zeros(8, np.float64), F32, 10, 1.0, 1.0), r"an array of f64 given for x: Pointer\[f32\]"),
    ((lk.Pointer[lk.bf16], F32, 10, 1.0, 1.0), r"Pointer\[bf16\] given for x: Pointer\[f32\]"),
    ((3, F32, 10, 1.0, 1.0), r"argument x: 3 is not an array"),
])
def test_wrong_argument_types(args, message):
    with pytest.raises(lk.KernelArgumentError, match=message) as info:
        axpb.ptx(*args, VALUES=4)
    assert info.value.location.file == THIS_FILE


def test_missing_and_unknown_arguments():
    with pytest.raises(lk.KernelArgumentError, match="missing argument.* VALUES"):
        axpb.ptx(F32, F32, 10, 1.0, 1.0)
    with pytest.raises(lk.KernelArgumentError, match="has no parameter 'WIDTH'"):
        axpb.ptx(F32, F32, 10, 1.0, 1.0, WIDTH=4)


def test_ops_outside_a_kernel():
    with pytest.raises(lk.TraceError, match="call it inside a @lk.kernel function"):
        lk.thread_id()
