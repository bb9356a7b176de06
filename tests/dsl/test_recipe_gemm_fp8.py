"""recipes/gemm_fp8.py on the CPU: both default specializations assemble for sm_90a with no
spills, the SASS main loop is QGMMA ... E4M3 with no local memory, the scales are read once per
distinct element, the configs fit, and the kernel computes D = scale_a * scale_b * (A @ B) on
the interpreter (ragged M, N, K; per-row and per-tensor scales; bf16 and f32 out)."""
import re
import warnings

import pytest

import layoutkit as lk
from layoutkit.ptx import assemble, disassemble

from .test_recipes_compile import load_recipe

gemm_fp8 = load_recipe("gemm_fp8")


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills and ignored setmaxnreg are warnings
        return {name: (ptx, assemble(ptx)) for name, ptx in gemm_fp8.compile_default().items()}


def test_both_specializations_assemble_without_spills(compiled):
    assert sorted(compiled) == ["gemm_fp8_e4m3_bf16_rowwise_128x256x128_s4_c2",
                                "gemm_fp8_e4m3_f32_tensorwise_128x256x128_s4_c2"]
    for name, (_, cubin) in compiled.items():
        usage = cubin.resources["gemm_fp8"]
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert usage.stack_frame_bytes == 0 and not usage.setmaxnreg_ignored, name


def test_sass_main_loop_is_fp8_qgmma_without_local_memory(compiled):
    for name, (_, cubin) in compiled.items():
        sass = disassemble(cubin)
        # 2 consumer warpgroups x 2 promoted 128-column parts x 4 k32 instructions per
        # 128-element k-step
        assert len(re.findall(r"QGMMA\.64x128x32\.F32\.E4M3\.E4M3", sass)) == 16, name
        assert not re.search(r"\bHGMMA\b", sass), name
        assert not re.search(r"\b(LDL|STL)\b", sass), name
        assert sass.count("MEMBAR.ALL.GPU") <= 5, name


def test_scales_are_read_once_per_distinct_element(compiled):
    ptx, _ = compiled["gemm_fp8_e4m3_bf16_rowwise_128x256x128_s4_c2"]
    loads = [x.split()[1] for x in ptx.splitlines() if "ld.global" in x]
    # per consumer (2) and 128-column chunk (BN 256: 2): its thread's 2 rows of scale_a, and
    # scale_b's 32 columns of the chunk in 16 pairs
    assert loads.count("ld.global.f32") == 2 * 2 * 2
    assert loads.count("ld.global.v2.f32") == 2 * 2 * 16
    ptx, _ = compiled["gemm_fp8_e4m3_f32_tensorwise_128x256x128_s4_c2"]
    # f32 out: 64-column chunks, 4 per consumer; one load of each per-tensor scale per chunk
    assert sum("ld.global" in x for x in ptx.splitlines()) == 2 * 4 * 2


def test_per_tensor_scales_are_loaded_before_the_main_loop(compiled):
    """Per-tensor scales (PerTensorScales) are loaded before each consumer's first wgmma, where
    the main loop hides their latency; per-row ones after its last wait_group 0 (the
    epilogue)."""
    for name, before in (("gemm_fp8_e4m3_f32_tensorwise_128x256x128_s4_c2", True),
                         ("gemm_fp8_e4m3_bf16_rowwise_128x256x128_s4_c2", False)):
        ptx, _ = compiled[name]
        consumers = ptx.split("setmaxnreg.inc.sync.aligned.u32")[1:]
        assert len(consumers) == 2, name
        for body in consumers:
            lines = body.splitlines()
            loads = [i for i, x in enumerate(lines) if "ld.global" in x]
            mma = [i for i, x in enumerate(lines) if "wgmma.mma_async" in x]
            drained = [i for i, x in enumerate(lines) if "wgmma.wait_group.sync.aligned 0" in x]
            assert loads and mma, name
            if before:
                assert max(loads) < min(mma), name
            else:
                assert min(loads) > max(drained), name


def test_pipeline_pieces_are_in_the_ptx(compiled):
    for name, (ptx, _) in compiled.items():
        assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3") == 16, name
        assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx, name
        assert "mbarrier.arrive.expect_tx" in ptx, name
        assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx, name     # TMA store
        assert ".multicast::cluster" in ptx, name


def test_configs_fit_in_shared_memory():
    for config in gemm_fp8.CONFIGS + gemm_fp8.FAST_ACCUM_CONFIGS:
        for c in (lk.bf16, lk.f32):
            assert config.smem_bytes(c) <= 232448 - 1024, (config, c)


def test_the_kernel_on_the_interpreter():
    assert gemm_fp8.check_cpu() < 2 ** -7


def test_promotion_bounds_the_error_of_the_narrow_accumulator_on_the_interpreter():
    """K = 1024 of positive products (the sum grows with every k-step): all of K in the
    modelled 14-bit fp8 accumulator (PROMOTE = 0) loses more than 2**-11 of max |D|; adding
    it into the f32 accumulator every k-step (PROMOTE = 1) keeps a fraction of that."""
    import numpy as np
    errors = {}
    for promote in (0, 1):
        cfg = gemm_fp8.Config(BN=64, STAGES=2, CLUSTER=1, PROMOTE=promote)
        errors[promote] = gemm_fp8.cpu_error(
            (64, 64, 1024), (lk.e4m3, lk.e4m3, lk.f32), "tensorwise", 1, cfg,
            rng=np.random.default_rng(5), tolerance=1.0, seeds=(0,), positive=True)
    assert errors[0] > 2 ** -11 and errors[1] < errors[0] / 4, errors


@pytest.mark.parametrize("config, message", [
    (gemm_fp8.Config(BN=256, STAGES=3, PROMOTE=4), r"gemm_fp8: config.PROMOTE = 4 with "
     r"STAGES = 3 and BN = 256; a BN over 128 is promoted in parts of 128 columns that each "
     r"read the group's PROMOTE stages, so PROMOTE <= STAGES \(the ring would never free"),
    (gemm_fp8.Config(BN=128, PROMOTE=-1), r"gemm_fp8: config.PROMOTE = -1; it is an int >= 0"),
    (gemm_fp8.Config(BN=128, PROMOTE=2.0), r"config.PROMOTE = 2.0; it is an int >= 0"),
    (gemm_fp8.Config(BN=128, PROMOTE=True), r"config.PROMOTE = True; it is an int >= 0"),
])
def test_promotion_config_errors(config, message):
    with pytest.raises(ValueError, match=message):
        gemm_fp8.check_promotion("gemm_fp8", config)


def test_promotion_defaults():
    from recipes._gemm_kernel import Config as TileConfig
    assert gemm_fp8.promotion(TileConfig(BN=128)) == gemm_fp8.PROMOTE == 2
    assert gemm_fp8.CONFIGS[0].PROMOTE == 2 and gemm_fp8.CONFIGS[0].BN == 256
    assert all(c.PROMOTE > 0 for c in gemm_fp8.CONFIGS)            # the autotuning space
    assert all(c.PROMOTE == 0 for c in gemm_fp8.FAST_ACCUM_CONFIGS)
    for ok in (gemm_fp8.Config(BN=256, PROMOTE=0), gemm_fp8.Config(BN=256, STAGES=4, PROMOTE=4),
               gemm_fp8.Config(BN=128, STAGES=2, PROMOTE=8)):      # one part: any PROMOTE
        gemm_fp8.check_promotion("gemm_fp8", ok)                    # no error
