"""torch.ops.layoutkit.transpose(x): x.t().contiguous() for a 2-D bf16, f16 or f32 x, by
recipes/transpose.py (through a swizzled shared-memory tile); non-contiguous x is made
contiguous first. Differentiable: the gradient is the transpose of the output's gradient,
through this op again.
"""
from __future__ import annotations

import torch

from .interpreted import refuse_large, run
from .registry import OpSpec, recipe


def transpose_outputs(x):
    dtypes = recipe("transpose", "transpose").DTYPES
    if str(x.dtype).removeprefix("torch.") not in dtypes:
        raise TypeError(f"layoutkit.transpose: x has dtype {x.dtype}; the kernel takes "
                        f"{', '.join('torch.' + name for name in dtypes)}")
    if x.dim() != 2:
        raise ValueError(f"layoutkit.transpose: x is a 2-D matrix, got shape {tuple(x.shape)}")
    return torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)


def transpose_cuda(x):
    out = transpose_outputs(x)
    return recipe("transpose", "transpose").transpose(x.contiguous(), out)


def transpose_cpu(x):
    out = transpose_outputs(x)
    refuse_large("transpose", x=x)
    m, n = x.shape
    if m and n:
        t = recipe("transpose", "transpose")
        dtype = t.DTYPES[str(x.dtype).removeprefix("torch.")]
        blocks, rows_on_x = t.grid(m, n, dtype)
        run(t.kernel_for(dtype), blocks, x.contiguous(), out, m, n, rows_on_x)
    return out


def transpose_backward(ctx, grad):
    return torch.ops.layoutkit.transpose(grad)


def transpose_setup_context(ctx, inputs, output):
    pass                          # the backward needs nothing saved


TRANSPOSE = OpSpec("transpose", "(Tensor x) -> Tensor", transpose_outputs, transpose_cuda,
                   transpose_cpu, transpose_backward, transpose_setup_context)
