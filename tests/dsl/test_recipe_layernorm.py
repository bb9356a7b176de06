"""recipes/layernorm.py on the CPU: its PTX assembles for sm_90a with no spills, 16-byte
accesses, the work split by row length, masked two-pass statistics, and bad arguments
refused by name."""
import re
import warnings

import pytest

import layoutkit as lk
from layoutkit.ptx import assemble
from tests.dsl.test_recipe_transpose import FakeTensor
from tests.dsl.test_recipes_compile import load_recipe

layernorm = load_recipe("layernorm")
PTR = lk.Pointer[lk.bf16]


def test_default_specializations_assemble_without_spills():
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # a register spill is a warning: fail on it
        for name, ptx in layernorm.compile_default().items():
            assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx, name
            assert "rsqrt.approx.f32" in ptx and "shfl.sync.bfly.b32" in ptx, name
            assemble(ptx)


@pytest.mark.parametrize("n, warps, rows, barriers", [
    (1, 4, 4, 0), (100, 4, 4, 0), (1024, 4, 4, 0), (1025, 2, 1, 2), (4096, 4, 1, 2),
    (8191, 8, 1, 2), (16384, 16, 1, 2), (32768, 32, 1, 2)])
def test_work_split_by_row_length(n, warps, rows, barriers):
    kernel, tile_rows, constexprs = layernorm._launch_plan(n)
    assert (kernel.num_warps, tile_rows) == (warps, rows)
    ptx = kernel.ptx(PTR, PTR, PTR, PTR, 10, n, 1e-5, **constexprs)
    assert ptx.count("bar.sync 0;") == barriers     # rows over several warps: smem + barriers
    usage = assemble(ptx).resources[kernel.name]
    assert usage.spill_store_bytes == 0
    if n % 16 == 0:     # 16-byte accesses: <= 64 registers, >= 1024 resident threads per SM
        assert usage.registers <= 64


def test_centered_values_past_n_are_zeroed_with_the_load_predicates():
    kernel, _, constexprs = layernorm._launch_plan(4096)
    ptx = kernel.ptx(PTR, PTR, PTR, PTR, 10, 4096, 1e-5, **constexprs)
    selects = re.findall(r"selp\.f32 %f\d+, %f\d+, 0f00000000, %p\d+;", ptx)
    assert len(selects) == 32                       # every value of the thread's row part
    assert ptx.count("div.rn.f32") == 1             # 1/n once; the rest are multiplies


@pytest.mark.parametrize("n", [0, 32769, 1.5, True])
def test_config_rejects_rows_it_cannot_hold(n):
    with pytest.raises(ValueError, match=r"the row length n = .* must be an int in 1..32768"):
        layernorm.config(n)


def vec(n, **kwargs):
    return FakeTensor((n,), **kwargs)


@pytest.mark.parametrize("args, error, message", [
    ((None, vec(8), vec(8), 1e-5), TypeError, r"x must be a torch tensor, got NoneType"),
    ((FakeTensor((2, 8), "torch.float32"), vec(8), vec(8), 1e-5), TypeError,
     r"x has dtype torch.float32; it must be torch.bfloat16"),
    ((FakeTensor((2, 8)), vec(8, dtype="torch.float16"), vec(8), 1e-5), TypeError,
     r"weight has dtype torch.float16"),
    ((FakeTensor((2, 8), cuda=False), vec(8), vec(8), 1e-5), ValueError,
     r"x must be a contiguous CUDA tensor, got one on cpu"),
    ((FakeTensor((2, 8)), vec(8), vec(8, contiguous=False), 1e-5), ValueError,
     r"bias must be a contiguous CUDA tensor"),
    ((FakeTensor((2, 40000)), vec(40000), vec(40000), 1e-5), ValueError,
     r"x has shape \(2, 40000\); its last dimension n must be in 1..32768"),
    ((FakeTensor((2, 8)), vec(7), vec(8), 1e-5), ValueError,
     r"weight has shape \(7,\) on cuda:0; it must be a vector of n = 8 on cuda:0"),
    ((FakeTensor((2, 8)), vec(8), vec(8), 0.0), ValueError, r"eps = 0.0 must be a positive"),
    ((FakeTensor((2, 8)), vec(8), vec(8), "1e-5"), ValueError, r"eps = '1e-5' must be"),
])
def test_bad_arguments_are_refused_by_name(args, error, message):
    with pytest.raises(error, match=message):
        layernorm.check_arguments(*args)


def test_good_arguments_give_rows_and_row_length():
    assert layernorm.check_arguments(FakeTensor((3, 5, 8)), vec(8), vec(8), 1e-5) == (15, 8)
