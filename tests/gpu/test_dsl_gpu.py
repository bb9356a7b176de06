"""GPU tests of the kernel DSL (marker `gpu`): elementwise y = a*x + b in f32 and bf16 on random
data with ragged sizes, a loop with a carried tensor, and kernel integers divided by constants
up to 2**31, checked element by element.
The kernels cannot hang: no barriers or waits, every loop bound is a kernel argument."""
import numpy as np
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.axpb_reference import axpb_mismatches  # noqa: E402
from tests.dsl.kernels import axpb, axpb_bf16, row_sums  # noqa: E402

import layoutkit as lk  # noqa: E402
from layoutkit.algebra import Layout  # noqa: E402

pytestmark = pytest.mark.gpu
SIZES = [1, 7, 127, 128, 511, 512, 4095, 4096, 100_003, 1 << 20]


@pytest.mark.parametrize("values", [1, 2, 4])
@pytest.mark.parametrize("n", SIZES)
def test_axpb_f32(n, values):
    gen = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", generator=gen)
    y = torch.full((n + 64,), float("nan"), device="cuda")     # guard past the end
    tile = 128 * values
    axpb[(n + tile - 1) // tile](x, y, n, 1.5, -0.25, VALUES=values)
    torch.cuda.synchronize()
    expected = x.double() * 1.5 - 0.25
    assert torch.allclose(y[:n].double(), expected, rtol=1e-6, atol=1e-6)
    assert torch.isnan(y[n:]).all()                           # nothing written past n


@pytest.mark.parametrize("n", SIZES)
def test_axpb_bf16(n):
    gen = torch.Generator(device="cuda").manual_seed(n + 1)
    x = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    y = torch.zeros(n + 64, device="cuda", dtype=torch.bfloat16)
    axpb_bf16[(n + 1023) // 1024](x, y, n, 2.0, 0.5)
    torch.cuda.synchronize()
    expected = (x.float() * 2.0 + 0.5).to(torch.bfloat16)
    assert torch.equal(y[:n], expected)
    assert (y[n:] == 0).all()


def check_axpb(y, x, a: float, b: float) -> None:
    """y is a * x + b in f32, fused or not (see tests/dsl/axpb_reference.py)."""
    host = x.double().cpu().numpy()
    bad = axpb_mismatches(y.double().cpu().numpy(), host, a, b)
    assert bad.size == 0, f"{bad.size} wrong values, first at {bad[:8].tolist()}"


def test_unaligned_pointer_uses_the_scalar_specialization():
    n = 1000
    gen = torch.Generator(device="cuda").manual_seed(1000)
    base = torch.randn(n + 1, device="cuda", generator=gen)
    x = base[1:]                                             # 4-byte aligned only
    y = torch.full((n + 64,), float("nan"), device="cuda")    # guard past the end
    axpb[(n + 511) // 512](x, y, n, 3.0, 1.0, VALUES=4)
    torch.cuda.synchronize()
    check_axpb(y[:n], x, 3.0, 1.0)
    assert torch.isnan(y[n:]).all()
    assert axpb.key(x, y, n, 3.0, 1.0, 4)[0] is False


def test_aligned_and_unaligned_pointers_alternate():
    """The fast launch path and each specialization's configured launcher (with its packing
    memo) across alternating specializations, grids and values: every launch's own values."""
    n = 1000
    gen = torch.Generator(device="cuda").manual_seed(7)
    base = torch.randn(n + 4, device="cuda", generator=gen)
    y = torch.empty(n + 64, device="cuda")
    for offset, a, values in ((0, 3.0, 4), (1, -2.0, 4), (0, 0.5, 4), (2, 1.5, 4), (1, 3.0, 4),
                              (0, 3.0, 2), (1, 3.0, 2), (0, 3.0, 4)):
        x = base[offset:offset + n]
        y.fill_(float("nan"))
        axpb[-(-n // (128 * values))](x, y, n, a, 1.0, VALUES=values)
        torch.cuda.synchronize()
        check_axpb(y[:n], x, a, 1.0)
        assert torch.isnan(y[n:]).all()
        assert axpb.key(x, y, n, a, 1.0, values)[0] is (x.data_ptr() % 16 == 0)


@pytest.mark.parametrize("m, n", [(1, 1), (3, 31), (5, 32), (17, 1000)])
def test_row_sums_loop(m, n):
    x = torch.randn(m, n, device="cuda", dtype=torch.float32)
    y = torch.full((m, 32), float("nan"), device="cuda")
    row_sums[m](x, y, m, n)
    torch.cuda.synchronize()
    lanes = torch.zeros(m, 32, dtype=torch.float64)
    host = x.double().cpu().numpy()
    for lane in range(32):
        lanes[:, lane] = torch.from_numpy(host[:, lane::32].sum(axis=1))
    assert np.allclose(y.double().cpu().numpy(), lanes.numpy(), rtol=1e-5, atol=1e-5)


@lk.kernel(num_warps=4)
def quotient_remainder(q: lk.Pointer[lk.i32], r: lk.Pointer[lk.i32], n: lk.i32, base: lk.i32,
                       D: lk.constexpr):
    """q[i], r[i] = divmod(base + i, D) for i < n: a kernel integer divided by a constant
    (lowered as a multiply-high and a shift for a D that is not a power of two)."""
    lk.assume(base >= 0)
    t = base + lk.block_id(0) * 128 + lk.thread_id()
    tv = lk.tv_layout(Layout(128), Layout(1))
    Q = lk.global_tensor(q, Layout(n)).tile((128,), (lk.block_id(0),)).partition(tv)
    R = lk.global_tensor(r, Layout(n)).tile((128,), (lk.block_id(0),)).partition(tv)
    lk.store(Q, lk.full(tv, t // D, lk.i32))
    lk.store(R, lk.full(tv, t % D, lk.i32))


@pytest.mark.parametrize("d", [3, 7, 66, 1000, 123_457, 2**31 - 1, 64])
@pytest.mark.parametrize("base", [0, 2**31 - 200_000, 1_234_567_890])
def test_division_by_a_constant_is_exact(d, base):
    n = 100_003                                     # ragged: the last block is partial
    q = torch.full((n,), -1, device="cuda", dtype=torch.int32)
    r = torch.full((n,), -1, device="cuda", dtype=torch.int32)
    quotient_remainder[-(-n // 128)](q, r, n, base, D=d)
    torch.cuda.synchronize()
    t = np.arange(n, dtype=np.int64) + base
    assert np.array_equal(q.cpu().numpy(), t // d) and np.array_equal(r.cpu().numpy(), t % d)
