"""How `import layoutkit.torch` registers the operators: each one's schema, idempotence (a second
registration, a fresh import of the package in the same process), the devices it runs on, and
which ops carry autograd."""
from __future__ import annotations

import importlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="layoutkit.torch needs torch (the [torch] extra)")

import layoutkit.torch as lkt  # noqa: E402
from layoutkit.torch.interpreted import CPU_ELEMENT_LIMIT  # noqa: E402

SCHEMAS = {
    "gemm": "layoutkit::gemm(Tensor a, Tensor b, Tensor? bias=None, str? activation=None, "
            "Tensor? residual=None, float alpha=1., float beta=0., Tensor? c=None, "
            "ScalarType? out_dtype=None) -> Tensor",
    "gemm_grouped": "layoutkit::gemm_grouped(Tensor a, Tensor b, Tensor offsets) -> Tensor",
    "flash_attention": "layoutkit::flash_attention(Tensor q, Tensor k, Tensor v, "
                       "bool causal=False, float? softmax_scale=None, str layout=\"bshd\") -> "
                       "(Tensor, Tensor)",
    "flash_attention_backward": "layoutkit::flash_attention_backward(Tensor grad_o, Tensor q, "
                                "Tensor k, Tensor v, Tensor o, Tensor lse, bool causal, "
                                "float? softmax_scale, str layout) -> (Tensor, Tensor, Tensor)",
    "softmax": "layoutkit::softmax(Tensor x) -> Tensor",
    "softmax_backward": "layoutkit::softmax_backward(Tensor grad_y, Tensor y) -> Tensor",
    "layernorm": "layoutkit::layernorm(Tensor x, Tensor weight, Tensor bias, float eps=1e-05) "
                 "-> Tensor",
    "layernorm_backward": "layoutkit::layernorm_backward(Tensor grad_y, Tensor x, "
                          "Tensor weight, float eps) -> (Tensor, Tensor, Tensor)",
    "rmsnorm": "layoutkit::rmsnorm(Tensor x, Tensor? weight, float eps=1e-06) -> "
               "(Tensor, Tensor)",
    "rmsnorm_backward": "layoutkit::rmsnorm_backward(Tensor grad_y, Tensor x, Tensor? weight, "
                        "Tensor rstd) -> (Tensor, Tensor)",
    "transpose": "layoutkit::transpose(Tensor x) -> Tensor",
}


def test_every_op_is_registered_with_its_schema():
    assert {spec.name for spec in lkt.OPS} == set(SCHEMAS)
    for name, schema in SCHEMAS.items():
        assert getattr(torch.ops.layoutkit, name).default._schema == torch._C.parse_schema(schema)


@pytest.mark.parametrize("key", ["CPU", "CUDA", "Meta"])
def test_every_op_has_a_cpu_a_cuda_and_a_fake_kernel(key):
    for spec in lkt.OPS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(spec.qualname, key), spec.name


def test_registering_again_is_a_no_op():
    before = [getattr(torch.ops.layoutkit, spec.name).default for spec in lkt.OPS]
    lkt.register()
    assert [getattr(torch.ops.layoutkit, spec.name).default for spec in lkt.OPS] == before


def test_a_fresh_import_in_the_same_process_reuses_the_registered_ops(monkeypatch):
    """Dropping the package from sys.modules and importing it again (as importlib.reload or a
    test harness may) finds the ops already defined and leaves them working. In this process,
    whose first import defined them: the test's end puts the first import's modules back."""
    import layoutkit
    for name in [m for m in sys.modules if m.startswith("layoutkit.torch")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(layoutkit, "torch", lkt)         # the import below rebinds it
    again = importlib.import_module("layoutkit.torch")
    assert again is not lkt
    again.register()
    x = torch.arange(12, dtype=torch.float32).view(3, 4)
    assert torch.equal(again.transpose(x), x.t())


def test_differentiable_ops_record_a_backward_and_lse_is_not_differentiable():
    a = torch.zeros(4, 8, dtype=torch.bfloat16, requires_grad=True)
    b = torch.zeros(8, 2, dtype=torch.bfloat16, requires_grad=True)
    assert lkt.gemm(a, b).grad_fn is not None
    assert lkt.transpose(a).grad_fn is not None
    assert lkt.softmax(a).grad_fn is not None
    assert lkt.layernorm(a, b[:, 0], b[:, 1]).grad_fn is not None
    y, rstd = torch.ops.layoutkit.rmsnorm(a, b[:, 0], 1e-6)
    assert y.requires_grad and not rstd.requires_grad
    q = torch.zeros(1, 3, 1, 64, dtype=torch.bfloat16, requires_grad=True)
    o, lse = lkt.flash_attention(q, q, q)
    assert o.requires_grad and not lse.requires_grad


def test_cpu_tensors_past_the_interpreter_limit_are_refused_before_running():
    side = int(CPU_ELEMENT_LIMIT ** 0.5) + 1
    x = torch.zeros(side, side, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as caught:
        lkt.softmax(x)
    assert str(caught.value) == (
        f"layoutkit.softmax: x is a CPU tensor of shape ({side}, {side}) ({side * side} "
        f"elements); on CPU tensors the kernel runs in layoutkit's CPU interpreter, which takes "
        f"at most {CPU_ELEMENT_LIMIT} elements per tensor (it is for tests): move the tensors "
        "to a CUDA device")


def test_a_missing_backward_recipe_is_named():
    """softmax's backward kernel is recipes/softmax_backward.py; a checkout without it says so
    when a backward pass reaches it."""
    from layoutkit.torch.registry import recipe
    with pytest.raises(NotImplementedError) as caught:
        recipe("no_such_backward", "softmax_backward")
    assert str(caught.value) == ("layoutkit.softmax_backward: this checkout has no "
                                 "recipes/no_such_backward.py, the kernel it runs")
