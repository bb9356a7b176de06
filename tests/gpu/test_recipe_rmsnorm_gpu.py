"""GPU tests (marker `gpu`) of recipes/rmsnorm.py: forward (residual add, residual and rstd
outputs, weight or none) and backward (dx, dweight) on random ragged shapes from 1 x 1 to rows
of 131072 (a warp, a CTA and a cluster per row; several persistent rounds), bf16, fp16 and
f32, against float64 and against torch's autograd of the float64 definition; nothing written
past the outputs; dweight bit-identical across runs; more row tiles than a grid's y extent."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from recipes import _rowwise as rw  # noqa: E402
from recipes import rmsnorm  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(1, 1), (3, 7), (1, 1000), (37, 1000), (5, 3000), (1, 4096), (300, 4096),
          (2, 8191), (9, 16385), (3, 32768), (1, 65537), (2, 65537), (2, 131072)]
DTYPES = [torch.bfloat16, torch.float32]


def float64_rmsnorm(x, w, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def error(got, want) -> float:
    return rw.relative_to_max(got.double().cpu().numpy(), want.double().cpu().numpy())


def tolerance(dtype) -> float:
    return rw.tolerance(rw.DTYPES[str(dtype)])


def guarded(shape, dtype):
    """A tensor of `shape` at the start of a NaN-filled buffer, and the guard after it."""
    size = 1
    for e in shape:
        size *= e
    buffer = torch.full((size + 64,), float("nan"), device="cuda", dtype=dtype)
    return buffer[:size].view(shape), buffer[size:]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n", SHAPES)
def test_forward_and_backward_match_float64_and_autograd(m, n, dtype):
    gen = torch.Generator(device="cuda").manual_seed(m * 131 + n)
    x, res, dy = (torch.randn(m, n, device="cuda", generator=gen).to(dtype) for _ in range(3))
    w = torch.randn(n, device="cuda", generator=gen).to(dtype)
    y, h, rstd = rmsnorm.rmsnorm(x, w, res, 1e-6, return_residual=True, return_rstd=True)
    h64 = x.double() + res.double()
    assert error(h, h64) <= tolerance(dtype)
    assert error(y, float64_rmsnorm(h64, w.double())) <= tolerance(dtype)
    # rstd is of the unrounded sum x + residual (f32 in the kernel), as fused adds compute it
    want_rstd = torch.rsqrt((h64 ** 2).mean(-1) + 1e-6)
    assert error(rstd, want_rstd) <= 2 ** -16
    dx, dw = rmsnorm.rmsnorm_backward(dy, h, w, rstd)
    hr, wr = h.double().requires_grad_(), w.double().requires_grad_()
    auto_dx, auto_dw = torch.autograd.grad(float64_rmsnorm(hr, wr), (hr, wr), dy.double())
    want_dx, want_dw = rmsnorm.reference_backward(*(t.double().cpu().numpy()
                                                    for t in (dy, h, w, rstd)))
    # dx = rstd * w * dy - h * rstd^3 * mean(h * w * dy): its terms' size is the scale (n = 1
    # cancels them to ~1e-5, which relative_to_max would judge against itself)
    scale = float((dy.double() * w.double() * rstd.double()[:, None]).abs().max())
    assert dx_error(dx, torch.from_numpy(want_dx), scale) <= tolerance(dtype)
    assert error(dw, torch.from_numpy(want_dw)) <= tolerance(dtype)
    assert dx_error(dx, auto_dx, scale) <= tolerance(dtype)
    assert error(dw, auto_dw) <= tolerance(dtype)


def dx_error(got, want, scale: float) -> float:
    """max |got - want| over max(scale, max |want|)."""
    diff = (got.double().cpu() - want.double().cpu()).abs().max().item()
    return diff / max(scale, want.double().abs().max().item(), 1e-30)


@pytest.mark.parametrize("m, n", [(5, 100), (3, 4096), (2, 65537)])
def test_without_weight_or_residual_and_in_fp16(m, n):
    x = torch.randn(m, n, device="cuda").half()
    y = rmsnorm.rmsnorm(x)
    assert error(y, float64_rmsnorm(x.double(), 1.0)) <= tolerance(torch.float16)
    y2, h, rstd = rmsnorm.rmsnorm(x, return_residual=True, return_rstd=True)
    assert h is x and torch.equal(y, y2)
    dy = torch.randn_like(x)
    dx, dw = rmsnorm.rmsnorm_backward(dy, x, None, rstd)
    xr = x.double().requires_grad_()
    (want,) = torch.autograd.grad(float64_rmsnorm(xr, 1.0), (xr,), dy.double())
    assert dw is None and error(dx, want) <= tolerance(torch.float16)


def test_f32_weight_with_bf16_rows():
    x = torch.randn(64, 3000, device="cuda").bfloat16()
    w = torch.randn(3000, device="cuda")
    y, rstd = rmsnorm.rmsnorm(x, w, return_rstd=True)
    assert y.dtype == torch.bfloat16
    assert error(y, float64_rmsnorm(x.double(), w.double())) <= tolerance(torch.bfloat16)
    dx, dw = rmsnorm.rmsnorm_backward(torch.ones_like(x), x, w, rstd)
    assert dw.dtype == torch.float32


@pytest.mark.parametrize("m, n", [(7, 1000), (4096, 4096), (3, 131072)])
def test_nothing_is_written_past_the_outputs(m, n):
    x = torch.randn(m, n, device="cuda").bfloat16()
    w = torch.randn(n, device="cuda").bfloat16()
    y, y_guard = guarded((m, n), torch.bfloat16)
    want = rmsnorm.rmsnorm(x, w)
    rw.launch(rmsnorm.forward_launches(x, None, w, y, None, None, rw.cuda_floats(x.device), m, n,
                                       1e-6, rmsnorm.dtypes_of(x, w)))
    torch.cuda.synchronize()
    assert torch.equal(y, want) and torch.isnan(y_guard).all()


@pytest.mark.parametrize("m, n", [(5, 32776), (3, 131072), (1000, 65536), (4, 16384)])
@pytest.mark.parametrize("staged", [False, True])
def test_rows_staged_in_shared_memory_or_held_in_registers(m, n, staged):
    """Either place a row waits out its sum (rmsnorm.forward_staged's choice, forced both
    ways; 32776: a ragged last CTA of 3) gives y, h and rstd within the tolerance of
    float64, with a residual and a weight."""
    x, res = (torch.randn(m, n, device="cuda").bfloat16() for _ in range(2))
    w = torch.randn(n, device="cuda").bfloat16()
    y, h = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.empty(m, device="cuda")
    launches = rmsnorm.forward_launches(x, res, w, y, h, rstd, rw.cuda_floats(x.device), m, n,
                                        1e-6, rmsnorm.dtypes_of(x, w), staged=staged)
    assert launches[0][3]["STAGED"] == staged
    rw.launch(launches)
    want_y, want_h, want_rstd = rmsnorm.reference(*(t.double().cpu().numpy() for t in (x, w, res)))
    assert rw.relative_to_max(y.double().cpu().numpy(), want_y) <= tolerance(torch.bfloat16)
    assert rw.relative_to_max(h.double().cpu().numpy(), want_h) <= tolerance(torch.bfloat16)
    assert rw.relative_to_max(rstd.double().cpu().numpy(), want_rstd) <= 2 ** -16


def test_weight_gradient_is_deterministic():
    x, dy = (torch.randn(20000, 1000, device="cuda").bfloat16() for _ in range(2))
    w = torch.randn(1000, device="cuda").bfloat16()
    _, rstd = rmsnorm.rmsnorm(x, w, return_rstd=True)
    first = rmsnorm.rmsnorm_backward(dy, x, w, rstd)
    for _ in range(3):
        again = rmsnorm.rmsnorm_backward(dy, x, w, rstd)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])


def test_more_row_tiles_than_a_grid_y_extent_and_batched_input():
    m = 16 * 70000                                 # 70000 CTAs of 16 rows (a 1-D grid)
    assert rmsnorm.forward_split(2, 2, m).ROWS == 16
    x = torch.randn(m, 2, device="cuda").bfloat16()
    y = rmsnorm.rmsnorm(x.view(70, 16000, 2))
    assert y.shape == (70, 16000, 2)
    assert error(y.view(m, 2), float64_rmsnorm(x.double(), 1.0)) <= 2 ** -7


def test_empty_rows():
    x = torch.empty(0, 512, device="cuda").bfloat16()
    w = torch.ones(512, device="cuda").bfloat16()
    y, rstd = rmsnorm.rmsnorm(x, w, return_rstd=True)
    dx, dw = rmsnorm.rmsnorm_backward(x, x, w, rstd)
    assert y.shape == (0, 512) and rstd.shape == (0,) and torch.equal(dw, torch.zeros_like(w))


def test_recipe_check_runs():
    assert rmsnorm.check(shapes=((3, 7), (64, 1000), (2, 65537)), seed=1) <= 2 ** -7


def offset_rows(m, n, offset, dtype=torch.bfloat16):
    """A random contiguous (m, n) view `offset` elements into its buffer (4 bf16: 8-byte
    aligned only)."""
    return torch.randn(m * n + 8, device="cuda").to(dtype)[offset:offset + m * n].view(m, n)


@pytest.mark.parametrize("m, n", [(1000, 3000), (3, 131072)])
def test_planned_calls_on_fresh_and_misaligned_tensors(m, n):
    """After a shape's first call (its plan), calls on other tensors (the plan's configured
    launcher) and on an 8-byte-aligned view (kernel[grid]: another specialization) match
    float64, forward and backward."""
    w = torch.randn(n, device="cuda").bfloat16()
    for offset in (0, 0, 0, 4, 0):
        x, dy = offset_rows(m, n, offset), offset_rows(m, n, offset)
        y, rstd = rmsnorm.rmsnorm(x, w, return_rstd=True)
        assert error(y, float64_rmsnorm(x.double(), w.double())) <= tolerance(torch.bfloat16)
        dx, dw = rmsnorm.rmsnorm_backward(dy, x, w, rstd)
        want_dx, want_dw = rmsnorm.reference_backward(*(t.double().cpu().numpy()
                                                        for t in (dy, x, w, rstd)))
        scale = float((dy.double() * w.double() * rstd.double()[:, None]).abs().max())
        assert dx_error(dx, torch.from_numpy(want_dx), scale) <= tolerance(torch.bfloat16)
        assert error(dw, torch.from_numpy(want_dw)) <= tolerance(torch.bfloat16)
