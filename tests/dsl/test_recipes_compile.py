"""Every recipe's PTX assembles for sm_90a (no GPU needed)."""
import importlib.util
import pathlib
import sys
import warnings

import pytest

from layoutkit.ptx import assemble

RECIPES = pathlib.Path(__file__).resolve().parents[2] / "recipes"


def load_recipe(name: str):
    spec = importlib.util.spec_from_file_location(f"recipes_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


softmax = load_recipe("softmax")


def test_softmax_default_specializations_assemble_without_spills():
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # a register spill is a warning: fail on it
        for name, ptx in softmax.compile_default().items():
            assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx, name
            assert "ex2.approx.f32" in ptx and "shfl.sync.bfly.b32" in ptx, name
            assemble(ptx)


@pytest.mark.parametrize("n, warps, barriers", [(1, 4, 0), (100, 4, 0), (1000, 4, 0),
                                                (1025, 2, 2), (2049, 4, 2), (8191, 8, 2),
                                                (16384, 16, 2), (32768, 32, 2)])
def test_softmax_splits_rows_by_length(n, warps, barriers):
    kernel, grid, constexprs = softmax._arguments(10, n)
    assert kernel.num_warps == warps
    import layoutkit as lk
    ptr = lk.Pointer[lk.bf16]
    ptx = kernel.ptx(ptr, ptr, 10, n, **constexprs)
    assert ptx.count("bar.sync 0;") == barriers     # rows over several warps: smem + barriers
    usage = assemble(ptx).resources[kernel.name]
    assert usage.spill_store_bytes == 0
    if n % 16 == 0:     # 16-byte accesses: <= 64 registers, >= 1024 resident threads per SM
        assert usage.registers <= 64
    if n > softmax.ROW_PER_WARP_MAX:
        assert constexprs["C"] * constexprs["K"] == softmax.VALUES_PER_LANE


def test_softmax_rejects_rows_it_cannot_hold():
    with pytest.raises(ValueError, match=r"n = 32769 must be an int in 1..32768"):
        softmax.config(32769)
