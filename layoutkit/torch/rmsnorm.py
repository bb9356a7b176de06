"""torch.ops.layoutkit.rmsnorm(x, weight, eps) -> (y, rstd): y = x / sqrt(mean(x^2) + eps)
(* weight) over x's last dimension, by recipes/rmsnorm.py; x bf16, f16 or f32 (y in x's dtype),
weight None or a vector of n in x's dtype or f32; rstd the f32 per-row 1 / sqrt(...), which
the backward reads and which is not differentiable. Differentiable through
torch.ops.layoutkit.rmsnorm_backward(grad_y, x, weight, rstd) -> (dx, dweight), by the same
recipe (dweight has 0 elements when there is no weight). Non-contiguous inputs are made
contiguous first.
"""
from __future__ import annotations

import torch

from .checks import check_eps, check_same, check_vector, new_like
from .interpreted import cpu_floats, refuse_large, run_launches
from .registry import OpSpec, recipe
from .rows import check_rows, rows_and_columns

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_rmsnorm(op: str, x, weight, **same_as_x) -> None:
    """x's dtype among DTYPES, the same tensors of x's shape and dtype, weight None or a vector
    of n in x's dtype or f32."""
    if x.dtype not in DTYPES:
        raise TypeError(f"layoutkit.{op}: x has dtype {x.dtype}; the kernel takes "
                        f"{', '.join(map(str, DTYPES))}")
    check_rows(op, x, allow_empty_rows=False)
    check_same(op, "of", "x", x, **same_as_x)
    for name, t in same_as_x.items():
        if t.dtype != x.dtype:
            raise TypeError(f"layoutkit.{op}: {name} has dtype {t.dtype}; it must be x's, "
                            f"{x.dtype}")
    if weight is not None:
        check_vector(op, x, weight=weight)
        if weight.dtype not in (x.dtype, torch.float32):
            raise TypeError(f"layoutkit.{op}: weight has dtype {weight.dtype}; it must be x's "
                            f"({x.dtype}) or torch.float32")


def _row_statistic(x) -> torch.Tensor:
    return torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)


def rmsnorm_outputs(x, weight, eps):
    check_rmsnorm("rmsnorm", x, weight)
    check_eps("rmsnorm", eps)
    return new_like(x), _row_statistic(x)


def rmsnorm_cuda(x, weight, eps):
    rmsnorm_outputs(x, weight, eps)                       # the op's checks
    module = recipe("rmsnorm", "rmsnorm")
    return module.rmsnorm(x.contiguous(), None if weight is None else weight.contiguous(),
                          None, eps, return_rstd=True)


def rmsnorm_cpu(x, weight, eps):
    """The recipe's forward launch (no residual, rstd stored) in the interpreter."""
    y, rstd = rmsnorm_outputs(x, weight, eps)
    refuse_large("rmsnorm", x=x)
    m, n = rows_and_columns(x)
    if m:
        module = recipe("rmsnorm", "rmsnorm")
        x, w = x.contiguous(), None if weight is None else weight.contiguous()
        run_launches(module.forward_launches(x, None, w, y, None, rstd, cpu_floats, m, n, eps,
                                             module.dtypes_of(x, w)))
    return y, rstd


def rmsnorm_setup_context(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def rmsnorm_backward_rule(ctx, grad_y, grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dweight = torch.ops.layoutkit.rmsnorm_backward(grad_y, x, weight, rstd)
    return dx, dweight if weight is not None else None, None


def check_rmsnorm_backward(grad_y, x, weight, rstd) -> None:
    check_rmsnorm("rmsnorm_backward", x, weight, grad_y=grad_y)
    if rstd.shape != x.shape[:-1] or rstd.dtype != torch.float32 or rstd.device != x.device:
        raise ValueError(f"layoutkit.rmsnorm_backward: rstd has shape {tuple(rstd.shape)}, "
                         f"dtype {rstd.dtype} on {rstd.device}; it must be the forward's, f32 "
                         f"{tuple(x.shape[:-1])} on {x.device}")


def rmsnorm_backward_outputs(grad_y, x, weight, rstd):
    check_rmsnorm_backward(grad_y, x, weight, rstd)
    dweight = new_like(weight) if weight is not None else \
        torch.empty(0, dtype=x.dtype, device=x.device)
    return new_like(x), dweight


def rmsnorm_backward_cuda(grad_y, x, weight, rstd):
    check_rmsnorm_backward(grad_y, x, weight, rstd)
    module = recipe("rmsnorm", "rmsnorm_backward")
    dx, dweight = module.rmsnorm_backward(grad_y.contiguous(), x.contiguous(),
                                          None if weight is None else weight.contiguous(),
                                          rstd.contiguous())
    return dx, dweight if dweight is not None else torch.empty(0, dtype=x.dtype,
                                                               device=x.device)


def rmsnorm_backward_cpu(grad_y, x, weight, rstd):
    """The recipe's backward launches (one persistent CTA row over every row tile, then the
    column sum of its dweight partial) in the interpreter."""
    dx, dweight = rmsnorm_backward_outputs(grad_y, x, weight, rstd)
    refuse_large("rmsnorm_backward", grad_y=grad_y, x=x)
    m, n = rows_and_columns(x)
    if m == 0:
        return dx, dweight.zero_()
    module = recipe("rmsnorm", "rmsnorm_backward")
    x, w = x.contiguous(), None if weight is None else weight.contiguous()
    run_launches(module.backward_launches(grad_y.contiguous(), x, w, rstd.contiguous(), dx,
                                          dweight, cpu_floats, m, n, module.dtypes_of(x, w),
                                          ctas=1, sum_warps=1))
    return dx, dweight


RMSNORM = OpSpec("rmsnorm", "(Tensor x, Tensor? weight, float eps=1e-06) -> (Tensor, Tensor)",
                 rmsnorm_outputs, rmsnorm_cuda, rmsnorm_cpu, rmsnorm_backward_rule,
                 rmsnorm_setup_context)
RMSNORM_BACKWARD = OpSpec("rmsnorm_backward", "(Tensor grad_y, Tensor x, Tensor? weight, "
                          "Tensor rstd) -> (Tensor, Tensor)", rmsnorm_backward_outputs,
                          rmsnorm_backward_cuda, rmsnorm_backward_cpu)
