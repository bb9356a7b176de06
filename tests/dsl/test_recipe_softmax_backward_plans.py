"""recipes/softmax_backward.softmax_backward's per-shape plans on the CPU (fakes:
tests/dsl/fake_gpu.py, real PTX assembled by ptxas): a plan launches exactly what `launches`
describes; a changed shape, dtype or device takes the checked path (check_arguments); every
rule is still checked on every call once a plan exists (the same worded errors, nothing
launched)."""
import sys

import pytest

import layoutkit as lk
from recipes import _rowwise as rw
from recipes import softmax_backward as sb

from .fake_gpu import BASE, STREAM, FakeGPU, Tensor, record_calls

MB = 1 << 20
SHAPES = ((4, 1000), (6, 256), (2, 3, 96))            # no cluster: the fake has no cuLaunchKernelEx
LK = {"bfloat16": lk.bf16, "float32": lk.f32, "float16": lk.f16}


def tensor(shape, dtype="bfloat16", at=0, **kw):
    return Tensor(BASE + at * MB, dtype, shape, **kw)


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(sb, "_PLANS", {})
    kernels = set()
    for shape in SHAPES:
        m, n = rw.rows_and_columns("test", shape)
        kernels |= {sb.kernel_for(d, sb.split_for(n, d.nbytes, m)) for d in LK.values()}
    fake = FakeGPU(monkeypatch, kernels)
    yield fake
    fake.reset()


@pytest.fixture
def checks(monkeypatch):
    """The arguments of every check_arguments call softmax_backward makes."""
    return record_calls(monkeypatch, sb, "check_arguments")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", LK)
def test_a_plan_launches_what_launches_describes(gpu, checks, shape, dtype):
    m, n = rw.rows_and_columns("test", shape)
    dy, y = tensor(shape, dtype), tensor(shape, dtype, 1)
    for _ in range(3):                              # the first call makes the plan
        dx = sb.softmax_backward(dy, y)
    assert len(checks) == 1 and len(sb._PLANS) == 1
    assert dx.shape == y.shape and dx.dtype is y.dtype and dx.ptr not in (dy.ptr, y.ptr)
    planned = gpu.calls[-1]
    rw.launch(sb.launches(dy, y, dx, None, m, n, LK[dtype]))
    described = gpu.calls[-1]
    assert planned.packed == described.packed and planned.spec is described.spec
    assert (planned.grid, planned.block) == (described.grid, described.block)


def test_a_changed_key_takes_the_checked_path(gpu, checks, monkeypatch):
    monkeypatch.setattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream",
                        {0: STREAM, 1: STREAM + 1}.get)     # a second fake device's stream
    calls = [((tensor((4, 1000)), tensor((4, 1000), at=1)), 1),
             ((tensor((4, 1000), at=2), tensor((4, 1000), at=3)), 0),   # other tensors
             ((tensor((6, 256)), tensor((6, 256), at=1)), 1),           # another shape
             ((tensor((4, 1000), "float32"), tensor((4, 1000), "float32", 1)), 1),  # dtype
             ((tensor((4, 1000), device=1), tensor((4, 1000), at=1, device=1)), 1),  # device
             ((tensor((4, 1000)), tensor((4, 1000), at=1)), 0)]
    for args, checked in calls:
        before = len(checks)
        sb.softmax_backward(*args)
        assert len(checks) - before == checked, args
    assert len(gpu.calls) == len(calls) and len(sb._PLANS) == 4
    assert gpu.calls[4].stream == STREAM + 1 and gpu.calls[5].stream == STREAM


def test_an_empty_y_plans_no_launch(gpu, checks):
    for _ in range(2):
        dx = sb.softmax_backward(tensor((0, 1000)), tensor((0, 1000), at=1))
    assert dx.shape == (0, 1000) and gpu.calls == [] and len(checks) == 1


@pytest.mark.parametrize("dy, y, error, message", [
    ("dy", tensor((4, 1000), at=1), TypeError, r"softmax_backward: dy must be a torch tensor"),
    (tensor((4, 1000)), "y", TypeError, r"softmax_backward: y must be a torch tensor"),
    (tensor((4, 1000)), tensor((4, 1000), "int32", 1), TypeError,
     r"softmax_backward: y has dtype torch.int32"),
    (tensor((4, 1000), "float32"), tensor((4, 1000), at=1), TypeError,
     r"softmax_backward: dy has dtype torch.float32; it must be one of torch.bfloat16"),
    (tensor((4, 999)), tensor((4, 1000), at=1), ValueError,
     r"softmax_backward: dy has shape \(4, 999\); it must be \(4, 1000\)"),
    (tensor((4, 1000)), tensor((4, 1000), at=1, contiguous=False), ValueError,
     r"softmax_backward: y must be a contiguous CUDA tensor"),
    (tensor((4, 1000), contiguous=False), tensor((4, 1000), at=1), ValueError,
     r"softmax_backward: dy must be a contiguous CUDA tensor"),
    (tensor((4, 1000), device=-1), tensor((4, 1000), at=1, device=-1), ValueError,
     r"softmax_backward: y must be a contiguous CUDA tensor, got one on cpu"),
    (tensor((4, 1000), device=1), tensor((4, 1000), at=1), ValueError,
     r"softmax_backward: dy is on cuda:1; it must be on cuda:0"),
    (tensor(()), tensor((), at=1), ValueError,
     r"softmax_backward: x must have at least one dimension"),
    (tensor((1, 131073)), tensor((1, 131073), at=1), ValueError,
     r"softmax_backward: the row length n = 131073 must be an int in 1..131072"),
])
def test_every_rule_is_checked_after_a_plan_exists(gpu, dy, y, error, message):
    sb.softmax_backward(tensor((4, 1000), at=2), tensor((4, 1000), at=3))
    with pytest.raises(error, match=message):
        sb.softmax_backward(dy, y)
    assert len(gpu.calls) == 1


def test_plans_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(sb, "MAX_PLANS", 2)
    for i, shape in enumerate(((4, 1000), (6, 256), (2, 3, 96), (4, 1000))):
        sb.softmax_backward(tensor(shape, at=2 * i), tensor(shape, at=2 * i + 1))
        assert len(sb._PLANS) <= 2
    assert len(gpu.calls) == 4
