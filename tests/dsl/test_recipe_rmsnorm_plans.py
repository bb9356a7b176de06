"""recipes/rmsnorm.py's per-shape plans on the CPU (fakes: tests/dsl/fake_gpu.py, real PTX
assembled by ptxas). rmsnorm: a plan launches exactly what forward_launches describes (the same
packed parameters) for every mix of weight, residual and outputs; a changed shape, dtype,
weight or residual presence, output set or device takes the checked path (check_forward) and a
plan of its own; every rule is still checked on every call once a plan exists (the same worded
errors, nothing launched). rmsnorm_backward: the same for backward_launches (the persistent
kernel and the column sum) and check_backward."""
import struct

import pytest

import layoutkit as lk
from recipes import _rowwise as rw
from recipes import _rowwise_kernel as rk
from recipes import rmsnorm

from .fake_gpu import BASE, STREAM, FakeGPU, Tensor, record_calls

MB = 1 << 20
CTAS = 3                                              # the backward's persistent grid here
SHAPES = ((4, 1000), (6, 256), (2, 3, 96))            # no cluster: the fake has no cuLaunchKernelEx
DTYPES = (("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float32", "float32"),
          ("float16", "float16"))
LK = {"bfloat16": lk.bf16, "float32": lk.f32, "float16": lk.f16}


def tensor(shape, dtype="bfloat16", at=0, **kw):
    return Tensor(BASE + at * MB, dtype, shape, **kw)


def forward_kernels():
    """Every forward kernel these tests launch (their caches are reset between tests)."""
    kernels = set()
    for shape in SHAPES:
        m, n = rw.rows_and_columns("test", shape)
        for xdt, wdt in DTYPES:
            s = rmsnorm.forward_split(n, LK[xdt].nbytes, m)
            kernels |= {rmsnorm.kernel_for("forward", LK[xdt], LK[d], s) for d in (xdt, wdt)}
    return kernels


def backward_kernels():
    """Every backward kernel and column sum these tests launch."""
    kernels = set()
    for shape in SHAPES:
        m, n = rw.rows_and_columns("test", shape)
        for xdt, wdt in DTYPES:
            s = rmsnorm.backward_split(n, LK[xdt].nbytes)
            kernels |= {rmsnorm.kernel_for("backward", LK[xdt], LK[d], s) for d in (xdt, wdt)}
            kernels |= {rk.column_sum_launch(LK[d], 1, CTAS, n)[0] for d in (xdt, wdt)}
    return kernels


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(rmsnorm, "_FORWARD", {})
    monkeypatch.setattr(rmsnorm, "_BACKWARD", {})
    monkeypatch.setattr(rmsnorm, "_CTAS", {})
    monkeypatch.setattr(rw, "resident_ctas", lambda *args: CTAS)   # no occupancy query here
    fake = FakeGPU(monkeypatch, forward_kernels() | backward_kernels())
    fake.opt_in_shared_memory(monkeypatch)       # the backward's dweight partials: past 48 KB
    yield fake
    fake.reset()


@pytest.fixture
def checks(monkeypatch):
    """The arguments of every check_forward call rmsnorm makes (the checked path)."""
    return record_calls(monkeypatch, rmsnorm, "check_forward")


def outputs(result, return_residual, return_rstd):
    """(y, h or None, rstd or None) of an rmsnorm result."""
    parts = list(result) if (return_residual or return_rstd) else [result]
    y = parts.pop(0)
    h = parts.pop(0) if return_residual else None
    return y, h, (parts.pop(0) if return_rstd else None)


# (shape, x's and weight's dtypes, weight, residual, return_residual, return_rstd): each
# dtype pair, weight and residual given or not, each output set, a 3-d x
PLAN_CASES = [((4, 1000), "bfloat16", "bfloat16", True, False, False, True),  # bench_rows' call
              ((4, 1000), "bfloat16", "float32", True, True, True, True),
              ((6, 256), "float32", "float32", True, True, False, False),
              ((6, 256), "float16", "float16", False, True, True, False),
              ((2, 3, 96), "bfloat16", "bfloat16", False, False, True, True),
              ((4, 1000), "bfloat16", "bfloat16", False, False, False, False)]


@pytest.mark.parametrize("shape, xdt, wdt, with_weight, with_residual, return_residual, "
                         "return_rstd", PLAN_CASES)
