"""recipes/gemm_hopper.py on the CPU: both B layouts assemble for sm_90a with no spills, the
SASS main loop is HGMMA with no local memory, and the pipeline's pieces are all there."""
import re
import warnings

import pytest

from layoutkit.ptx import assemble, disassemble

from .test_recipes_compile import load_recipe

gemm_hopper = load_recipe("gemm_hopper")


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills and ignored setmaxnreg are warnings
        return {name: (ptx, assemble(ptx)) for name, ptx in gemm_hopper.compile_default().items()}


def test_both_b_layouts_assemble_without_spills(compiled):
    assert sorted(name.split("_")[1] for name in compiled) == ["Kmajor", "Nmajor"]
    for name, (_, cubin) in compiled.items():
        usage = cubin.resources["gemm_body"]
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert usage.stack_frame_bytes == 0 and not usage.setmaxnreg_ignored, name


def test_sass_main_loop_is_hgmma_without_local_memory(compiled):
    for name, (_, cubin) in compiled.items():
        sass = disassemble(cubin)
        assert len(re.findall(r"HGMMA\.64x256x16\.F32\.BF16", sass)) == 8, name   # 2 WGs x 4 k16
        assert not re.search(r"\b(LDL|STL)\b", sass), name
        # one cluster-wide fence at start (cluster_sync) and one per consumer warpgroup role
        # at the end (the 'finished' arrives): none in the main loop, where a cluster-scoped
        # release per k-step halved the GEMM's speed on the H200
        assert sass.count("MEMBAR.ALL.GPU") <= 5, name
        transposed = "tnspB" in sass
        assert transposed == ("Nmajor" in name), name      # N-major B is the MN-major operand


def test_pipeline_pieces_are_in_the_ptx(compiled):
    for name, (ptx, _) in compiled.items():
        assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx, name
        assert ptx.count("setmaxnreg.inc.sync.aligned.u32 232") == 2, name
        assert "cp.async.bulk.tensor.2d.shared::cluster.global" in ptx, name
        assert "mbarrier.arrive.expect_tx" in ptx and "mbarrier.try_wait.parity" in ptx, name
        assert "wgmma.wait_group.sync.aligned 1" in ptx, name
        assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx, name     # TMA store
        assert "fence.proxy.async.shared::cta" in ptx, name
        assert ".reqnctapercluster 2, 1, 1" in ptx and ".multicast::cluster" in ptx, name
        assert "mapa.shared::cluster" in ptx, name          # consumers release both CTAs' stage


def test_configs_fit_in_shared_memory():
    for config in gemm_hopper.CONFIGS:
        assert config.smem_bytes() <= 232448 - 1024, config
