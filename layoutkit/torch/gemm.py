"""torch.ops.layoutkit.gemm(a, b): a @ b for bf16 a (M x K) and b (K x N) of any strides, by
recipes/gemm_hopper.py (f32 accumulation, a new contiguous M x N bf16 result). Differentiable:
grad_a = grad @ b^T and grad_b = a^T @ grad, both through this op again.

`torch.nn.functional.linear(x, w)` is gemm(x, w.t()): w.t() is the K-major operand the kernel
reads in place (no copy); operands it cannot read by TMA (rows not 16-byte aligned, a
transposed a) are copied by the recipe first.
"""
from __future__ import annotations

import torch

from .checks import check_bf16
from .interpreted import refuse_large, run
from .registry import OpSpec, recipe


def gemm_outputs(a, b):
    check_bf16("gemm", a=a, b=b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"layoutkit.gemm: a is M x K and b is K x N, got a of shape "
                         f"{tuple(a.shape)} and b of shape {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"layoutkit.gemm: a is on {a.device} and b on {b.device}; they must "
                         "be on one device")
    return torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=a.device)


def gemm_cuda(a, b):
    out = gemm_outputs(a, b)
    return recipe("gemm_hopper", "gemm").gemm(a, b, out=out)


def gemm_cpu(a, b):
    """gemm()'s host steps on CPU tensors (TMA-ready operands, the config, the recipe's
    schedule), then its kernel in the interpreter on a grid of one scheduling unit (one CTA or
    cluster, taking every tile in turn: the persistent loop)."""
    from layoutkit.dsl import bf16
    out = gemm_outputs(a, b)
    refuse_large("gemm", a=a, b=b)
    (m, k), n = a.shape, b.shape[1]
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    g = recipe("gemm_hopper", "gemm")
    a_op = g._tma_ready(a)
    if b.stride(1) == 1 or n == 1:
        major, b_op = "N", g._tma_ready(b)
    else:
        major, b_op = "K", g._tma_ready(b.t())
    c = g._tma_ready(out)
    cfg = g.config_for(m, n, k)
    plan = g.host.schedule(m, n, k, cfg, bf16, 1)
    run(g.KERNELS[cfg.CLUSTER], (plan.grid,), a_op, b_op, c, GRID=plan.grid, B_MAJOR=major,
        BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=plan.group, CLUSTER=cfg.CLUSTER)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c)
    return out


def gemm_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def gemm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = torch.ops.layoutkit.gemm(grad, b.t()) if ctx.needs_input_grad[0] else None
    grad_b = torch.ops.layoutkit.gemm(a.t(), grad) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


GEMM = OpSpec("gemm", "(Tensor a, Tensor b) -> Tensor", gemm_outputs, gemm_cuda, gemm_cpu,
              gemm_backward, gemm_setup_context)
