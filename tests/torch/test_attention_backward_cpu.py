"""Autograd through torch.ops.layoutkit.flash_attention on CPU tensors: the backward op runs
recipes/flash_attention_backward.py's steps with its kernel in the CPU interpreter; dq, dk, dv
against torch autograd in float64 on the same bf16 inputs (GQA, causal, seqlen_q != seqlen_k,
ragged), and torch.library.opcheck of both ops with gradients."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="layoutkit.torch needs torch (the [torch] extra)")

import layoutkit.torch as lkt  # noqa: E402
from recipes.flash_attention_backward import reference_torch  # noqa: E402


def test_gradients_match_float64_autograd():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=gen).to(torch.bfloat16).requires_grad_()
               for shape in ((1, 20, 2, 64), (1, 33, 1, 64), (1, 33, 1, 64)))
    grad_o = torch.randn(1, 20, 2, 64, generator=gen).to(torch.bfloat16)
    o, _ = lkt.flash_attention(q, k, v, True)
    got = torch.autograd.grad(o, (q, k, v), grad_o)
    for name, g, want in zip("qkv", got, reference_torch(q, k, v, grad_o, True, 64 ** -0.5)):
        err = ((g.double() - want).abs().max() / want.abs().max()).item()
        assert err < 2 ** -6, f"d{name} off by {err:.3g} of its max"



def test_opcheck_with_gradients():
    """torch.library.opcheck of the forward op on inputs that need grad (its autograd
    registration runs the backward op) and of the backward op itself. One head: opcheck runs
    each op's kernels a dozen times; GQA's real gradients are checked by
    test_gradients_match_float64_autograd, its fake shapes by tests/torch/test_fake.py."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(*shape, generator=gen).to(torch.bfloat16).requires_grad_()
               for shape in ((1, 8, 1, 64), (1, 12, 1, 64), (1, 12, 1, 64)))
    ops = torch.ops.layoutkit
    result = torch.library.opcheck(ops.flash_attention.default, (q, k, v, True, None, "bshd"))
    assert set(result.values()) == {"SUCCESS"}, result
    o, lse = ops.flash_attention(q.detach(), k.detach(), v.detach(), True, None, "bshd")
    grad_o = torch.randn(o.shape, generator=gen).to(torch.bfloat16)
    result = torch.library.opcheck(ops.flash_attention_backward.default,
                                   (grad_o, q.detach(), k.detach(), v.detach(), o, lse, True,
                                    None, "bshd"))
    assert set(result.values()) == {"SUCCESS"}, result


def test_very_negative_logits_stay_finite():
    """Every score near -128 (lse < -88): the zero rows past seqlen_k in the last key block
    would give P = exp(-lse) = inf without the kernel's clamp, and 0 * inf = NaN in dq."""
    gen = torch.Generator().manual_seed(2)
    noise = [torch.randn(1, n, 1, 64, generator=gen) for n in (8, 12, 12)]
    q, k = (4.0 + 0.1 * noise[0]), (-4.0 + noise[1])       # scores -128 +- a few
    q, k, v = (x.to(torch.bfloat16).requires_grad_() for x in (q, k, noise[2]))
    grad_o = torch.randn(1, 8, 1, 64, generator=gen).to(torch.bfloat16)
    o, lse = lkt.flash_attention(q, k, v)
    assert lse.max().item() < -88
    got = torch.autograd.grad(o, (q, k, v), grad_o)
    for name, g, want in zip("qkv", got, reference_torch(q, k, v, grad_o, False, 64 ** -0.5)):
        assert torch.isfinite(g).all(), f"d{name} is not finite"
        err = ((g.double() - want).abs().max() / want.abs().max()).item()
        assert err < 2 ** -6, f"d{name} off by {err:.3g} of its max"
