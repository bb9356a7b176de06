"""recipes/layernorm_backward.layernorm_backward's per-shape plans on the CPU (fakes:
tests/dsl/fake_gpu.py, real PTX assembled by ptxas): the planned launches (the persistent
kernel, the column sums) pack exactly what `launches` describes, with the statistics given or
recomputed; a changed shape, dtype, weight dtype, statistics, eps or device takes the checked
path (check_arguments); every rule is still checked on every call once a plan exists."""
import struct
import sys

import pytest

import layoutkit as lk
from recipes import _rowwise as rw
from recipes import _rowwise_kernel as rk
from recipes import layernorm_backward as lb

from .fake_gpu import BASE, STREAM, FakeGPU, Tensor, record_calls

MB = 1 << 20
CTAS = 3                                              # the persistent grid's resident CTAs here
SHAPES = ((4, 1000), (6, 256), (2, 3, 96))            # no cluster: the fake has no cuLaunchKernelEx
DTYPES = (("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float32", "float32"))
LK = {"bfloat16": lk.bf16, "float32": lk.f32}


def tensor(shape, dtype="bfloat16", at=0, **kw):
    return Tensor(BASE + at * MB, dtype, shape, **kw)


def row_of(t, i: int):
    """Row i of a 2-d fake tensor (contiguous), as a fake tensor."""
    size = {"bfloat16": 2, "float32": 4}[t.dtype.name]
    return Tensor(t.ptr + i * t.shape[1] * size, t.dtype.name, t.shape[1:], t.dev)


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(lb, "_PLANS", {})
    monkeypatch.setattr(lb, "_CTAS", {})
    monkeypatch.setattr(rw, "resident_ctas", lambda *args: CTAS)   # no occupancy query here
    kernels = set()
    for shape in SHAPES:
        m, n = rw.rows_and_columns("test", shape)
        for xdt, wdt in DTYPES:
            kernels.add(lb.kernel_for(LK[xdt], LK[wdt], lb.split_for(n, LK[xdt].nbytes)))
            kernels.add(rk.column_sum_launch(LK[wdt], 2, CTAS, n)[0])
    fake = FakeGPU(monkeypatch, kernels)
    monkeypatch.setattr(Tensor, "__getitem__", row_of, raising=False)   # sums[0], sums[1]
    fake.opt_in_shared_memory(monkeypatch)       # the partials: past 48 KB
    yield fake
    fake.reset()


@pytest.fixture
def checks(monkeypatch):
    return record_calls(monkeypatch, lb, "check_arguments")


def arguments(shape, xdt="bfloat16", wdt="bfloat16", stats=True, at=0, device=0):
    """(dy, x, weight, mean, rstd) on the fake GPU."""
    rows = shape[:-1]
    return (tensor(shape, xdt, at, device=device), tensor(shape, xdt, at + 1, device=device),
            tensor((shape[-1],), wdt, at + 2, device=device),
            tensor(rows, "float32", at + 3, device=device) if stats else None,
            tensor(rows, "float32", at + 4, device=device) if stats else None)


@pytest.mark.parametrize("shape, xdt, wdt, stats", [
    ((4, 1000), "bfloat16", "bfloat16", True), ((6, 256), "bfloat16", "float32", False),
    ((2, 3, 96), "float32", "float32", True), ((4, 1000), "bfloat16", "bfloat16", False)])
def test_a_plan_launches_what_launches_describes(gpu, checks, shape, xdt, wdt, stats):
    m, n = rw.rows_and_columns("test", shape)
    dy, x, w, mean, rstd = arguments(shape, xdt, wdt, stats)
    for _ in range(3):
        dx, dw, db = lb.layernorm_backward(dy, x, w, mean, rstd, 0.25)
    assert len(checks) == 1 and len(gpu.calls) == 6
    assert dx.shape == x.shape and dx.dtype is x.dtype
    planned = gpu.calls[-2:]
    pointers = struct.unpack_from("<7Q", planned[0].packed)
    (ctas,) = lb._CTAS.values()                     # min(row tiles, CTAS resident)
    count = lb.partial_floats(ctas, n)
    floats = {count: Tensor(pointers[6], "float32", (count,)),
              1: Tensor(pointers[3], "float32", (1,))}    # the plan's statistics stand-in
    sums = Tensor(dw.ptr, wdt, (2, n))              # dw, db: the rows of one (2, n) tensor
    assert struct.unpack_from("<2Q", planned[1].packed) == (pointers[6], dw.ptr)
    assert (dw.shape, dw.dtype, db.ptr - dw.ptr) == ((n,), w.dtype, n * LK[wdt].nbytes)
    rw.launch(lb.launches(dy, x, w, mean, rstd, dx, sums, lambda c: floats[c], m, n, 0.25,
                          (LK[xdt], LK[wdt]), ctas))
    for a, b in zip(planned, gpu.calls[-2:]):
        assert a.packed == b.packed and a.spec is b.spec
        assert (a.grid, a.block) == (b.grid, b.block)
    assert stats or pointers[3] == pointers[4]      # recomputed: one stand-in for both


