"""torch.ops.layoutkit.layernorm(x, weight, bias, eps): torch.nn.functional.layer_norm over
x's last dimension (biased variance) for bf16 x, weight, bias, by recipes/layernorm.py;
differentiable through torch.ops.layoutkit.layernorm_backward(grad_y, x, weight, eps) ->
(dx, dweight, dbias), by recipes/layernorm_backward.py (the row statistics recomputed from x,
so the forward saves nothing but its inputs). Non-contiguous inputs are made contiguous first.
"""
from __future__ import annotations

import torch

from .checks import check_bf16, check_eps, check_same, check_vector, new_like
from .interpreted import cpu_floats, refuse_large, run_launches
from .registry import OpSpec, recipe
from .rows import check_rows, rows_and_columns


def check_layernorm(op: str, x, weight, eps, **more) -> None:
    check_bf16(op, x=x, weight=weight, **more)
    check_rows(op, x, allow_empty_rows=False)
    check_eps(op, eps)


def layernorm_outputs(x, weight, bias, eps):
    check_layernorm("layernorm", x, weight, eps, bias=bias)
    check_vector("layernorm", x, weight=weight, bias=bias)
    return new_like(x)


def layernorm_cuda(x, weight, bias, eps):
    out = layernorm_outputs(x, weight, bias, eps)
    return recipe("layernorm", "layernorm").layernorm(x.contiguous(), weight.contiguous(),
                                                      bias.contiguous(), eps, out)


def layernorm_cpu(x, weight, bias, eps):
    out = layernorm_outputs(x, weight, bias, eps)
    refuse_large("layernorm", x=x)
    m, n = rows_and_columns(x)
    if m:
        run_launches(recipe("layernorm", "layernorm").launches(
            x.contiguous(), weight.contiguous(), bias.contiguous(), out, cpu_floats, m, n, eps))
    return out


def layernorm_setup_context(ctx, inputs, output):
    x, weight, _, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def layernorm_backward_rule(ctx, grad_y):
    x, weight = ctx.saved_tensors
    dx, dweight, dbias = torch.ops.layoutkit.layernorm_backward(grad_y, x, weight, ctx.eps)
    return dx, dweight, dbias, None


def check_layernorm_backward(grad_y, x, weight, eps) -> None:
    check_layernorm("layernorm_backward", x, weight, eps, grad_y=grad_y)
    check_same("layernorm_backward", "of", "x", x, grad_y=grad_y)
    check_vector("layernorm_backward", x, weight=weight)


def layernorm_backward_outputs(grad_y, x, weight, eps):
    check_layernorm_backward(grad_y, x, weight, eps)
    return new_like(x), new_like(weight), new_like(weight)


def layernorm_backward_cuda(grad_y, x, weight, eps):
    check_layernorm_backward(grad_y, x, weight, eps)
    module = recipe("layernorm_backward", "layernorm_backward")
    dx, dweight, dbias = module.layernorm_backward(grad_y.contiguous(), x.contiguous(),
                                                   weight.contiguous(), None, None, eps)
    return dx, dweight.clone(), dbias.clone()     # the recipe's are rows of one tensor


def layernorm_backward_cpu(grad_y, x, weight, eps):
    """The recipe's two launches (a persistent CTA row over every row tile, then the column
    sums of its dweight / dbias partials) in the interpreter."""
    dx, dweight, dbias = layernorm_backward_outputs(grad_y, x, weight, eps)
    refuse_large("layernorm_backward", grad_y=grad_y, x=x)
    m, n = rows_and_columns(x)
    if m == 0:
        return dx, dweight.zero_(), dbias.zero_()
    module = recipe("layernorm_backward", "layernorm_backward")
    sums = torch.empty(2, n, dtype=weight.dtype)
    run_launches(module.launches(grad_y.contiguous(), x.contiguous(), weight.contiguous(), None,
                                 None, dx, sums, cpu_floats, m, n, eps,
                                 (module.rw.lk_dtype(x), module.rw.lk_dtype(weight)), ctas=1,
                                 sum_warps=1))
    return dx, dweight.copy_(sums[0]), dbias.copy_(sums[1])


LAYERNORM = OpSpec("layernorm", "(Tensor x, Tensor weight, Tensor bias, float eps=1e-05) -> "
                   "Tensor", layernorm_outputs, layernorm_cuda, layernorm_cpu,
                   layernorm_backward_rule, layernorm_setup_context)
LAYERNORM_BACKWARD = OpSpec("layernorm_backward", "(Tensor grad_y, Tensor x, Tensor weight, "
                            "float eps) -> (Tensor, Tensor, Tensor)", layernorm_backward_outputs,
                            layernorm_backward_cuda, layernorm_backward_cpu)
