"""recipes/layernorm_backward.py on the CPU: every work split assembles for sm_90a with no spills
within the register file (statistics recomputed and given), the interpreter matches float64
numpy on small ragged shapes of every split (rows offset far from 0; several persistent rounds;
the column sums of dweight and dbias), the float64 reference is the gradient of layer norm, and
bad arguments are refused by name."""
import warnings

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.ptx import assemble
from recipes import _rowwise as rw
from recipes import layernorm_backward as lb
from tests.dsl.test_recipe_transpose import FakeTensor

F32 = lk.Pointer[lk.f32]
DT = {2: lk.bf16, 4: lk.f32}


def test_default_specializations_assemble_without_spills():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, ptx in lb.compile_default().items():
            assert "ld.global.v4.b32" in ptx and "st.shared.v4.f32" in ptx, name
            assert ("rsqrt.approx.f32" in ptx) != name.endswith("stats"), name
            assemble(ptx)


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("n", [100, 1000, 4096, 5000, 8191, 12288, 16384, 32768, 65537, 131072])
@pytest.mark.parametrize("stats", [True, False])
def test_splits_fit_the_register_file_without_spills(n, itemsize, stats):
    s = lb.split_for(n, itemsize)
    kernel = lb.kernel_for(DT[itemsize], DT[itemsize], s)
    ptr = lk.Pointer[DT[itemsize]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = kernel.specialize(ptr, ptr, ptr, F32, F32, ptr, F32, 4096, n // s.VEC, 1e-5,
                                 4, 132, **lb.constexprs(s, stats))
        usage = assemble(spec.ptx).resources[kernel.name]
    assert usage.spill_store_bytes == 0
    assert usage.registers * 32 * s.num_warps <= 65536
    assert spec.ir.shared_bytes < 227 * 1024
    if s.P <= lb.CTA_THREADS:                       # rows share 512-thread CTAs: two an SM
        assert 32 * s.num_warps == lb.CTA_THREADS
        assert 2 * -(-usage.registers // 8) * 8 * lb.CTA_THREADS <= 65536
        assert 2 * spec.ir.shared_bytes < 227 * 1024


@pytest.mark.parametrize("dtype, m, n, s, ctas, stats", lb.cpu_cases())
def test_matches_float64_on_the_interpreter(dtype, m, n, s, ctas, stats):
    rng = np.random.default_rng(m * n)
    assert lb.cpu_case(rng, dtype, m, n, s, ctas, stats) <= rw.tolerance(dtype)


def test_the_reference_is_the_gradient_of_layer_norm():
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((3, 11)) + 5, rng.standard_normal(11), rng.standard_normal(11)
    dy = rng.standard_normal((3, 11))

    def loss(x, w, b):
        mean, rstd = lb.statistics(x)
        return (((x - mean[:, None]) * rstd[:, None] * w + b) * dy).sum()
    dx, dw, db = lb.reference(dy, x, w)
    eps = 1e-6
    for (i, j) in ((0, 0), (2, 7)):
        bump = np.zeros_like(x)
        bump[i, j] = eps
        assert abs((loss(x + bump, w, b) - loss(x - bump, w, b)) / (2 * eps) - dx[i, j]) < 1e-6
    e = np.eye(11)[4] * eps
    assert abs((loss(x, w + e, b) - loss(x, w - e, b)) / (2 * eps) - dw[4]) < 1e-6
    assert abs((loss(x, w, b + e) - loss(x, w, b - e)) / (2 * eps) - db[4]) < 1e-6


def vec(n, **kwargs):
    return FakeTensor((n,), **kwargs)


STATS = FakeTensor((2,), "torch.float32")


@pytest.mark.parametrize("args, error, message", [
    ((FakeTensor((2, 8)), FakeTensor((2, 8)), None, None, None, 1e-5), TypeError,
     r"layernorm_backward: weight must be a torch tensor, got NoneType"),
    ((FakeTensor((2, 8)), FakeTensor((2, 8)), vec(8), STATS, None, 1e-5), ValueError,
     r"layernorm_backward: give both mean and rstd .* or neither .*, got mean=FakeTensor, "
     r"rstd=NoneType"),
    ((FakeTensor((2, 8)), FakeTensor((2, 8)), vec(8), vec(3, dtype="torch.float32"), STATS,
      1e-5), ValueError, r"layernorm_backward: mean has shape \(3,\); it must be \(2,\)"),
    ((FakeTensor((2, 8)), FakeTensor((2, 8)), vec(8), None, None, -1.0), ValueError,
     r"layernorm_backward: eps = -1.0 must be a positive number"),
    ((FakeTensor((2, 8)), FakeTensor((2, 8), "torch.float32"), vec(8), None, None, 1e-5),
     TypeError, r"layernorm_backward: dy has dtype torch.bfloat16; it must be one of "
     r"torch.float32"),
])
def test_bad_arguments_are_refused_by_name(args, error, message):
    with pytest.raises(error, match=message):
        lb.check_arguments(*args)
