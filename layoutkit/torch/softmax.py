"""torch.ops.layoutkit.softmax(x): torch.softmax(x, dim=-1) for bf16 x of any shape (rows of
the last dimension, 0..32768 columns), by recipes/softmax.py; differentiable through
torch.ops.layoutkit.softmax_backward(grad_y, y) = y * (grad_y - sum(grad_y * y, -1)), by
recipes/softmax_backward.py. Non-contiguous inputs are made contiguous (a copy) first.
"""
from __future__ import annotations

import torch

from .checks import check_bf16, check_same, new_like
from .registry import OpSpec, recipe
from .rows import check_rows, run_rows


def softmax_outputs(x):
    check_bf16("softmax", x=x)
    check_rows("softmax", x, allow_empty_rows=True)
    return new_like(x)


def softmax_cuda(x):
    out = softmax_outputs(x)
    return recipe("softmax", "softmax").softmax(x.contiguous(), out)


def softmax_cpu(x):
    out = softmax_outputs(x)
    run_rows(recipe("softmax", "softmax"), "softmax", {"x": x.contiguous(), "y": out})
    return out


def softmax_setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def softmax_backward_rule(ctx, grad_y):
    (y,) = ctx.saved_tensors
    return torch.ops.layoutkit.softmax_backward(grad_y, y)


def softmax_backward_outputs(grad_y, y):
    check_bf16("softmax_backward", grad_y=grad_y, y=y)
    check_same("softmax_backward", "of", "y", y, grad_y=grad_y)
    check_rows("softmax_backward", y, allow_empty_rows=True)
    return new_like(y)


def softmax_backward_cuda(grad_y, y):
    out = softmax_backward_outputs(grad_y, y)
    module = recipe("softmax_backward", "softmax_backward")
    return module.softmax_backward(grad_y.contiguous(), y.contiguous(), out)


def softmax_backward_cpu(grad_y, y):
    out = softmax_backward_outputs(grad_y, y)
    run_rows(recipe("softmax_backward", "softmax_backward"), "softmax_backward",
             {"dy": grad_y.contiguous(), "y": y.contiguous(), "dx": out})
    return out


SOFTMAX = OpSpec("softmax", "(Tensor x) -> Tensor", softmax_outputs, softmax_cuda, softmax_cpu,
                 softmax_backward_rule, softmax_setup_context)
SOFTMAX_BACKWARD = OpSpec("softmax_backward", "(Tensor grad_y, Tensor y) -> Tensor",
                          softmax_backward_outputs, softmax_backward_cuda,
                          softmax_backward_cpu)
