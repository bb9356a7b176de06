"""torch.ops.layoutkit.gemm(a, b, bias, activation, residual, alpha, beta, c, out_dtype):
D = activation(alpha * (a @ b) + beta * c + bias) + residual for bf16 a (M x K) and b (K x N)
of any strides, by recipes/gemm_hopper.py (f32 accumulation and epilogue, a new contiguous
M x N result of out_dtype, bf16 by default); c (C) is given exactly when beta != 0 (copied into
the result, which the recipe reads as C). Differentiable without an activation: grad_a =
alpha * grad @ b^T and grad_b = alpha * a^T @ grad through this op again, grad_bias the column
sums, grad_residual = grad, grad_c = beta * grad.

`torch.nn.functional.linear(x, w)` is gemm(x, w.t()): w.t() is the K-major operand the kernel
reads in place (no copy); operands it cannot read by TMA (rows not 16-byte aligned, a
transposed a) are copied by the recipe first.
"""
from __future__ import annotations

import torch

from .checks import check_bf16, check_same
from .interpreted import refuse_large, run_launches
from .registry import OpSpec, recipe


SCHEMA = ("(Tensor a, Tensor b, Tensor? bias=None, str? activation=None, "
          "Tensor? residual=None, float alpha=1.0, float beta=0.0, Tensor? c=None, "
          "ScalarType? out_dtype=None) -> Tensor")


def gemm_outputs(a, b, bias=None, activation=None, residual=None, alpha=1.0, beta=0.0, c=None,
                 out_dtype=None):
    """The result's empty tensor (M x N of out_dtype, bf16 by default) after the recipe's
    checks of every argument; C (`c`, (M, N) bf16 or f32) is given exactly when beta != 0."""
    check_bf16("gemm", a=a, b=b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"layoutkit.gemm: a is M x K and b is K x N, got a of shape "
                         f"{tuple(a.shape)} and b of shape {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"layoutkit.gemm: a is on {a.device} and b on {b.device}; they must "
                         "be on one device")
    if (c is None) != (beta == 0):
        raise ValueError(f"layoutkit.gemm: c (C of D = alpha * (a @ b) + beta * C) is given "
                         f"exactly when beta != 0, got beta = {beta!r} and "
                         f"{'no c' if c is None else 'a c'}")
    out = torch.empty(a.shape[0], b.shape[1], dtype=out_dtype or torch.bfloat16,
                      device=a.device)
    if c is not None:
        check_same("gemm", "the result's shape on", "a", out, c=c)
        if c.dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"layoutkit.gemm: c has dtype {c.dtype}; the kernel reads "
                            "torch.bfloat16 or torch.float32")
    g = recipe("gemm_hopper", "gemm")
    # the recipe's own checks, on any one device (fake, CPU interpreter, CUDA), of all but
    # out (this new tensor) and beta (C is c, checked above; the schema makes beta a float)
    g.check_inputs(a, b, None, None, bias, activation, residual, alpha, 0.0, out_dtype,
                   cuda=False)
    return out


def _with_c(out, c):
    """out holding C (for beta != 0: the recipe reads C from out, then overwrites it)."""
    if c is not None:
        out.copy_(c)
    return out


def gemm_cuda(a, b, bias=None, activation=None, residual=None, alpha=1.0, beta=0.0, c=None,
              out_dtype=None):
    out = _with_c(gemm_outputs(a, b, bias, activation, residual, alpha, beta, c, out_dtype), c)
    return recipe("gemm_hopper", "gemm").gemm(a, b, out=out, bias=bias, activation=activation,
                                              residual=residual, alpha=alpha, beta=beta)


def gemm_cpu(a, b, bias=None, activation=None, residual=None, alpha=1.0, beta=0.0, c=None,
             out_dtype=None):
    """gemm()'s host steps on CPU tensors (TMA-ready operands, the config for an H200's 132
    SMs, the recipe's launches), then its kernels in the interpreter, each persistent grid one
    scheduling unit (one CTA or cluster, taking every tile in turn)."""
    out = _with_c(gemm_outputs(a, b, bias, activation, residual, alpha, beta, c, out_dtype), c)
    refuse_large("gemm", a=a, b=b)
    (m, k), n = a.shape, b.shape[1]
    if m == 0 or n == 0:
        return out
    g = recipe("gemm_hopper", "gemm")
    epilogue = g.epilogue_of(out, bias, activation, residual, alpha, beta)
    if k == 0 and not epilogue:
        return out.zero_()
    steps, result = g.launches(a, b, out, None, epilogue, bias, residual, alpha, beta, 132,
                               lambda cfg, major: 1)
    run_launches(steps)
    if result.data_ptr() != out.data_ptr():
        out.copy_(result)
    return out


def gemm_setup_context(ctx, inputs, output):
    a, b, bias, activation, residual, alpha, beta, c, out_dtype = inputs
    ctx.save_for_backward(a, b)
    ctx.activation, ctx.alpha, ctx.beta = activation, alpha, beta
    ctx.types = tuple(None if x is None else x.dtype for x in (bias, residual, c))


def gemm_backward(ctx, grad):
    """Gradients of D = alpha * (a @ b) + beta * c + bias + residual (no activation: its
    derivative needs the pre-activation values, which the op does not keep)."""
    if ctx.activation is not None:
        raise NotImplementedError(f"layoutkit.gemm: no backward through activation="
                                  f"{ctx.activation!r}; apply the activation outside the op "
                                  "to differentiate it")
    a, b = ctx.saved_tensors
    need = ctx.needs_input_grad + (False,) * 9       # one flag per argument given
    grad16 = grad.to(torch.bfloat16)
    scale = {} if ctx.alpha == 1 else {"alpha": ctx.alpha}
    grad_a = torch.ops.layoutkit.gemm(grad16, b.t(), **scale) if need[0] else None
    grad_b = torch.ops.layoutkit.gemm(a.t(), grad16, **scale) if need[1] else None
    bias_type, residual_type, c_type = ctx.types
    grad_bias = grad.float().sum(0).to(bias_type) if need[2] and bias_type else None
    grad_residual = grad.to(residual_type) if need[4] and residual_type else None
    grad_c = (grad * ctx.beta).to(c_type) if need[7] and c_type else None
    return grad_a, grad_b, grad_bias, None, grad_residual, None, None, grad_c, None


GEMM = OpSpec("gemm", SCHEMA, gemm_outputs, gemm_cuda, gemm_cpu, gemm_backward,
              gemm_setup_context)
