"""GPU tests (marker `gpu`) of recipes/gemm_hopper.py: random bf16 problems, ragged and tiny
ones included, B N-major and K-major, every config, against torch in float64; the output is
poisoned with NaN first so an unwritten element fails. Run with LAYOUTKIT_DEBUG=1 to turn a
pipeline hang into layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

gemm_hopper = load_recipe("gemm_hopper")
pytestmark = pytest.mark.gpu
SHAPES = [(1, 1, 1), (1, 8, 8), (7, 13, 5), (64, 64, 64), (128, 256, 64), (129, 257, 65),
          (200, 136, 72), (333, 1000, 129), (1000, 520, 264), (256, 1024, 4096),
          (2048, 2048, 512)]


def _problem(m, n, k, kmajor, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
    return a, (b.t().contiguous().t() if kmajor else b)


@pytest.mark.parametrize("kmajor", [False, True], ids=["B_N_major", "B_K_major"])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_gemm_matches_float64(m, n, k, kmajor):
    a, b = _problem(m, n, k, kmajor, m * 1_000_003 + n * 1009 + k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = gemm_hopper.gemm(a, b, out=out)
    torch.cuda.synchronize()
    want = a.double() @ b.double()
    assert not got.isnan().any(), "an output element was not written"
    err = ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert err < 1e-2, f"relative error {err:.3g}"


@pytest.mark.parametrize("config", gemm_hopper.CONFIGS, ids=str)
def test_every_config_is_correct(config):
    a, b = _problem(700, 900, 600, False, 7)
    got = gemm_hopper.gemm(a, b, config=config)
    want = a.double() @ b.double()
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < 1e-2, f"{config}: relative error {err:.3g}"


def test_unaligned_strides_are_copied_not_misread():
    a, b = _problem(100, 99, 77, False, 3)            # K = 77, N = 99: rows not 16-byte multiples
    got = gemm_hopper.gemm(a, b)
    err = ((got.double() - a.double() @ b.double()).norm() /
           (a.double() @ b.double()).norm()).item()
    assert err < 1e-2


@pytest.mark.parametrize("config", gemm_hopper.CONFIGS, ids=str)
def test_resident_units_fit_the_device(config):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    units = gemm_hopper._resident_units(torch.device("cuda", 0), config, "N")
    assert 1 <= units * config.CLUSTER <= sms


TORCH_ACTIVATIONS = {
    None: lambda x: x,
    "relu": torch.relu,
    "silu": torch.nn.functional.silu,
    "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
}


@pytest.mark.parametrize("bias_dtype, activation", [(torch.bfloat16, "gelu"),
                                                    (torch.float32, "relu"), (None, "silu"),
                                                    (torch.bfloat16, None)])
@pytest.mark.parametrize("m, n, k", [(333, 257, 129), (1, 4096, 4096), (2048, 2048, 512)])
def test_fused_bias_and_activation_match_float64(m, n, k, bias_dtype, activation):
    a, b = _problem(m, n, k, True, m + n + k)
    bias = None if bias_dtype is None else \
        torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(n)
                    ).to(bias_dtype)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = gemm_hopper.gemm(a, b, out=out, bias=bias, activation=activation)
    x = a.double() @ b.double() + (0 if bias is None else bias.double())
    want = TORCH_ACTIVATIONS[activation](x)
    assert not got.isnan().any(), "an output element was not written"
    err = ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    assert err < 2 ** -7, f"error {err:.3g} relative to max |C|"


@pytest.mark.parametrize("activation", ["gelu", "silu"])
@pytest.mark.parametrize("m, n, k", [(333, 257, 129), (2048, 2048, 512)])
def test_gelu_error_is_within_its_documented_bound(m, n, k, activation):
    """gelu is torch's tanh form and silu x/2 (1 + tanh(x/2)), both through tanh.approx.f32
    (recipes/_epilogues.py): per element, |D - act(x)| <= |x| 2^-12 (the SFU's 2^-10.987 on
    tanh, halved) and a few f32 roundings. A @ B and the bias are multiples of 1/16 below 2^12 (exact in f32), so x
    is exact and all the error is the epilogue's; f32 out, so no bf16 rounding hides it."""
    gen = torch.Generator(device="cuda").manual_seed(m)
    a = (torch.randint(-2, 3, (m, k), device="cuda", generator=gen) / 4).to(torch.bfloat16)
    b = (torch.randint(-2, 3, (n, k), device="cuda", generator=gen) / 4).to(torch.bfloat16).t()
    bias = (torch.randint(-160, 161, (n,), device="cuda", generator=gen) / 16).to(torch.bfloat16)
    got = gemm_hopper.gemm(a, b, bias=bias, activation=activation, out_dtype=torch.float32)
    x = a.double() @ b.double() + bias.double()
    want = TORCH_ACTIVATIONS[activation](x)
    assert x.min() < -6 and x.max() > 6          # the tail where 1 + tanh cancels, and beyond
    bound = x.abs() * (2 ** -11.98 + 2 ** -20) + 2 ** -24
    excess = ((got.double() - want).abs() - bound).max().item()
    assert excess <= 0, f"error exceeds |x| 2^-12 by {excess:.3g}"