def test_a_plan_launches_what_forward_launches_describes(gpu, checks, shape, xdt, wdt,
                                                         with_weight, with_residual,
                                                         return_residual, return_rstd):
    m, n = rw.rows_and_columns("test", shape)
    x = tensor(shape, xdt)
    w = tensor((n,), wdt, 1) if with_weight else None
    res = tensor(shape, xdt, 2) if with_residual else None
    for _ in range(3):                              # the first call makes the plan
        y, h, rstd = outputs(rmsnorm.rmsnorm(x, w, res, 0.25, return_residual, return_rstd),
                             return_residual, return_rstd)
    assert len(checks) == 1 and len(rmsnorm._FORWARD) == 1
    assert y.shape == x.shape and y.dtype is x.dtype
    if not return_residual:
        assert h is None
    elif res is None:
        assert h is x                               # no residual: the stream is x itself
    else:
        assert h.shape == x.shape and h.ptr not in (x.ptr, y.ptr)
    if return_rstd:
        assert rstd.shape == tuple(shape[:-1]) and rstd.dtype.name == "float32"
    spare = next(iter(rmsnorm._FORWARD.values()))[2]
    assert (spare is None) == return_rstd           # an absent rstd: one stand-in per plan
    planned = gpu.calls[-1]
    rw.launch(rmsnorm.forward_launches(x, res, w, y, h if res is not None else None,
                                       rstd, lambda count: spare, m, n, 0.25,
                                       (LK[xdt], LK[wdt] if with_weight else LK[xdt])))
    described = gpu.calls[-1]
    assert planned.packed == described.packed and planned.spec is described.spec
    assert (planned.grid, planned.block) == (described.grid, described.block)
    assert struct.unpack_from("<6Qiif", planned.packed)[6:] == (
        m, n // rmsnorm.forward_split(n, LK[xdt].nbytes, m).VEC, 0.25)


def test_a_changed_key_takes_the_checked_path(gpu, checks):
    x, w = tensor((4, 1000)), tensor((1000,), at=1)
    calls = [
        ((x, w), {}, 1),                                         # a plan is made
        ((x, w), {}, 0),
        ((tensor((4, 1000), at=5), tensor((1000,), at=6)), {}, 0),   # other tensors, same key
        ((tensor((6, 256), at=3), tensor((256,), at=4)), {}, 1),     # another shape
        ((tensor((4, 1000), "float32", 3), tensor((1000,), "float32", 4)), {}, 1),  # dtype
        ((x, tensor((1000,), "float32", 4)), {}, 1),             # the weight's dtype
        ((x, None), {}, 1),                                      # no weight
        ((x, w, tensor((4, 1000), at=2)), {}, 1),                # a residual
        ((x, w, tensor((4, 1000), at=2)), {"return_residual": True}, 1),
        ((x, w), {"return_residual": True}, 0),                  # no residual: h is x, same key
        ((x, w), {"return_rstd": True}, 1),
        ((x, w), {"eps": 1}, 1),                                 # an int eps: checked, launched
        ((x, w), {}, 0),
        ((x, w), {"return_rstd": True}, 0),
    ]
    for args, kwargs, checked in calls:
        before = len(checks)
        rmsnorm.rmsnorm(*args, **kwargs)
        assert len(checks) - before == checked, (args, kwargs)
    assert len(gpu.calls) == len(calls) and len(rmsnorm._FORWARD) == 8
    assert struct.unpack_from("<f", gpu.calls[11].packed, 56) == (1.0,)
    assert gpu.calls[0].spec is gpu.calls[1].spec is gpu.calls[2].spec


def test_another_device_takes_the_checked_path(gpu, checks, monkeypatch):
    import sys
    monkeypatch.setattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream",
                        {0: STREAM, 1: STREAM + 1}.get)     # a second fake device's stream
    for device in (0, 1, 0, 1):
        rmsnorm.rmsnorm(tensor((4, 1000), device=device), tensor((1000,), at=1, device=device))
    assert len(checks) == 2 and len(rmsnorm._FORWARD) == 2
    assert [c.stream for c in gpu.calls] == [STREAM, STREAM + 1, STREAM, STREAM + 1]


def test_an_empty_x_plans_no_launch(gpu, checks):
    for _ in range(2):
        y = rmsnorm.rmsnorm(tensor((0, 1000)), tensor((1000,), at=1))
    assert y.shape == (0, 1000) and gpu.calls == [] and len(checks) == 1


