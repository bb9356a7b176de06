"""torch.library.opcheck on CPU tensors, where every op runs its kernel in layoutkit's CPU
interpreter: schema (no mutation, no aliasing), autograd registration, fake tensors against the
real outputs (shapes, dtypes, strides) and AOT dispatch with dynamic shapes (the backward too,
where inputs need grad). Tiny shapes: each op runs its real kernel several times. Gradients
against torch's autograd in float64."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="layoutkit.torch needs torch (the [torch] extra)")

import layoutkit.torch as lkt  # noqa: E402

ops = torch.ops.layoutkit
BF16 = torch.bfloat16


def bf16(*shape, seed: int, scale: float = 1.0, grad: bool = False):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(BF16).requires_grad_(grad)


def opcheck(op, args):
    result = torch.library.opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_opcheck_gemm_with_gradients():
    opcheck(ops.gemm.default, (bf16(16, 24, seed=0, grad=True), bf16(24, 8, seed=1, grad=True)))


def test_opcheck_gemm_of_a_k_major_b():
    opcheck(ops.gemm.default, (bf16(8, 16, seed=2), bf16(8, 16, seed=3).t()))


def test_opcheck_transpose_with_gradients():
    opcheck(ops.transpose.default, (bf16(33, 20, seed=4, grad=True),))


@pytest.mark.parametrize("shape", [(4, 64), (2, 3, 100)])
def test_opcheck_softmax(shape):
    opcheck(ops.softmax.default, (bf16(*shape, seed=5, scale=4.0),))


def test_opcheck_layernorm():
    opcheck(ops.layernorm.default, (bf16(4, 64, seed=6), bf16(64, seed=7), bf16(64, seed=8),
                                    1e-5))


@pytest.mark.parametrize("causal", [False, True])
def test_opcheck_flash_attention(causal):
    q, k, v = bf16(1, 20, 2, 64, seed=9), bf16(1, 12, 1, 64, seed=10), bf16(1, 12, 1, 64, seed=11)
    opcheck(ops.flash_attention.default, (q, k, v, causal, None, "bshd"))


def test_opcheck_flash_attention_bhsd():
    q, k = bf16(1, 2, 16, 64, seed=12), bf16(1, 2, 16, 64, seed=13)
    opcheck(ops.flash_attention.default, (q, k, k, False, 0.1, "bhsd"))


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
