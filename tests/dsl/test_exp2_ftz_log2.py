"""lk.exp2(x, ftz=True), lk.log2(x) and lk.tanh(x): the PTX instruction, the interpreter's
numerics (the SFU's flush of subnormal exp2 inputs and results, lg2's -inf at 0 and NaN below,
tanh rounded from the exact value) and the argument errors."""
import math

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import interpret


def _unary(fn):
    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32]):
        X = lk.global_tensor(x, Layout(32)).partition(lk.tv_layout(Layout(32), Layout(1)))
        lk.store(X, fn(lk.load(X)))
    return k


def _run(kernel, values):
    x = np.zeros(32, np.float32)
    x[:len(values)] = values
    interpret(kernel, 1, x)
    return x[:len(values)]


def test_exp2_ftz_flushes_subnormal_inputs_and_results():
    k = _unary(lambda v: lk.exp2(v, ftz=True))
    assert "ex2.approx.ftz.f32" in k.ptx(lk.Pointer[lk.f32])
    got = _run(k, [0.0, 3.0, -127.0, -126.0, -1e-40, float("-inf")])
    assert got.tolist() == [1.0, 8.0, 0.0, 2.0 ** -126, 1.0, 0.0]
    plain = _unary(lk.exp2)
    assert "ex2.approx.f32" in plain.ptx(lk.Pointer[lk.f32])
    assert _run(plain, [-127.0])[0] == 2.0 ** -127


def test_log2_matches_lg2():
    k = _unary(lk.log2)
    assert "lg2.approx.f32" in k.ptx(lk.Pointer[lk.f32])
    got = _run(k, [1.0, 8.0, 0.5, 0.0, -1.0])
    assert got[:3].tolist() == [0.0, 3.0, -1.0] and got[3] == -np.inf and np.isnan(got[4])


def test_exp2_ftz_must_be_a_bool():
    with pytest.raises(lk.TraceError, match=r"lk.exp2: ftz is True or False, got 1"):
        _unary(lambda v: lk.exp2(v, ftz=1)).ptx(lk.Pointer[lk.f32])


def test_tanh_is_the_sfu_approximation():
    k = _unary(lk.tanh)
    assert "tanh.approx.f32" in k.ptx(lk.Pointer[lk.f32])
    xs = [0.0, 0.5, -1.0, 3.0, -20.0, float("inf"), float("-inf")]
    got = _run(k, xs)
    assert got.tolist() == [float(np.float32(math.tanh(x))) for x in xs]     # rounded once


def test_tanh_is_f32_only():
    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f16]):
        X = lk.global_tensor(x, Layout(32)).partition(lk.tv_layout(Layout(32), Layout(1)))
        lk.store(X, lk.tanh(lk.load(X)))
    with pytest.raises(lk.TraceError, match=r"tanh on f16: PTX has it for f32 only"):
        k.ptx(lk.Pointer[lk.f16])