@pytest.mark.parametrize("args, kwargs, error, message", [
    (("x",), {}, TypeError, r"rmsnorm: x must be a torch tensor, got str"),
    ((tensor((4, 1000), "int32"),), {}, TypeError, r"rmsnorm: x has dtype torch.int32"),
    ((tensor((4, 1000), device=-1),), {}, ValueError,
     r"rmsnorm: x must be a contiguous CUDA tensor, got one on cpu"),
    ((tensor((4, 1000), contiguous=False),), {}, ValueError,
     r"rmsnorm: x must be a contiguous CUDA tensor"),
    ((tensor(()),), {}, ValueError, r"rmsnorm: x must have at least one dimension"),
    ((tensor((4, 140000)),), {}, ValueError,
     r"rmsnorm: the row length n = 140000 must be an int in 1..131072"),
    ((tensor((4, 1000)), tensor((999,), at=1)), {}, ValueError,
     r"rmsnorm: weight has shape \(999,\); it must be \(1000,\)"),
    ((tensor((4, 1000)), tensor((1, 1000), at=1)), {}, ValueError,
     r"rmsnorm: weight has shape \(1, 1000\); it must be \(1000,\)"),
    ((tensor((4, 1000)), tensor((1000, 1), at=1)), {}, ValueError,
     r"rmsnorm: weight has shape \(1000, 1\); it must be \(1000,\)"),
    ((tensor((4, 1000)), tensor((1000,), "float16", 1)), {}, TypeError,
     r"rmsnorm: weight has dtype torch.float16; it must be one of torch.bfloat16, torch.float32"),
    ((tensor((4, 1000)), tensor((1000,), at=1, device=1)), {}, ValueError,
     r"rmsnorm: weight is on cuda:1; it must be on cuda:0"),
    ((tensor((4, 1000)), tensor((1000,), at=1, contiguous=False)), {}, ValueError,
     r"rmsnorm: weight must be a contiguous CUDA tensor"),
    ((tensor((4, 1000)), tensor((1000,), at=1), tensor((4, 999), at=2)), {}, ValueError,
     r"rmsnorm: residual has shape \(4, 999\); it must be \(4, 1000\)"),
    ((tensor((4, 1000)), tensor((1000,), at=1), tensor((4, 1000), "float32", 2)), {}, TypeError,
     r"rmsnorm: residual has dtype torch.float32; it must be one of torch.bfloat16"),
    ((tensor((4, 1000)), tensor((1000,), at=1), tensor((4, 1000), at=2, device=1)), {},
     ValueError, r"rmsnorm: residual is on cuda:1; it must be on cuda:0"),
    ((tensor((4, 1000)), tensor((1000,), at=1), tensor((4, 1000), at=2, contiguous=False)), {},
     ValueError, r"rmsnorm: residual must be a contiguous CUDA tensor"),
    ((tensor((4, 1000)), tensor((1000,), at=1)), {"eps": 0.0}, ValueError,
     r"rmsnorm: eps = 0.0 must be a positive number"),
    ((tensor((4, 1000)), tensor((1000,), at=1)), {"eps": -1e-6}, ValueError, r"eps = -1e-06"),
    ((tensor((4, 1000)), tensor((1000,), at=1)), {"eps": float("nan")}, ValueError,
     r"eps = nan must be a positive number"),
    ((tensor((4, 1000)), tensor((1000,), at=1)), {"eps": True}, ValueError, r"eps = True"),
    ((tensor((4, 1000)), tensor((1000,), at=1)), {"eps": "1e-6"}, ValueError, r"eps = '1e-6'"),
])
def test_every_rule_is_checked_after_a_plan_exists(gpu, args, kwargs, error, message):
    x, w, res = tensor((4, 1000)), tensor((1000,), at=1), tensor((4, 1000), at=2)
    for good in ((x,), (x, w), (x, w, res)):        # a plan for the key of every call below
        rmsnorm.rmsnorm(*good)
    with pytest.raises(error, match=message):
        rmsnorm.rmsnorm(*args, **kwargs)
    assert len(gpu.calls) == 3


def test_plans_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(rmsnorm, "MAX_PLANS", 2)
    for i, shape in enumerate(((4, 1000), (6, 256), (2, 3, 96), (4, 1000))):
        rmsnorm.rmsnorm(tensor(shape, at=2 * i), tensor((shape[-1],), at=2 * i + 1))
        assert len(rmsnorm._FORWARD) <= 2
    assert len(gpu.calls) == 4


# ---- rmsnorm_backward -------------------------------------------------------------------------
@pytest.fixture
def backward_checks(monkeypatch):
    return record_calls(monkeypatch, rmsnorm, "check_backward")


