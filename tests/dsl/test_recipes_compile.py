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
            load = "cp.async.cg.shared.global" if "staged" in ptx else "ld.global.v4.b32"
            assert load in ptx and "st.global.v4.b32" in ptx, name
            assert "ex2.approx.ftz.f32" in ptx and "shfl.sync.bfly.b32" in ptx, name
            assemble(ptx)


@pytest.mark.parametrize("m, n, threads, rows, vector, cluster, barriers", [
    (4096, 1, 64, 8, 1, 1, 0), (4096, 100, 64, 8, 4, 1, 0), (4096, 1000, 128, 8, 8, 1, 0),
    (1000, 3000, 128, 2, 8, 1, 2), (4096, 4096, 128, 2, 8, 1, 2), (4096, 8191, 256, 1, 1, 1, 2),
    (4096, 16384, 256, 1, 8, 1, 2), (4096, 32768, 256, 1, 8, 2, 2),
    (7, 131072, 256, 1, 8, 8, 2)])
def test_softmax_splits_rows_by_shape(m, n, threads, rows, vector, cluster, barriers):
    cfg = softmax.config(m, n)
    assert (cfg.threads, cfg.rows, cfg.vector, cfg.cluster) == (threads, rows, vector, cluster)
    ptx = softmax.ptx_for(cfg, m, n)
    staged = softmax.staged(cfg)                    # + the staged tile's barrier
    assert ptx.count("bar.sync 0;") == barriers + staged   # rows over warps: smem + barriers
    # the partials' exchange: peers started (relaxed, after the loads), then each CTA's max
    # and sum stored into every other CTA (st.async), completing on its mbarrier
    assert ptx.count("barrier.cluster.arrive.relaxed") == (cluster > 1)
    assert ptx.count("barrier.cluster.arrive.release") == 0
    assert ptx.count("st.async.shared::cluster") == 2 * (cluster - 1)
    if vector == 8:
        load = "cp.async.cg.shared.global" if staged else "ld.global.v4.b32"
        assert load in ptx and "st.global.v4.b32" in ptx
    usage = assemble(ptx).resources[softmax.kernel_for(cfg).name]
    assert usage.spill_store_bytes == 0


def test_softmax_rejects_rows_it_cannot_hold():
    with pytest.raises(ValueError, match=r"softmax: the row length n = 131073 must be in "
                                         r"1..131072 \(8 CTAs of 16384 columns\)"):
        softmax.config(4, 131073)
