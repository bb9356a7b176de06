"""torch.ops.layoutkit.gemm_grouped(a, b, offsets): the grouped GEMM of mixture-of-experts
layers, c[offsets[g]:offsets[g+1]] = a[offsets[g]:offsets[g+1]] @ b[g], by
recipes/gemm_grouped.py: a (T, K) bf16 token rows, b (G, K, N) bf16 (N- or K-major), offsets
(G + 1,) int32 on a's device, read by the kernel only (no host sync); a new contiguous (T, N)
bf16 result whose rows of no group (before offsets[0], from offsets[G]) are uninitialised.
No autograd yet: b's gradient, a_g^T @ grad_g per group, is a grouped GEMM over the ragged
K mode, which the kernel does not do.

The fake checks the arguments as the recipe does and gives the shape without reading
offsets, so torch.compile traces it whatever the group sizes.
"""
from __future__ import annotations

import torch

from .interpreted import refuse_large, run
from .registry import OpSpec, recipe

SCHEMA = "(Tensor a, Tensor b, Tensor offsets) -> Tensor"
CPU_UNITS = 2        # persistent CTAs of the interpreted launch (each takes tiles in turn)


def _recipe():
    return recipe("gemm_grouped", "gemm_grouped")


def gemm_grouped_outputs(a, b, offsets):
    """The (T, N) bf16 result's empty tensor after the recipe's checks (any one device)."""
    t, _, n, _, _ = _recipe().check_inputs(a, b, offsets, None, None, cuda=False)
    return torch.empty(t, n, dtype=torch.bfloat16, device=a.device)


def gemm_grouped_cuda(a, b, offsets):
    out = gemm_grouped_outputs(a, b, offsets)
    return _recipe().packed(a, b, offsets, out)


def gemm_grouped_cpu(a, b, offsets):
    """The recipe's host steps on CPU tensors, its kernel in the interpreter."""
    out = gemm_grouped_outputs(a, b, offsets)
    refuse_large("gemm_grouped", a=a, b=b, out=out)
    kernel = _recipe().gemm_grouped_kernel
    return _recipe().packed(a, b, offsets, out, units=CPU_UNITS, cuda=False,
                            run=lambda grid, args, constexprs: run(kernel, grid, *args,
                                                                   **constexprs))


GEMM_GROUPED = OpSpec("gemm_grouped", SCHEMA, gemm_grouped_outputs, gemm_grouped_cuda,
                      gemm_grouped_cpu)
