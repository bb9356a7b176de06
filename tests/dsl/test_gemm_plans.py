"""gemm()'s plans (recipes/_gemm_plans.py) on the CPU: a call of a signature that launched
before skips check_inputs and launches what the checked path launches for the same tensors;
every per-call fact that differs (alignment, overlap, devices, scalar types) goes through the
checked path and its errors. CPU tensors pose as CUDA tensors (device `x._dev`, 0 unless set)
and `kernel[grid](...)` records the kernel, grid and bound arguments instead of launching.
"""
import pytest

torch = pytest.importorskip("torch")

import layoutkit.dsl as lk  # noqa: E402
from layoutkit.dsl.core.arguments import bind  # noqa: E402
from recipes import _gemm_plans as plans  # noqa: E402
from recipes import gemm_hopper as gh  # noqa: E402
from recipes._gemm_kernel import Config  # noqa: E402

BF16 = torch.bfloat16


def _describe(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", v.data_ptr(), tuple(v.shape), v.stride(), v.dtype)
    return v


@pytest.fixture
def gpu(monkeypatch):
    """The recorded launches [(kernel name, grid, bound arguments)], and the checked calls."""
    launches, checked = [], []

    def device(x):
        return x.__dict__.get("_dev", 0)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda x: True))
    monkeypatch.setattr(torch.Tensor, "get_device", device)
    monkeypatch.setattr(torch.Tensor, "device",
                        property(lambda x: torch.device("cuda", device(x))))
    empty = torch.empty
    monkeypatch.setattr(torch, "empty",
                        lambda *shape, device=None, dtype=None: empty(*shape, dtype=dtype))

    def record(kernel, grid):
        def run(*args, **kwargs):
            values = bind(kernel.params, args, kwargs, kernel.name)
            launches.append((kernel.name, grid, tuple(map(_describe, values))))
        return run
    monkeypatch.setattr(lk.Kernel, "__getitem__", record)
    monkeypatch.setattr(gh, "_sm_count", lambda device: 132)
    monkeypatch.setattr(gh, "_device_name", lambda device: "fake H200")
    monkeypatch.setattr(gh, "_resident_units", lambda device, cfg, major: 132 // cfg.CLUSTER)
    monkeypatch.setattr(plans, "_PLANS", {})
    count_checked_calls(monkeypatch, gh, checked)
    return launches, checked


def count_checked_calls(monkeypatch, recipe, checked: list) -> None:
    """recipe.check_inputs, appending its first argument's shape to `checked` at each call."""
    real = recipe.check_inputs

    def spy(*args, **kwargs):
        checked.append(args[0].shape)
        return real(*args, **kwargs)
    monkeypatch.setattr(recipe, "check_inputs", spy)


def operands(m, n, k, kmajor=False, epilogue=False):
    """Fresh (a, b, out, keywords) of one signature: new memory at every call."""
    a = torch.randn(m, k).to(BF16)
    b = torch.randn(n, k).to(BF16).t() if kmajor else torch.randn(k, n).to(BF16)
    out = torch.zeros(m, n, dtype=BF16)
    kwargs = {}
    if epilogue:
        kwargs = dict(bias=torch.randn(n, dtype=torch.float32), activation="relu", residual=out,
                      alpha=2.0, beta=0.5)
    return a, b, out, kwargs


CASES = {"N-major": dict(m=256, n=512, k=128),
         "K-major": dict(m=256, n=512, k=128, kmajor=True),
         "small M": dict(m=16, n=4096, k=4096), "epilogue": dict(m=256, n=512, k=192, epilogue=True)}
CONFIGS = {"shipped": None, "split-K": Config(BM=128, BN=128, STAGES=4, CLUSTER=1, SPLIT_K=2),
           "64-row": Config(BM=64, BN=128, STAGES=4, CLUSTER=1)}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_repeated_signature_launches_what_the_checked_path_launches(gpu, case, config):
    launches, checked = gpu
    a, b, out, kwargs = operands(**case)
    assert gh.gemm(a, b, out, config, **kwargs) is out and len(checked) == 1
    a, b, out, kwargs = operands(**case)                  # the same signature, new memory
    first = len(launches)
    assert gh.gemm(a, b, out, config, **kwargs) is out
    assert len(checked) == 1                              # the plan's launch
    names = {x.data_ptr(): name for name, x in [("a", a), ("b", b), ("out", out),
                                                 *kwargs.items()] if isinstance(x, torch.Tensor)}
    by_plan = named(launches[first:], names)
    plans._PLANS.clear()
    second = len(launches)
    gh.gemm(a, b, out, config, **kwargs)
    assert len(checked) == 2 and named(launches[second:], names) == by_plan and by_plan


def named(launches, names):
    """The launches with each tensor's address as the argument it is (or "new": a workspace)."""
    return [(kernel, grid, tuple((v[0], names.get(v[1], "new"), *v[2:]) if type(v) is tuple
                                 else v for v in values)) for kernel, grid, values in launches]


def test_an_allocated_out_is_a_new_tensor_each_call(gpu):
    launches, checked = gpu
    a, b, _, _ = operands(256, 512, 128)
    first, second = gh.gemm(a, b), gh.gemm(a, b)
    assert len(checked) == 1 and first is not second
    assert (second.shape, second.dtype) == ((256, 512), BF16)
    assert launches[-1][2][2] == _describe(second)            # c is the new out
    assert gh.gemm(a, b, out_dtype=torch.float32).dtype == torch.float32 and len(checked) == 2


def test_a_misaligned_operand_takes_the_checked_path_and_its_copy(gpu):
    launches, checked = gpu
    a, b, out, _ = operands(256, 512, 128)
    gh.gemm(a, b, out)
    shifted = torch.zeros(256 * 128 + 8, dtype=BF16)[1:1 + 256 * 128].view(256, 128)
    gh.gemm(shifted, b, out)
    assert len(checked) == 2                   # a's address is 2 bytes past 16: TMA copies it
    launched_a = launches[-1][2][0]
    assert launched_a[1] != shifted.data_ptr() and launched_a[2] == (256, 128)


def test_out_overlapping_an_input_is_refused_on_a_repeated_signature(gpu):
    a, b, out, _ = operands(128, 128, 128)
    gh.gemm(a, b, out)
    with pytest.raises(ValueError, match="out .* overlaps a"):
        gh.gemm(a, b, a)                       # a as out: same shape, strides, dtype
    buffer = torch.zeros(256, 128, dtype=BF16)
    gh.gemm(buffer[:128], b, buffer[128:])     # adjacent halves: no overlap, the plan
    with pytest.raises(ValueError, match="out .* overlaps b"):
        gh.gemm(a, buffer[64:192], buffer[:128])
    _, checked = gpu
    assert len(checked) == 3


def test_a_residual_that_is_out_itself_or_overlaps_it(gpu):
    _, checked = gpu
    a, b, out, _ = operands(128, 256, 64)
    gh.gemm(a, b, out, residual=out)
    gh.gemm(a, b, out, residual=out)
    assert len(checked) == 1
    other = torch.zeros(128, 256, dtype=BF16)
    gh.gemm(a, b, out, residual=other)         # its own memory: the plan
    assert len(checked) == 1
    wide = torch.zeros(129, 256, dtype=BF16)
    with pytest.raises(ValueError, match="out .* overlaps residual"):
        gh.gemm(a, b, wide[1:], residual=wide[:128])


def test_tensors_on_another_device_are_refused_on_a_repeated_signature(gpu):
    a, b, out, _ = operands(128, 128, 128)
    gh.gemm(a, b, out)
    a2, b2, out2, _ = operands(128, 128, 128)
    b2._dev = 1
    with pytest.raises(ValueError, match="b is on cuda:1 and a on cuda:0"):
        gh.gemm(a2, b2, out2)
    a2._dev = out2._dev = 1
    gh.gemm(a2, b2, out2)                      # all on device 1: its own plan
    gh.gemm(a2, b2, out2)
    _, checked = gpu
    assert len(checked) == 3 and len(plans._PLANS) == 2


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(alpha=True), TypeError, "alpha is a Python int or float"),
    (dict(beta=torch.tensor(1.0)), TypeError, "beta is a Python int or float"),
    (dict(config=Config(BN=100)), ValueError, "BN = 100"),
    (dict(activation="tanh"), ValueError, "activation is None or one of"),
])
def test_arguments_check_inputs_refuses_still_raise_after_a_plan(gpu, kwargs, error, message):
    a, b, out, _ = operands(128, 128, 128)
    gh.gemm(a, b, out)
    gh.gemm(a, b, out, alpha=2.0)
    with pytest.raises(error, match=message):
        gh.gemm(a, b, out, **kwargs)


