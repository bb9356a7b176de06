"""GPU tests (marker `gpu`) of recipes/gemm_fp8.py: random fp8 problems, ragged and M = 1
included, e4m3 x e4m3 and e4m3 x e5m2, per-tensor and per-row/per-column scales, bf16 and f32
out, every config, against float64 of the dequantized inputs (error relative to max |D|); the
output is poisoned with NaN first so an unwritten element fails. The fp8 tensor cores add with
fewer bits than f32: the kernel promotes its sums to an f32 register accumulator every
PROMOTE k-steps, and a test bounds its error at deep K by torch._scaled_mm's default
(cuBLASLt's promoted accumulation); the PROMOTE = 0 config's by use_fast_accum=True's. Run with
LAYOUTKIT_DEBUG=1 to turn a pipeline hang into layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

import layoutkit as lk  # noqa: E402
from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

gemm_fp8 = load_recipe("gemm_fp8")
pytestmark = pytest.mark.gpu
SHAPES = [(1, 1, 1), (1, 16, 16), (1, 4096, 4096), (7, 13, 5), (64, 64, 64), (128, 256, 128),
          (129, 257, 65), (200, 136, 72), (333, 1000, 129), (1000, 520, 264),
          (256, 1024, 4096), (2048, 2048, 512), (16, 14336, 4096)]
TOLERANCE = 2 ** -7          # bf16 output rounding plus the fp8 accumulation, relative to max|D|


def _problem(m, n, k, b_type, rowwise, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=gen).to(b_type).t()     # column-major
    shape_a, shape_b = ((m, 1), (1, n)) if rowwise else ((), ())
    sa = torch.rand(shape_a, device="cuda", generator=gen) + 0.5
    sb = torch.rand(shape_b, device="cuda", generator=gen) + 0.5
    return a, b, sa, sb


def _error(got, want) -> float:
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


COMBINATIONS = [(rowwise, b_type, out_dtype) for rowwise in (False, True)
                for b_type in (torch.float8_e4m3fn, torch.float8_e5m2)
                for out_dtype in (torch.bfloat16, torch.float32)]


def _name(combination) -> str:
    rowwise, b_type, out_dtype = combination
    return (f"{'rowwise' if rowwise else 'tensorwise'}-"
            f"{'e5m2' if b_type == torch.float8_e5m2 else 'e4m3'}-{str(out_dtype)[6:]}")


def _matches_float64(m, n, k, rowwise, b_type, out_dtype):
    a, b, sa, sb = _problem(m, n, k, b_type, rowwise, m * 1_000_003 + n * 1009 + k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    got = gemm_fp8.gemm_fp8(a, b, sa, sb, out=out)
    torch.cuda.synchronize()
    assert not got.isnan().any(), "an output element was not written"
    err = _error(got, gemm_fp8.reference(a, b, sa, sb))
    assert err < TOLERANCE, f"error {err:.3g} relative to max |D|"


# each shape with one combination of scales, B type and output (a new specialization costs
# seconds of tracing and ptxas), every combination on one ragged shape
@pytest.mark.parametrize("i, shape", list(enumerate(SHAPES)), ids=[str(s) for s in SHAPES])
def test_gemm_fp8_matches_float64(i, shape):
    _matches_float64(*shape, *COMBINATIONS[i % len(COMBINATIONS)])


@pytest.mark.parametrize("combination", COMBINATIONS, ids=[_name(c) for c in COMBINATIONS])
def test_every_combination_on_a_ragged_shape(combination):
    _matches_float64(333, 1000, 129, *combination)


SMALL_M = [gemm_fp8.Config(BM=64, BN=128, STAGES=8, CLUSTER=1, SPLIT_K=4),
           gemm_fp8.Config(BM=64, BN=256, STAGES=5, CLUSTER=1, SPLIT_K=2),
           gemm_fp8.Config(BM=128, BN=64, STAGES=8, CLUSTER=1, SPLIT_K=3),
           gemm_fp8.Config(BM=64, BN=64, STAGES=8, CLUSTER=1),
           # the swapped kernel (decode): weights on the wgmma's M side, any M in token tiles
           gemm_fp8.Config(BM=64, BN=8, STAGES=16, CLUSTER=1, SWAP=True),
           gemm_fp8.Config(BM=128, BN=40, STAGES=9, CLUSTER=1, SWAP=True, PROMOTE=1),
           gemm_fp8.Config(BM=64, BN=16, STAGES=12, CLUSTER=1, SWAP=True, SPLIT_K=2)]


@pytest.mark.parametrize("config", SMALL_M, ids=str)
@pytest.mark.parametrize("m, n, k", [(1, 1000, 1500), (37, 520, 4096), (130, 264, 700)])
def test_small_m_tiles_and_split_k_match_float64(config, m, n, k):
    """The 64-row kernel and split-K (partials, then the reduction applying the scales) on
    ragged shapes, both scale forms and outputs, the output poisoned with NaN first."""
    for rowwise, out_dtype in ((True, torch.bfloat16), (False, torch.float32)):
        a, b, sa, sb = _problem(m, n, k, torch.float8_e4m3fn, rowwise, m + n + k)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
        got = gemm_fp8.gemm_fp8(a, b, sa, sb, out=out, config=config)
        torch.cuda.synchronize()
        assert not got.isnan().any(), "an output element was not written"
        err = _error(got, gemm_fp8.reference(a, b, sa, sb))
        assert err < TOLERANCE, f"{config} {m}x{n}x{k}: error {err:.3g} relative to max |D|"


def test_scales_default_to_one():
    a, b, sa, _ = _problem(200, 136, 72, torch.float8_e4m3fn, True, 9)
    assert _error(gemm_fp8.gemm_fp8(a, b), gemm_fp8.reference(a, b)) < TOLERANCE
    assert _error(gemm_fp8.gemm_fp8(a, b, sa), gemm_fp8.reference(a, b, sa)) < TOLERANCE


@pytest.mark.parametrize("config", gemm_fp8.CONFIGS + gemm_fp8.FAST_ACCUM_CONFIGS, ids=str)
def test_every_config_is_correct(config):
    a, b, sa, sb = _problem(700, 900, 600, torch.float8_e4m3fn, True, 7)
    got = gemm_fp8.gemm_fp8(a, b, sa, sb, config=config)
    err = _error(got, gemm_fp8.reference(a, b, sa, sb))
    assert err < TOLERANCE, f"{config}: error {err:.3g}"


def _errors(m, n, k, rowwise, fast_accum, config=None):
    """(our error, cuBLASLt's error) against float64, f32 out; pytest.skip where
    torch._scaled_mm refuses the case."""
    a, b, sa, sb = _problem(m, n, k, torch.float8_e4m3fn, rowwise, 11)
    want = gemm_fp8.reference(a, b, sa, sb)
    try:
        theirs = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32,
                                  use_fast_accum=fast_accum)
    except RuntimeError as exc:
        pytest.skip(f"torch._scaled_mm refuses this case: {str(exc).splitlines()[0]}")
    ours = gemm_fp8.gemm_fp8(a, b, sa, sb, out_dtype=torch.float32, config=config)
    return _error(ours, want), _error(theirs, want)


DEEP = [(128, 256, 128), (1024, 1024, 4096), (4096, 4096, 4096), (16, 4096, 14336),
        (8192, 8192, 8192)]


@pytest.mark.parametrize("m, n, k", DEEP)
@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
def test_as_accurate_as_cublaslt_default_at_deep_k(m, n, k, rowwise):
    """The promoted accumulation (PROMOTE k-steps in the fp8 wgmma accumulator, then f32):
    the error scale of cuBLASLt's default (use_fast_accum=False), at K up to 14336. H200,
    2026-12-01: PROMOTE 4 was 2.8-3.8x cuBLASLt's error, 2 1.7x, 1 equal, 0 20-50x."""
    mine, cublaslt = _errors(m, n, k, rowwise, False)
    assert mine <= 2.5 * cublaslt + 2 ** -16, f"error {mine:.3g} vs cuBLASLt {cublaslt:.3g}"


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (16, 4096, 14336), (64, 14336, 4096)])
@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
def test_swapped_kernel_as_accurate_as_cublaslt_default(m, n, k, rowwise):
    """The swapped kernel's promotion (each of its accumulators PROMOTE k-steps in the fp8
    accumulator, then into the f32 total) keeps cuBLASLt's default error scale at decode."""
    cfg = gemm_fp8.Config(BM=64, BN=-(-m // 8) * 8, STAGES=12, CLUSTER=1, SWAP=True)
    mine, cublaslt = _errors(m, n, k, rowwise, False, cfg)
    assert mine <= 2.5 * cublaslt + 2 ** -16, f"error {mine:.3g} vs cuBLASLt {cublaslt:.3g}"


@pytest.mark.parametrize("m, n, k", [(1024, 1024, 4096), (4096, 4096, 4096)])
@pytest.mark.parametrize("config", gemm_fp8.FAST_ACCUM_CONFIGS, ids=str)
def test_unpromoted_config_as_accurate_as_cublaslt_fast_accumulation(m, n, k, config):
    """PROMOTE = 0 (all of K in the fp8 accumulator): cuBLASLt's use_fast_accum=True scale
    (H200, 2026-12-01: equal to three digits at 4096^3 and 8192^3; at 16 x 4096 x 14336
    cuBLASLt's small-M kernel has 2.9x less error, shorter accumulation chains: not a
    contract of the unpromoted configs)."""
    mine, cublaslt = _errors(m, n, k, False, True, config)
    assert mine <= 2 * cublaslt + 2 ** -16, f"error {mine:.3g} vs cuBLASLt {cublaslt:.3g}"


@pytest.mark.parametrize("debug", ["0", "1"], ids=["release", "debug"])
@pytest.mark.parametrize("config", gemm_fp8.CONFIGS + gemm_fp8.FAST_ACCUM_CONFIGS, ids=str)
def test_every_config_writes_every_element_and_no_input(config, debug, monkeypatch):
    """4096^3, per-tensor scales, bf16 out, as bench_gemm_fp8 runs it (its H200 run of
    2026-12-01 saw NaN outputs for some 128 x 128 configs here, and inputs changed at 8192^3,
    not seen by the debug-build tests), in a release build too (LAYOUTKIT_DEBUG=0 whatever the
    run's setting: no barrier timeouts, the launch fast path): a NaN-poisoned out is fully
    written, then a fresh out (torch.empty, as the benchmark's), then the poisoned one again
    (a remembered launch); A, B and the scales are unchanged."""
    monkeypatch.setenv("LAYOUTKIT_DEBUG", debug)
    _writes_every_element_and_no_input(4096, config)


@pytest.mark.parametrize("config", [gemm_fp8.CONFIGS[0], gemm_fp8.FAST_ACCUM_CONFIGS[0]], ids=str)
def test_8192_cubed_writes_every_element_and_no_input_in_a_release_build(config, monkeypatch):
    """The benchmark's 8192^3 per-tensor case (every row NaN on 2026-12-01), release build."""
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "0")
    _writes_every_element_and_no_input(8192, config)


def _writes_every_element_and_no_input(m, config):
    a, b, sa, sb = _problem(m, m, m, torch.float8_e4m3fn, False, 13)
    before = [x.view(torch.uint8).clone() if x.dtype != torch.float32 else x.clone()
              for x in (a, b.t(), sa, sb)]
    want = gemm_fp8.reference(a, b, sa, sb)
    poisoned = torch.empty((m, m), device="cuda", dtype=torch.bfloat16)
    for fresh in (False, True, False):
        out = None if fresh else poisoned.fill_(float("nan"))
        got = gemm_fp8.gemm_fp8(a, b, sa, sb, out=out, config=config)
        torch.cuda.synchronize()
        assert not got.isnan().any(), f"{int(got.isnan().sum())} elements NaN"
        # an unpromoted config accumulates all of K in the wgmma's narrower accumulator: its
        # error at deep K is cuBLASLt fast-accum's (test_unpromoted_config_as_accurate_...)
        assert _error(got, want) < (TOLERANCE if config.PROMOTE else 4 * TOLERANCE)
    after = [x.view(torch.uint8) if x.dtype != torch.float32 else x for x in (a, b.t(), sa, sb)]
    assert all(torch.equal(x, y) for x, y in zip(before, after)), "an input was written"


def test_unaligned_and_row_major_operands_are_copied_not_misread():
    a, b, sa, sb = _problem(100, 99, 77, torch.float8_e4m3fn, True, 3)   # rows of 77 bytes
    b_row_major = b.contiguous()                                          # N contiguous
    got = gemm_fp8.gemm_fp8(a, b_row_major, sa, sb)
    assert _error(got, gemm_fp8.reference(a, b, sa, sb)) < TOLERANCE


def test_out_given_as_a_strided_view():
    a, b, sa, sb = _problem(130, 200, 256, torch.float8_e4m3fn, False, 5)
    big = torch.full((130, 300), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = gemm_fp8.gemm_fp8(a, b, sa, sb, out=big[:, 50:250])
    assert got.data_ptr() == big[:, 50:250].data_ptr()
    assert big[:, :50].isnan().all() and big[:, 250:].isnan().all()
    assert _error(got, gemm_fp8.reference(a, b, sa, sb)) < TOLERANCE


@pytest.mark.parametrize("config", gemm_fp8.CONFIGS, ids=str)
def test_resident_units_fit_the_device(config):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    types = (lk.e4m3, lk.e4m3, lk.bf16)
    units = gemm_fp8._resident_units(torch.device("cuda", 0), config, types)
    assert 1 <= units * config.CLUSTER <= sms
