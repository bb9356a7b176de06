"""recipes/softmax_backward.py on the CPU: every work split assembles for sm_90a with no
spills (16-byte accesses where n allows, the cluster barrier past 16k columns), the interpreter
matches float64 numpy on small ragged shapes of every split, and bad arguments are refused by
name."""
import warnings

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.ptx import assemble
from recipes import _rowwise as rw
from recipes import softmax_backward as sb
from tests.dsl.test_recipe_transpose import FakeTensor

F32 = lk.Pointer[lk.f32]
DT = {2: lk.bf16, 4: lk.f32}


def test_default_specializations_assemble_without_spills():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, ptx in sb.compile_default().items():
            assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx, name
            wide = int(name.split("=")[1]) > 16384
            assert ("barrier.cluster.arrive" in ptx) == wide, name
            assert ("st.async.shared::cluster" in ptx) == wide, name    # the DSMEM exchange
            assemble(ptx)


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("n", [1, 100, 1000, 3000, 4096, 8191, 16384, 32768, 65537, 131072])
def test_splits_fit_the_register_file_without_spills(n, itemsize):
    s = sb.split_for(n, itemsize)
    kernel = sb.kernel_for(DT[itemsize], s)
    ptr = lk.Pointer[DT[itemsize]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx = kernel.ptx(ptr, ptr, ptr, 4096, n // s.VEC, **s.constexprs())
        usage = assemble(ptx).resources[kernel.name]
    assert usage.spill_store_bytes == 0
    assert usage.registers * 32 * s.num_warps <= 65536
    assert s.C * s.K <= sb.VALUES and s.P <= sb.THREADS


@pytest.mark.parametrize("dtype, m, n, s", sb.cpu_cases())
def test_matches_float64_on_the_interpreter(dtype, m, n, s):
    assert sb.cpu_case(np.random.default_rng(m * n), dtype, m, n, s) <= rw.tolerance(dtype)


@pytest.mark.parametrize("args, error, message", [
    ((None, FakeTensor((2, 8))), TypeError, r"softmax_backward: dy must be a torch tensor"),
    ((FakeTensor((2, 8)), FakeTensor((2, 9))), ValueError,
     r"softmax_backward: dy has shape \(2, 8\); it must be \(2, 9\)"),
    ((FakeTensor((2, 8), "torch.float16"), FakeTensor((2, 8))), TypeError,
     r"softmax_backward: dy has dtype torch.float16; it must be one of torch.bfloat16"),
    ((FakeTensor((2, 8)), FakeTensor((2, 8), contiguous=False)), ValueError,
     r"softmax_backward: y must be a contiguous CUDA tensor"),
    ((FakeTensor((1, 131073)), FakeTensor((1, 131073))), ValueError,
     r"softmax_backward: the row length n = 131073 must be an int in 1..131072"),
])
def test_bad_arguments_are_refused_by_name(args, error, message):
    with pytest.raises(error, match=message):
        sb.check_arguments(*args)
