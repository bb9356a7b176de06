"""GPU tests (marker `gpu`) of recipes/layernorm_backward.py: random rows offset far from zero,
weights and upstream gradients of ragged shapes from 1 x 1 to rows of 131072 (a warp, a CTA, a
cluster per row; several persistent rounds), bf16 and f32, statistics recomputed and given,
against float64 and torch's autograd of F.layer_norm in float64; dweight and dbias
bit-identical across runs."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from recipes import _rowwise as rw  # noqa: E402
from recipes import layernorm_backward as lb  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(1, 1), (3, 7), (1, 1000), (37, 1000), (5, 3000), (1, 4096), (300, 4096),
          (2, 8191), (9, 16385), (3, 32768), (1, 65537), (2, 65537), (2, 131072)]
F = torch.nn.functional


def error(got, want) -> float:
    return rw.relative_to_max(got.double().cpu().numpy(), want.double().cpu().numpy())


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m, n", SHAPES)
def test_matches_float64_and_autograd(m, n, dtype, given):
    gen = torch.Generator(device="cuda").manual_seed(m * 131 + n)
    offset = torch.randn(m, 1, device="cuda", generator=gen) * 8
    x = (torch.randn(m, n, device="cuda", generator=gen) * 2 + offset).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    w, b = (torch.randn(n, device="cuda", generator=gen).to(dtype) for _ in range(2))
    stats = ()
    if given:
        xf = x.double()
        stats = (xf.mean(-1).float(), torch.rsqrt(xf.var(-1, unbiased=False) + 1e-5).float())
    dx, dw, db = lb.layernorm_backward(dy, x, w, *stats)
    assert dx.dtype == dtype and dw.dtype == db.dtype == w.dtype
    tol = rw.tolerance(rw.DTYPES[str(dtype)])
    want = lb.reference(*(t.double().cpu().numpy() for t in (dy, x, w)))
    for got, expect in zip((dx, dw, db), want):
        assert error(got, torch.from_numpy(expect)) <= tol
    xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
    auto = torch.autograd.grad(F.layer_norm(xr, (n,), wr, br, 1e-5), (xr, wr, br), dy.double())
    for got, expect in zip((dx, dw, db), auto):
        assert error(got, expect) <= tol


def test_gradients_are_deterministic():
    x, dy = (torch.randn(20000, 1000, device="cuda").bfloat16() for _ in range(2))
    w = torch.randn(1000, device="cuda").bfloat16()
    first = lb.layernorm_backward(dy, x, w)
    for _ in range(3):
        again = lb.layernorm_backward(dy, x, w)
        assert all(torch.equal(a, b) for a, b in zip(again, first))


def test_f32_weight_with_bf16_rows_and_batched_input():
    x = torch.randn(4, 16, 3000, device="cuda").bfloat16()
    dy = torch.randn_like(x)
    w = torch.randn(3000, device="cuda")
    dx, dw, db = lb.layernorm_backward(dy, x, w)
    assert dx.shape == x.shape and dw.dtype == torch.float32
    want = lb.reference(*(t.double().cpu().numpy() for t in (dy.view(64, 3000),
                                                             x.view(64, 3000), w)))
    assert error(dx.view(64, 3000), torch.from_numpy(want[0])) <= 2 ** -7
    assert error(db, torch.from_numpy(want[2])) <= 2 ** -16


def test_recipe_check_runs():
    assert lb.check(shapes=((3, 7), (64, 1000), (2, 65537)), seed=1) <= 2 ** -7


@pytest.mark.parametrize("m, n", [(1000, 3000), (3, 131072)])
def test_planned_calls_on_fresh_and_misaligned_tensors(m, n):
    """After a shape's first call (its plan), calls on other tensors (the plan's configured
    launchers) and on 8-byte-aligned views (kernel[grid]: another specialization) match
    float64."""
    w = torch.randn(n, device="cuda").bfloat16()
    for offset in (0, 0, 0, 4, 0):
        buffers = [torch.empty(m * n + 8, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        x, dy = (b[offset:offset + m * n].view(m, n) for b in buffers)
        x.copy_(torch.randn(m, n, device="cuda") * 2 + 3)
        dy.copy_(torch.randn(m, n, device="cuda"))
        got = lb.layernorm_backward(dy, x, w)
        want = lb.reference(*(t.double().cpu().numpy() for t in (dy, x, w)))
        for g, expect in zip(got, want):
            assert error(g, torch.from_numpy(expect)) <= 2 ** -7