def backward_arguments(shape, xdt="bfloat16", wdt="bfloat16", weight=True, at=0, device=0):
    n = shape[-1]
    return (tensor(shape, xdt, at, device=device), tensor(shape, xdt, at + 1, device=device),
            tensor((n,), wdt, at + 2, device=device) if weight else None,
            tensor(shape[:-1], "float32", at + 3, device=device))


@pytest.mark.parametrize("shape, xdt, wdt, weight", [
    ((4, 1000), "bfloat16", "bfloat16", True), ((6, 256), "bfloat16", "float32", True),
    ((2, 3, 96), "float32", "float32", True), ((6, 256), "float16", "float16", False)])
def test_a_backward_plan_launches_what_backward_launches_describes(gpu, backward_checks, shape,
                                                                   xdt, wdt, weight):
    m, n = rw.rows_and_columns("test", shape)
    dy, x, w, rstd = backward_arguments(shape, xdt, wdt, weight)
    for _ in range(3):
        dx, dw = rmsnorm.rmsnorm_backward(dy, x, w, rstd)
    steps = 2 if weight else 1                      # the column sum of the dweight partials
    assert len(backward_checks) == 1 and len(gpu.calls) == 3 * steps
    assert dx.shape == x.shape and dx.dtype is x.dtype
    assert (dw is None) == (not weight)
    assert dw is None or (dw.shape, dw.dtype) == (w.shape, w.dtype)
    planned = gpu.calls[-steps:]
    partial = struct.unpack_from("<6Q", planned[0].packed)[5]     # made by this call
    (ctas,) = rmsnorm._CTAS.values()                # min(row tiles, CTAS resident)
    count = rmsnorm.partial_floats(ctas, n, w)
    rw.launch(rmsnorm.backward_launches(
        dy, x, w, rstd, dx, dw, lambda c: Tensor(partial, "float32", (c,)) if c == count else None,
        m, n, (LK[xdt], LK[wdt] if weight else LK[xdt]), ctas))
    described = gpu.calls[-steps:]
    for a, b in zip(planned, described):
        assert a.packed == b.packed and a.spec is b.spec
        assert (a.grid, a.block) == (b.grid, b.block)
    if weight:
        assert struct.unpack_from("<2Q", planned[1].packed) == (partial, dw.ptr)


def test_a_changed_backward_key_takes_the_checked_path(gpu, backward_checks, monkeypatch):
    import sys
    monkeypatch.setattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream",
                        {0: STREAM, 1: STREAM + 1}.get)
    calls = [(backward_arguments((4, 1000)), 1), (backward_arguments((4, 1000), at=4), 0),
             (backward_arguments((6, 256)), 1),
             (backward_arguments((4, 1000), "float32", "float32"), 1),
             (backward_arguments((4, 1000), wdt="float32"), 1),
             (backward_arguments((4, 1000), weight=False), 1),
             (backward_arguments((4, 1000), device=1), 1),
             (backward_arguments((4, 1000)), 0)]
    for args, checked in calls:
        before = len(backward_checks)
        rmsnorm.rmsnorm_backward(*args)
        assert len(backward_checks) - before == checked, args
    assert len(rmsnorm._BACKWARD) == 6


def test_an_empty_backward_launches_nothing(gpu, backward_checks):
    for _ in range(2):
        dx, dw = rmsnorm.rmsnorm_backward(*backward_arguments((0, 1000), weight=False))
    assert dx.shape == (0, 1000) and dw is None and gpu.calls == []  # (the fake has no zeros)
    assert len(backward_checks) == 1


def _bad(slot, value):
    args = list(backward_arguments((4, 1000), at=8))
    args[slot] = value
    return tuple(args)


