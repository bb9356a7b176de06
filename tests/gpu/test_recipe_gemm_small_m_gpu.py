"""GPU tests (marker `gpu`) of recipes/gemm_hopper.py's small-M path (64-row tiles, split-K
with its reduction, the per-shape heuristic) and its epilogue D = act(alpha * (A @ B) + beta * C
+ bias) + residual (bf16 or f32 out), against torch in float64 on random ragged shapes
including M = 1, N and K not multiples of the tile, both B majors; outputs are poisoned with
NaN first (beta = 0 never reads them) so an unwritten element fails."""
import dataclasses

import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

import layoutkit.torch  # noqa: E402,F401  (registers torch.ops.layoutkit.*)
from recipes import _gemm_choice  # noqa: E402
from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

gemm_hopper = load_recipe("gemm_hopper")
pytestmark = pytest.mark.gpu
MS = (1, 3, 16, 64, 65, 100, 128, 250)
NK = ((4096, 4096), (1000, 777), (136, 14336), (72, 100))
ACTS = {None: lambda x: x, "relu": torch.relu, "silu": torch.nn.functional.silu,
        "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def _problem(m, n, k, kmajor, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
    return a, (b.t().contiguous().t() if kmajor else b)


def _error(got, want) -> float:
    assert not got.isnan().any(), "an output element was not written"
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def _poisoned(m, n, dtype=torch.bfloat16):
    return torch.full((m, n), float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("kmajor", [False, True], ids=["B_N_major", "B_K_major"])
@pytest.mark.parametrize("n, k", NK)
@pytest.mark.parametrize("m", MS)
def test_small_m_matches_float64(m, n, k, kmajor):
    a, b = _problem(m, n, k, kmajor, m * 7919 + n * 31 + k)
    got = gemm_hopper.gemm(a, b, out=_poisoned(m, n))
    assert _error(got, a.double() @ b.double()) < 2 ** -7, gemm_hopper.config_for(m, n, k)


TILES = _gemm_choice.candidates(1)


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("tile", TILES, ids=str)
@pytest.mark.parametrize("m, n, k", [(1, 520, 4104), (300, 136, 2000)])
def test_every_tile_and_split_is_correct(m, n, k, tile, split):
    cfg = dataclasses.replace(tile, SPLIT_K=split) if tile.CLUSTER == 1 else tile
    for kmajor in (False, True):
        a, b = _problem(m, n, k, kmajor, split + tile.BN)
        got = gemm_hopper.gemm(a, b, out=_poisoned(m, n), config=cfg)
        assert _error(got, a.double() @ b.double()) < 2 ** -7, (cfg, kmajor)


SWAP_SHAPES = [(1, 4096, 4096), (3, 1000, 777), (16, 136, 14336), (40, 72, 100), (64, 520, 264),
               (100, 257, 129)]


@pytest.mark.parametrize("bm, parts", [(64, 1), (128, 1), (64, 2)])
@pytest.mark.parametrize("m, n, k", SWAP_SHAPES)
def test_swapped_kernel_matches_float64(m, n, k, bm, parts):
    """recipes/_gemm_swap_kernel.py: BM weight rows by the tokens rounded up to 8 (M = 100 with
    a 64-token tile: two token tiles), both B majors, ragged N and K; parts = 2: two consumer
    warpgroups share each tile's k-steps."""
    bn = min(64, -(-m // 8) * 8)
    cfg = gemm_hopper.Config(BM=bm, BN=bn, CLUSTER=1, SWAP=True, SPLIT_K=parts,
                             STAGES=_gemm_choice.max_swap_stages(bm, bn, parts))
    for kmajor in (False, True):
        a, b = _problem(m, n, k, kmajor, m + bm + n)
        got = gemm_hopper.gemm(a, b, out=_poisoned(m, n), config=cfg)
        assert _error(got, a.double() @ b.double()) < 2 ** -7, (cfg, kmajor)


EPILOGUES = [
    dict(bias=torch.float32, activation="gelu", residual=torch.bfloat16, alpha=0.5, beta=2.0,
         out=torch.float32),
    dict(bias=torch.bfloat16, activation="silu", residual=None, alpha=1.0, beta=0.0,
         out=torch.bfloat16),
    dict(bias=None, activation=None, residual=torch.float32, alpha=-3.0, beta=0.0,
         out=torch.float32),
    dict(bias=None, activation="relu", residual=None, alpha=1.0, beta=-1.0, out=torch.bfloat16),
]


@pytest.mark.parametrize("split", [None, 4, "swap"], ids=["heuristic", "split4", "swap"])
@pytest.mark.parametrize("spec", EPILOGUES, ids=lambda s: "-".join(
    f"{k}={v}".replace("torch.", "") for k, v in s.items() if v is not None))
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (333, 257, 129), (2048, 2048, 512)])
def test_epilogue_matches_float64(m, n, k, spec, split):
    gen = torch.Generator(device="cuda").manual_seed(m + n)
    a, b = _problem(m, n, k, True, k)

    def rand(*shape, dtype):
        return None if dtype is None else \
            torch.randn(*shape, device="cuda", generator=gen).to(dtype)
    bias, residual = rand(n, dtype=spec["bias"]), rand(m, n, dtype=spec["residual"])
    c = rand(m, n, dtype=spec["out"])
    out = c.clone() if spec["beta"] != 0 else _poisoned(m, n, spec["out"])
    config = None if split is None else \
        gemm_hopper.Config(BM=64, BN=-(-min(m, 64) // 8) * 8, STAGES=12, CLUSTER=1, SWAP=True) \
        if split == "swap" else \
        gemm_hopper.Config(BM=64, BN=128, STAGES=8, CLUSTER=1, SPLIT_K=split)
    got = gemm_hopper.gemm(a, b, out=out, config=config, bias=bias,
                           activation=spec["activation"], residual=residual,
                           alpha=spec["alpha"], beta=spec["beta"])
    x = spec["alpha"] * (a.double() @ b.double()) + spec["beta"] * c.double()
    x = ACTS[spec["activation"]](x + (0 if bias is None else bias.double()))
    want = x + (0 if residual is None else residual.double())
    assert got.dtype == spec["out"]
    assert _error(got, want) < 2 ** -7


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (200, 136, 72)])
def test_residual_in_place_and_strided_out(m, n, k):
    """D = A @ B + D with the residual being out itself; and beta * C read from an out whose
    columns are strided (the kernel writes a TMA-ready buffer, copied back)."""
    a, b = _problem(m, n, k, False, 5)
    d = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    want = a.double() @ b.double() + d.double()
    got = gemm_hopper.gemm(a, b, out=d, residual=d)
    assert got.data_ptr() == d.data_ptr() and _error(got, want) < 2 ** -7
    c = torch.randn(n, m, device="cuda").t()                 # f32, column stride m
    want = 2 * (a.double() @ b.double()) + 0.5 * c.double()
    got = gemm_hopper.gemm(a, b, out=c, alpha=2, beta=0.5)
    assert _error(got, want) < 2 ** -7


@pytest.mark.parametrize("m, n, k", [(300, 264, 136), (2048, 2048, 512)])
def test_staged_residual_that_tma_cannot_read(m, n, k):
    """The kernel TMAs a residual of out's type into shared memory (recipes/_gemm_kernel.py
    stage_chunk): a transposed residual and one 2 bytes off alignment are copied TMA-ready
    first; a planned call (same signature as an aligned one) with a misaligned residual takes
    the checked path, not a TMA of the misaligned address."""
    a, b = _problem(m, n, k, True, 3)
    x = a.double() @ b.double()
    transposed = torch.randn(n, m, device="cuda").to(torch.bfloat16).t()
    got = gemm_hopper.gemm(a, b, out=_poisoned(m, n), residual=transposed)
    assert _error(got, x + transposed.double()) < 2 ** -7
    flat = torch.randn(m * n + 1, device="cuda").to(torch.bfloat16)
    aligned, shifted = flat[:-1].view(m, n), flat[1:].view(m, n)
    for residual in (aligned, aligned, shifted):       # the second call runs its plan
        got = gemm_hopper.gemm(a, b, out=_poisoned(m, n), residual=residual)
        assert _error(got, x + residual.double()) < 2 ** -7


def test_torch_op_epilogue_and_gradients():
    m, n, k = 100, 72, 136
    a, b = _problem(m, n, k, True, 11)
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    residual = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    c = torch.randn(m, n, device="cuda", dtype=torch.float32)
    leaves = [x.clone().requires_grad_() for x in (a, b, bias, residual, c)]
    got = torch.ops.layoutkit.gemm(leaves[0], leaves[1], leaves[2], None, leaves[3], 0.5, 2.0,
                                   leaves[4], torch.float32)
    ref = [x.detach().double().requires_grad_() for x in (a, b, bias, residual, c)]
    want = 0.5 * (ref[0] @ ref[1]) + 2.0 * ref[4] + ref[2] + ref[3]
    assert got.dtype == torch.float32 and _error(got.detach(), want.detach()) < 2 ** -7
    grad = torch.randn(m, n, device="cuda")
    got.backward(grad)
    want.backward(grad.double())
    for name, x, y in zip(("a", "b", "bias", "residual", "c"), leaves, ref):
        assert x.grad.dtype == x.dtype, name
        assert _error(x.grad, y.grad) < 2 ** -6, name