def test_a_subclass_or_a_view_of_another_layout_takes_the_checked_path(gpu):
    _, checked = gpu
    a, b, out, _ = operands(128, 128, 128)
    gh.gemm(a, b, out)

    class Sub(torch.Tensor):
        pass
    gh.gemm(a.as_subclass(Sub), b, out)
    gh.gemm(a, b, torch.zeros(128, 256, dtype=BF16)[:, :128])      # out's row stride 256
    assert len(checked) == 3


def test_plans_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(plans, "MAX_PLANS", 4)
    for m in range(8, 80, 8):
        a, b, out, _ = operands(m, 64, 64)
        gh.gemm(a, b, out)
        assert len(plans._PLANS) <= 4


# ---- gemm_fp8's plans (the same module) -----------------------------------------------------
from recipes import gemm_fp8 as g8  # noqa: E402

E4M3 = torch.float8_e4m3fn


@pytest.fixture
def gpu8(gpu, monkeypatch):
    """gpu, for gemm_fp8: its SM count and resident units faked, its checked calls recorded."""
    launches, checked = gpu
    monkeypatch.setattr(g8, "_sm_count", lambda device: 132)
    monkeypatch.setattr(g8, "_resident_units", lambda device, cfg, types: 132 // cfg.CLUSTER)
    monkeypatch.setattr(g8, "_ONES", {})
    count_checked_calls(monkeypatch, g8, checked)
    return launches, checked


def operands8(m, n, k, rowwise):
    """Fresh fp8 (a, b (column-major), scale_a, scale_b, out) of one signature."""
    a = torch.randn(m, k).to(E4M3)
    b = torch.randn(n, k).to(E4M3).t()
    scales = (torch.rand(m, 1), torch.rand(1, n)) if rowwise else (torch.rand(()),
                                                                   torch.rand(()))
    return a, b, *scales, torch.zeros(m, n, dtype=BF16)


FP8_CASES = {"per-tensor": dict(m=256, n=512, k=256, rowwise=False),
             "per-row, small M": dict(m=16, n=4096, k=4096, rowwise=True)}
FP8_CONFIGS = {"shipped": None,
               "split-K": g8.Config(BM=64, BN=128, STAGES=4, CLUSTER=1, SPLIT_K=2)}


@pytest.mark.parametrize("config", FP8_CONFIGS.values(), ids=FP8_CONFIGS.keys())
@pytest.mark.parametrize("case", FP8_CASES.values(), ids=FP8_CASES.keys())
def test_fp8_repeated_signature_launches_what_the_checked_path_launches(gpu8, case, config):
    launches, checked = gpu8
    a, b, sa, sb, out = operands8(**case)
    assert g8.gemm_fp8(a, b, sa, sb, out, config=config) is out and len(checked) == 1
    a, b, sa, sb, out = operands8(**case)             # the same signature, new memory
    first = len(launches)
    assert g8.gemm_fp8(a, b, sa, sb, out, config=config) is out
    assert len(checked) == 1                          # the plan's launch
    names = {x.data_ptr(): name for name, x in [("a", a), ("b", b), ("scale_a", sa),
                                                 ("scale_b", sb), ("out", out)]}
    by_plan = named(launches[first:], names)
    plans._PLANS.clear()
    second = len(launches)
    g8.gemm_fp8(a, b, sa, sb, out, config=config)
    assert len(checked) == 2 and named(launches[second:], names) == by_plan and by_plan
    assert len(by_plan) == (2 if config is not None else 1)   # split-K; M = 16: the swapped
    assert config is not None or case["m"] != 16 or by_plan[0][0] == "gemm_fp8_swap_bm64"


def test_fp8_per_call_facts_take_the_checked_path(gpu8):
    """An allocated out is its own signature; out overlapping a scale, and a scale on another
    device, reach check_inputs' errors after a plan of their signature."""
    _, checked = gpu8
    a, b, sa, _, _ = operands8(128, 256, 128, rowwise=True)
    out = torch.zeros(128, 256)                       # f32
    g8.gemm_fp8(a, b, sa, torch.rand(1, 256), out)
    g8.gemm_fp8(a, b, sa, torch.rand(1, 256), out)    # the plan
    assert len(checked) == 1
    g8.gemm_fp8(a, b, sa, torch.rand(1, 256))         # out allocated: its own signature
    g8.gemm_fp8(a, b, sa, torch.rand(1, 256))
    assert len(checked) == 2
    inside = out.view(-1)[:256].view(1, 256)          # scale_b in out's memory
    with pytest.raises(ValueError, match="out .* overlaps scale_b"):
        g8.gemm_fp8(a, b, sa, inside, out)
    elsewhere = torch.rand(1, 256)
    elsewhere._dev = 1
    with pytest.raises(ValueError, match="scale_b is on cuda:1 and a on cuda:0"):
        g8.gemm_fp8(a, b, sa, elsewhere, out)
    assert len(checked) == 4
