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


@pytest.mark.parametrize("m, n, threads, rows, cluster, barriers", [
    (4096, 1, 64, 8, 1, 0), (4096, 100, 64, 8, 1, 0), (4096, 1024, 128, 8, 1, 0),
    (1000, 3000, 128, 2, 1, 2), (4096, 4096, 128, 2, 1, 2), (4096, 8191, 256, 1, 1, 2),
    (4096, 16384, 256, 1, 1, 2), (4096, 16392, 256, 1, 2, 2), (4096, 32768, 256, 1, 2, 2),
    (3, 131071, 512, 1, 8, 2)])                     # n % 8 != 0: twice the threads a row
def test_work_split_by_shape(m, n, threads, rows, cluster, barriers):
    cfg = layernorm.config(m, n)
    assert (cfg.threads, cfg.rows, cfg.cluster) == (threads, rows, cluster)
    ptx = layernorm.ptx_for(cfg, m, n)
    assert ptx.count("bar.sync 0;") == barriers     # rows over several warps: smem + barriers
    # the statistics' exchange: peers started (relaxed, after the loads), then each CTA's 3
    # partials stored into every other CTA (st.async), completing on its mbarrier
    assert ptx.count("barrier.cluster.arrive.relaxed") == (cluster > 1)
    assert ptx.count("barrier.cluster.arrive.release") == 0
    assert ptx.count("st.async.shared::cluster") == 3 * (cluster - 1)
    usage = assemble(ptx).resources[layernorm.kernel_for(cfg).name]
    assert not usage.spills                         # ragged n in 16k-32k spilled 28 bytes


def test_centered_values_past_n_are_zeroed_with_the_load_predicates():
    cfg = layernorm.config(4096, 4096)
    ptx = layernorm.ptx_for(cfg, 4096, 4096)
    selects = re.findall(r"selp\.f32 %f\d+, %f\d+, 0f00000000, %p\d+;", ptx)
    assert len(selects) == cfg.values               # every value of the thread's row part
    assert ptx.count("div.rn.f32") == 1             # 1/n once; the rest are multiplies


@pytest.mark.parametrize("m, n, message", [
    (4, 0, r"n = 0 must be a positive int"), (4, 131073, r"n = 131073 must be in 1..131072"),
    (4, 1.5, r"n = 1.5 must be a positive int"), (4, True, r"n = True must be a positive int"),
    (0, 8, r"m = 0 must be a positive int")])
def test_config_rejects_rows_it_cannot_hold(m, n, message):
    with pytest.raises(ValueError, match=r"layernorm: (the row length )?" + message):
        layernorm.config(m, n)


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
    ((FakeTensor((2, 140000)), vec(140000), vec(140000), 1e-5), ValueError,
     r"x has shape \(2, 140000\); its last dimension n must be in 1..131072"),
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
