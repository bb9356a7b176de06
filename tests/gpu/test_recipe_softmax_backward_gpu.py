"""GPU tests (marker `gpu`) of recipes/softmax_backward.py: random softmax rows and upstream
gradients of ragged shapes from 1 x 1 to rows of 131072 (a warp, a CTA, a cluster per row),
bf16, fp16 and f32, against float64 and torch's autograd of torch.softmax in float64."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from recipes import _rowwise as rw  # noqa: E402
from recipes import softmax_backward as sb  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(1, 1), (3, 7), (1, 1000), (37, 1000), (5, 3000), (1, 4096), (300, 4096),
          (2, 8191), (9, 16385), (3, 32768), (1, 65537), (2, 65537), (2, 131072)]


def error(got, want) -> float:
    return rw.relative_to_max(got.double().cpu().numpy(), want.double().cpu().numpy())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m, n", SHAPES)
def test_matches_float64_and_autograd(m, n, dtype):
    gen = torch.Generator(device="cuda").manual_seed(m * 131 + n)
    x = torch.randn(m, n, device="cuda", generator=gen, dtype=torch.float64) * 3
    y = torch.softmax(x, -1).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    dx = sb.softmax_backward(dy, y)
    assert dx.dtype == dtype and dx.shape == y.shape
    tol = rw.tolerance(rw.DTYPES[str(dtype)])
    assert error(dx, torch.from_numpy(sb.reference(dy.double().cpu().numpy(),
                                                   y.double().cpu().numpy()))) <= tol
    xr = x.requires_grad_()
    (auto,) = torch.autograd.grad(torch.softmax(xr, -1), (xr,), dy.double())
    # autograd differentiates at the float64 y, ours at y rounded to dtype
    assert error(dx, auto) <= 4 * tol


def test_batched_input_and_more_row_tiles_than_a_grid_y_extent():
    m = 16 * 70000                                 # 70000 CTAs of 16 rows (a 1-D grid)
    assert sb.split_for(2, 2, m).ROWS == 16
    y = torch.softmax(torch.randn(m, 2, device="cuda"), -1).bfloat16()
    dy = torch.randn_like(y)
    got = sb.softmax_backward(dy.view(70, 16000, 2), y.view(70, 16000, 2)).view(m, 2)
    want = sb.reference(dy.double().cpu().numpy(), y.double().cpu().numpy())
    assert error(got, torch.from_numpy(want)) <= 2 ** -7


def test_recipe_check_runs():
    assert sb.check(shapes=((3, 7), (64, 1000), (2, 65537)), seed=1) <= 2 ** -7


@pytest.mark.parametrize("m, n", [(1000, 3000), (3, 131072)])
def test_planned_calls_on_fresh_and_misaligned_tensors(m, n):
    """After a shape's first call (its plan), calls on other tensors (the plan's configured
    launcher) and on 8-byte-aligned views (kernel[grid]: another specialization) match
    float64."""
    for offset in (0, 0, 0, 4, 0):
        buffers = [torch.empty(m * n + 8, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        y, dy = (b[offset:offset + m * n].view(m, n) for b in buffers)
        y.copy_(torch.softmax(torch.randn(m, n, device="cuda") * 3, -1))
        dy.copy_(torch.randn(m, n, device="cuda"))
        want = sb.reference(dy.double().cpu().numpy(), y.double().cpu().numpy())
        assert error(sb.softmax_backward(dy, y), torch.from_numpy(want)) <= 2 ** -7