def test_a_changed_key_takes_the_checked_path(gpu, checks, monkeypatch):
    monkeypatch.setattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream",
                        {0: STREAM, 1: STREAM + 1}.get)
    calls = [((arguments((4, 1000)), 1e-5), 1), ((arguments((4, 1000), at=5), 1e-5), 0),
             ((arguments((6, 256)), 1e-5), 1),
             ((arguments((4, 1000), "float32", "float32"), 1e-5), 1),
             ((arguments((4, 1000), wdt="float32"), 1e-5), 1),
             ((arguments((4, 1000), stats=False), 1e-5), 1),
             ((arguments((4, 1000)), 0.5), 1),                  # another eps
             ((arguments((4, 1000), device=1), 1e-5), 1),
             ((arguments((4, 1000)), 1), 1),                    # an int eps: checked, = 1.0
             ((arguments((4, 1000)), 1.0), 0),
             ((arguments((4, 1000)), 1e-5), 0)]
    for (args, eps), checked in calls:
        before = len(checks)
        lb.layernorm_backward(*args, eps)
        assert len(checks) - before == checked, (args, eps)
    assert len(lb._PLANS) == 8 and len(gpu.calls) == 2 * len(calls)


def _bad(slot, value, eps=1e-5):
    args = list(arguments((4, 1000), at=8))
    args[slot] = value
    return (*args, eps)


@pytest.mark.parametrize("args, error, message", [
    (_bad(0, tensor((4, 999), at=8)), ValueError,
     r"layernorm_backward: dy has shape \(4, 999\); it must be \(4, 1000\)"),
    (_bad(0, tensor((4, 1000), "float32", 8)), TypeError, r"dy has dtype torch.float32"),
    (_bad(0, tensor((4, 1000), at=8, device=1)), ValueError, r"dy is on cuda:1"),
    (_bad(1, tensor((4, 1000), at=9, contiguous=False)), ValueError,
     r"layernorm_backward: x must be a contiguous CUDA tensor"),
    (_bad(2, tensor((1000, 1), at=10)), ValueError,
     r"weight has shape \(1000, 1\); it must be \(1000,\)"),
    (_bad(2, None), TypeError, r"layernorm_backward: weight must be a torch tensor"),
    (_bad(2, tensor((1000,), at=10, contiguous=False)), ValueError,
     r"weight must be a contiguous CUDA tensor"),
    (_bad(3, None), ValueError, r"give both mean and rstd .* or neither"),
    (_bad(4, None), ValueError, r"give both mean and rstd .* or neither"),
    (_bad(3, tensor((4,), at=11)), TypeError, r"mean has dtype torch.bfloat16"),
    (_bad(4, tensor((3,), "float32", 12)), ValueError, r"rstd has shape \(3,\); it must be \(4,\)"),
    (_bad(4, tensor((4,), "float32", 12, device=1)), ValueError, r"rstd is on cuda:1"),
    (_bad(0, tensor((4, 1000), at=8), eps=0.0), ValueError, r"eps = 0.0 must be a positive"),
    (_bad(0, tensor((4, 1000), at=8), eps="1e-5"), ValueError, r"eps = '1e-5'"),
    (_bad(0, tensor((4, 1000), at=8), eps=float("nan")), ValueError, r"eps = nan"),
])
def test_every_rule_is_checked_after_a_plan_exists(gpu, args, error, message):
    for stats in (True, False):                     # plans with and without statistics
        lb.layernorm_backward(*arguments((4, 1000), stats=stats), 1e-5)
    with pytest.raises(error, match=message):
        lb.layernorm_backward(*args)
    assert len(gpu.calls) == 4


def test_plans_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(lb, "MAX_PLANS", 2)
    for i, shape in enumerate(((4, 1000), (6, 256), (2, 3, 96), (4, 1000))):
        lb.layernorm_backward(*arguments(shape, at=5 * i), 1e-5)
        assert len(lb._PLANS) <= 2
    assert len(gpu.calls) == 8
