"""torch.ops.layoutkit.softmax(x): torch.softmax(x, dim=-1) for bf16 x of any shape (rows of
the last dimension, 0..32768 columns), by recipes/softmax.py; differentiable through
torch.ops.layoutkit.softmax_backward(grad_y, y) = y * (grad_y - sum(grad_y * y, -1)), by
recipes/softmax_backward.py. Non-contiguous inputs are made contiguous (a copy) first.
"""
from __future__ import annotations

import torch

from .checks import check_bf16, check_same, new_like
from .interpreted import cpu_floats, refuse_large, run_launches
from .registry import OpSpec, recipe
from .rows import check_rows, rows_and_columns


def softmax_outputs(x):
    check_bf16("softmax", x=x)
    check_rows("softmax", x, allow_empty_rows=True)
    return new_like(x)


def softmax_cuda(x):
    out = softmax_outputs(x)
    return recipe("softmax", "softmax").softmax(x.contiguous(), out)


def softmax_cpu(x):
    out = softmax_outputs(x)
    refuse_large("softmax", x=x)
    m, n = rows_and_columns(x)
    if m:
        run_launches(recipe("softmax", "softmax").launches(x.contiguous(), out, cpu_floats, m, n))
    return out


def softmax_setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def softmax_backward_rule(ctx, grad_y):
    (y,) = ctx.saved_tensors
    return torch.ops.layoutkit.softmax_backward(grad_y, y)


def check_softmax_backward(grad_y, y) -> None:
    check_bf16("softmax_backward", grad_y=grad_y, y=y)
    check_same("softmax_backward", "of", "y", y, grad_y=grad_y)
    check_rows("softmax_backward", y, allow_empty_rows=True)


def softmax_backward_outputs(grad_y, y):
    check_softmax_backward(grad_y, y)
    return new_like(y)


def softmax_backward_cuda(grad_y, y):
    check_softmax_backward(grad_y, y)
    module = recipe("softmax_backward", "softmax_backward")
    return module.softmax_backward(grad_y.contiguous(), y.contiguous())


def softmax_backward_cpu(grad_y, y):
    """The recipe's launch (its split, one CTA row per row tile) in the interpreter."""
    dx = softmax_backward_outputs(grad_y, y)
    refuse_large("softmax_backward", grad_y=grad_y, y=y)
    m, n = rows_and_columns(y)
    if m and n:
        module = recipe("softmax_backward", "softmax_backward")
        run_launches(module.launches(grad_y.contiguous(), y.contiguous(), dx, cpu_floats, m, n,
                                     module.rw.lk_dtype(y)))
    return dx


SOFTMAX = OpSpec("softmax", "(Tensor x) -> Tensor", softmax_outputs, softmax_cuda, softmax_cpu,
                 softmax_backward_rule, softmax_setup_context)
SOFTMAX_BACKWARD = OpSpec("softmax_backward", "(Tensor grad_y, Tensor y) -> Tensor",
                          softmax_backward_outputs, softmax_backward_cuda,
                          softmax_backward_cpu)
