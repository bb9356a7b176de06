"""GPU tests (marker `gpu`) of the sm_80 matrix path: one mma.sync fed by cp.async + ldmatrix
against torch (exact on small integers), cp.async of ragged tiles, and recipes/mma_gemm.py on
random shapes - tiny, ragged in M, N and K, unaligned K, both B layouts, every config -
against torch in float64. No kernel here waits on anything but bar.sync and cp.async groups,
so none can hang."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from layoutkit.tools.recipe_runner import load_recipe  # noqa: E402
from tests.dsl.mma_kernels import one_mma, ragged_copy  # noqa: E402

pytestmark = pytest.mark.gpu
recipe = load_recipe("recipes/mma_gemm.py")
TOLERANCE = 2 ** -7          # bf16 output rounding (2**-9 relative) plus f32 accumulation


def small_ints(*shape, gen):
    return torch.randint(-4, 5, shape, device="cuda", generator=gen).to(torch.bfloat16)


@pytest.mark.parametrize("kmajor", [False, True])
def test_one_mma_is_exact(kmajor):
    gen = torch.Generator(device="cuda").manual_seed(7)
    a, b = small_ints(16, 16, gen=gen), small_ints(16, 8, gen=gen)
    c = torch.full((16, 8), float("nan"), device="cuda")
    one_mma[1](a, b.t().contiguous() if kmajor else b, c, kmajor)
    torch.cuda.synchronize()
    assert torch.equal(c, a.float() @ b.float())


@pytest.mark.parametrize("m, n", [(16, 16), (5, 16), (16, 3), (20, 32), (3, 21)])
def test_cp_async_copies_ragged_tiles(m, n):
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ragged_copy[1](x, y, m, n)
    torch.cuda.synchronize()
    rows, cols = min(m, 16), min(n, 16)
    assert torch.equal(y[:rows, :cols], x[:rows, :cols])
    assert torch.isnan(y[rows:]).all() and torch.isnan(y[:, cols:]).all()


SHAPES = [(1, 1, 1), (1, 8, 16), (2, 3, 5), (7, 5, 3), (16, 8, 16), (33, 17, 9), (64, 64, 64),
          (100, 130, 70), (128, 128, 32), (129, 257, 31), (127, 129, 33), (256, 384, 512),
          (300, 200, 1000), (1000, 1000, 96), (77, 4096, 48), (512, 24, 4000), (3, 1000, 2048),
          (640, 512, 129)]


@pytest.mark.parametrize("config", list(recipe.CONFIGS))
@pytest.mark.parametrize("kmajor", [False, True])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_gemm_matches_torch_float64(m, n, k, kmajor, config):
    gen = torch.Generator(device="cuda").manual_seed(m * 1_000_003 + n * 1009 + k)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
    if kmajor:
        b = b.t().contiguous().t()
    guard = torch.full((m * n + 64,), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = guard[:m * n].view(m, n)
    recipe.gemm(a, b, out, config=config)
    torch.cuda.synchronize()
    want = a.double() @ b.double()
    err = (out.double() - want).abs().max().item() / (want.abs().max().item() or 1.0)
    assert err < TOLERANCE, f"relative error {err:.3g}"
    assert torch.isnan(guard[m * n:]).all()                   # nothing written past the end


def test_gemm_of_empty_and_k_zero():
    a = torch.randn(5, 0, device="cuda").to(torch.bfloat16)
    b = torch.randn(0, 7, device="cuda").to(torch.bfloat16)
    assert torch.equal(recipe.gemm(a, b), torch.zeros(5, 7, device="cuda", dtype=torch.bfloat16))
    assert recipe.gemm(torch.empty(0, 4, device="cuda", dtype=torch.bfloat16),
                       torch.empty(4, 3, device="cuda", dtype=torch.bfloat16)).shape == (0, 3)


def test_gemm_rejects_bad_inputs():
    a = torch.randn(4, 8, device="cuda").to(torch.bfloat16)
    with pytest.raises(ValueError, match="the inner extents differ"):
        recipe.gemm(a, torch.randn(7, 4, device="cuda").to(torch.bfloat16))
    with pytest.raises(ValueError, match="2-D CUDA bfloat16"):
        recipe.gemm(a.float(), a.t())
    with pytest.raises(ValueError, match="must be contiguous"):
        recipe.gemm(torch.randn(8, 4, device="cuda").to(torch.bfloat16).t(), a.t())


def test_recipe_check_runs():
    assert recipe.check(seed=1) < TOLERANCE