@pytest.mark.parametrize("args, error, message", [
    (_bad(0, tensor((4, 999), at=8)), ValueError,
     r"rmsnorm_backward: dy has shape \(4, 999\); it must be \(4, 1000\)"),
    (_bad(0, tensor((4, 1000), "float32", 8)), TypeError,
     r"rmsnorm_backward: dy has dtype torch.float32; it must be one of torch.bfloat16"),
    (_bad(0, tensor((4, 1000), at=8, contiguous=False)), ValueError,
     r"rmsnorm_backward: dy must be a contiguous CUDA tensor"),
    (_bad(0, tensor((4, 1000), at=8, device=1)), ValueError,
     r"rmsnorm_backward: dy is on cuda:1; it must be on cuda:0"),
    (_bad(1, tensor((4, 1000), at=9, contiguous=False)), ValueError,
     r"rmsnorm_backward: x must be a contiguous CUDA tensor"),
    (_bad(1, "x"), TypeError, r"rmsnorm_backward: x must be a torch tensor, got str"),
    (_bad(2, tensor((999,), at=10)), ValueError,
     r"rmsnorm_backward: weight has shape \(999,\); it must be \(1000,\)"),
    (_bad(2, tensor((1000, 1), at=10)), ValueError,
     r"rmsnorm_backward: weight has shape \(1000, 1\); it must be \(1000,\)"),
    (_bad(2, tensor((1000,), at=10, device=1)), ValueError,
     r"rmsnorm_backward: weight is on cuda:1; it must be on cuda:0"),
    (_bad(2, tensor((1000,), at=10, contiguous=False)), ValueError,
     r"rmsnorm_backward: weight must be a contiguous CUDA tensor"),
    (_bad(3, tensor((3,), "float32", 11)), ValueError,
     r"rmsnorm_backward: rstd has shape \(3,\); it must be \(4,\)"),
    (_bad(3, tensor((4,), at=11)), TypeError,
     r"rmsnorm_backward: rstd has dtype torch.bfloat16; it must be one of torch.float32"),
    (_bad(3, tensor((4,), "float32", 11, device=1)), ValueError,
     r"rmsnorm_backward: rstd is on cuda:1; it must be on cuda:0"),
    (_bad(3, tensor((4,), "float32", 11, contiguous=False)), ValueError,
     r"rmsnorm_backward: rstd must be a contiguous CUDA tensor"),
    (_bad(3, None), TypeError, r"rmsnorm_backward: rstd must be a torch tensor, got NoneType"),
])
def test_every_backward_rule_is_checked_after_a_plan_exists(gpu, args, error, message):
    rmsnorm.rmsnorm_backward(*backward_arguments((4, 1000)))
    with pytest.raises(error, match=message):
        rmsnorm.rmsnorm_backward(*args)
    assert len(gpu.calls) == 2


def test_backward_plans_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(rmsnorm, "MAX_PLANS", 2)
    for i, shape in enumerate(((4, 1000), (6, 256), (2, 3, 96), (4, 1000))):
        rmsnorm.rmsnorm_backward(*backward_arguments(shape, at=4 * i))
        assert len(rmsnorm._BACKWARD) <= 2
    assert len(gpu.calls) == 8


def test_a_planned_launch_skips_the_fast_paths_key_only_while_nothing_it_reads_changed(
        gpu, monkeypatch):
    monkeypatch.delenv("LAYOUTKIT_DEBUG", raising=False)
    x, w = tensor((4, 1000)), tensor((1000,), at=1)
    rmsnorm.rmsnorm(x, w)                           # the plan, launched through kernel[grid]
    ((launch, *_),) = rmsnorm._FORWARD.values()
    through = record_calls(monkeypatch, launch, "launch")
    other = tensor((4, 1000), at=5)
    rmsnorm.rmsnorm(other, tensor((1000,), at=6))   # aligned: the configured launcher itself
    assert through == [] and gpu.calls[-1].spec is gpu.calls[0].spec
    assert struct.unpack_from("<Q", gpu.calls[-1].packed)[0] == other.ptr
    odd = Tensor(BASE + 5 * MB + 8, "bfloat16", (4, 1000))    # 8-byte aligned only
    rmsnorm.rmsnorm(odd, w)                         # kernel[grid]: the unaligned specialization
    assert len(through) == 1 and gpu.calls[-1].spec is not gpu.calls[0].spec
    assert struct.unpack_from("<Q", gpu.calls[-1].packed)[0] == odd.ptr
    rmsnorm.rmsnorm(x, w)
    assert len(through) == 1 and gpu.calls[-1].spec is gpu.calls[0].spec
    launch.debug = b"1"                             # LAYOUTKIT_DEBUG other than it saw
    rmsnorm.rmsnorm(x, w)
    assert len(through) == 2 and len(gpu.calls) == 5


def test_a_planned_launch_of_a_kernel_with_tensor_parameters_stays_on_kernel_grid(gpu):
    @lk.kernel(num_warps=1)
    def copy_rows(x: lk.Tensor[lk.f32, 1], y: lk.Pointer[lk.f32], N: lk.constexpr):
        pass
    assert rw.PlannedLaunch(copy_rows, 1, (4,)).direct is False
