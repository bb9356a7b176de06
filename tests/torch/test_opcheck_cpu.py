"""torch.library.opcheck on CPU tensors, where every op runs its kernel in layoutkit's CPU
interpreter: schema (no mutation, no aliasing), autograd registration, fake tensors against the
real outputs (shapes, dtypes, strides) and AOT dispatch with dynamic shapes (the backward too,
where inputs need grad). Tiny shapes: each op runs its real kernel several times. Gradients
against torch's autograd in float64. The row ops' backward kernels are recipes of their own
(recipes/softmax_backward.py, layernorm_backward.py, rmsnorm.py); a checkout without one skips
its tests, saying so."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="layoutkit.torch needs torch (the [torch] extra)")

import layoutkit.torch as lkt  # noqa: E402

ops = torch.ops.layoutkit
BF16 = torch.bfloat16


def bf16(*shape, seed: int, scale: float = 1.0, grad: bool = False):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(BF16).requires_grad_(grad)


def backward_recipe(name: str):
    """recipes.<name> (the backward kernel), or skip saying which file is missing."""
    return pytest.importorskip(f"recipes.{name}",
                               reason=f"this checkout has no recipes/{name}.py (the backward)")


def opcheck(op, args):
    result = torch.library.opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_opcheck_gemm_with_gradients():
    opcheck(ops.gemm.default, (bf16(16, 24, seed=0, grad=True), bf16(24, 8, seed=1, grad=True)))


def test_opcheck_gemm_of_a_k_major_b():
    opcheck(ops.gemm.default, (bf16(8, 16, seed=2), bf16(8, 16, seed=3).t()))


def test_opcheck_transpose_with_gradients():
    opcheck(ops.transpose.default, (bf16(33, 20, seed=4, grad=True),))


def test_opcheck_softmax_of_a_3d_x():
    opcheck(ops.softmax.default, (bf16(2, 3, 100, seed=5, scale=4.0),))


def test_opcheck_softmax_with_gradients():
    backward_recipe("softmax_backward")
    opcheck(ops.softmax.default, (bf16(3, 40, seed=19, scale=4.0, grad=True),))


def test_opcheck_layernorm():
    opcheck(ops.layernorm.default, (bf16(4, 64, seed=6), bf16(64, seed=7), bf16(64, seed=8),
                                    1e-5))


def test_opcheck_layernorm_with_gradients():
    backward_recipe("layernorm_backward")
    opcheck(ops.layernorm.default, (bf16(3, 40, seed=20, scale=3.0, grad=True),
                                    bf16(40, seed=21, grad=True), bf16(40, seed=22, grad=True),
                                    1e-5))


@pytest.mark.parametrize("weight", [False, True])
def test_opcheck_rmsnorm_with_gradients(weight):
    backward_recipe("rmsnorm")
    w = bf16(40, seed=24, grad=True) if weight else None
    opcheck(ops.rmsnorm.default, (bf16(3, 40, seed=23, grad=True), w, 1e-6))


def test_opcheck_flash_attention_bhsd_causal_gqa():
    # causal: the two-consumer kernel, two thirds of the non-causal three-consumer kernel's
    # threads to interpret (the op's wrapper is the same for both; the non-causal kernel's
    # results are tests/dsl/test_recipe_flash_attention.py's). The "bshd" layout's opcheck is
    # tests/torch/test_attention_backward_cpu.py's (with gradients)
    q = bf16(1, 2, 20, 64, seed=9)
    k, v = bf16(1, 1, 12, 64, seed=10), bf16(1, 1, 12, 64, seed=11)
    opcheck(ops.flash_attention.default, (q, k, v, True, 0.1, "bhsd"))


def test_gemm_gradients_match_float64_autograd():
    a, b = bf16(20, 48, seed=14, grad=True), bf16(48, 12, seed=15, grad=True)
    grad_out = bf16(20, 12, seed=16)
    got = torch.autograd.grad(lkt.gemm(a, b), (a, b), grad_out)
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    want = torch.autograd.grad(a64 @ b64, (a64, b64), grad_out.double())
    for g, w in zip(got, want):
        assert g.dtype == BF16 and g.shape == w.shape
        assert ((g.double() - w).norm() / w.norm()).item() < 2 ** -7


def test_transpose_gradient_is_exact():
    x = bf16(17, 9, seed=17, grad=True)
    grad_out = bf16(9, 17, seed=18)
    (got,) = torch.autograd.grad(lkt.transpose(x), (x,), grad_out)
    assert torch.equal(got, grad_out.t())


def _float64_grads(fn, inputs, grad_out):
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, grad_out.double())


def _close(got, want, bound=2 ** -7):
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert ((g.double() - w).norm() / w.norm()).item() < bound


def test_row_op_gradients_match_float64_autograd():
    """softmax, layernorm and rmsnorm (with an f32 weight) on rows far from zero mean."""
    backward_recipe("softmax_backward")
    backward_recipe("layernorm_backward")
    backward_recipe("rmsnorm")
    x = (bf16(5, 100, seed=25, scale=3.0).float() + 4.0).to(BF16).requires_grad_()
    w, b = bf16(100, seed=26, grad=True), bf16(100, seed=27, grad=True)
    w32 = torch.randn(100, generator=torch.Generator().manual_seed(28)).requires_grad_()
    dy = bf16(5, 100, seed=29)
    _close(torch.autograd.grad(lkt.softmax(x), (x,), dy),
           _float64_grads(lambda x: torch.softmax(x, -1), (x,), dy))
    _close(torch.autograd.grad(lkt.layernorm(x, w, b), (x, w, b), dy),
           _float64_grads(lambda x, w, b: torch.nn.functional.layer_norm(x, (100,), w, b),
                          (x, w, b), dy))
    got = torch.autograd.grad(lkt.rmsnorm(x, w32), (x, w32), dy)
    assert got[1].dtype == torch.float32
    _close(got, _float64_grads(lambda x, w: torch.nn.functional.rms_norm(x, (100,), w, 1e-6),
                               (x, w32), dy))

