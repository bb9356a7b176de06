"""The argument checks every operator's `outputs` function makes (the fake implementation's
and the real ones' first step, so fake and real calls refuse the same arguments alike):
each raises TypeError / ValueError naming the operator, the argument, its value and the rule."""
from __future__ import annotations

import torch


def check_bf16(op: str, **tensors) -> None:
    """TypeError naming the argument unless every tensor is bf16 (the kernels' only dtype)."""
    for name, t in tensors.items():
        if t.dtype != torch.bfloat16:
            raise TypeError(f"layoutkit.{op}: {name} has dtype {t.dtype}; the kernel takes "
                            "torch.bfloat16")


def check_same(op: str, what: str, reference_name: str, reference, **tensors) -> None:
    """ValueError unless every tensor has the reference's shape (and each is on its device)."""
    for name, t in tensors.items():
        if t.shape != reference.shape or t.device != reference.device:
            raise ValueError(f"layoutkit.{op}: {name} has shape {tuple(t.shape)} on {t.device}; "
                             f"it must be {what} {reference_name}'s, {tuple(reference.shape)} "
                             f"on {reference.device}")


def check_vector(op: str, x, **vectors) -> None:
    """ValueError unless every vector is (n,) on x's device, n = x.shape[-1]."""
    n = x.shape[-1]
    for name, t in vectors.items():
        if t.dim() != 1 or t.shape[0] != n or t.device != x.device:
            raise ValueError(f"layoutkit.{op}: {name} has shape {tuple(t.shape)} on {t.device}; "
                             f"it must be a vector of n = {n} (x's last dimension) on {x.device}")


def check_eps(op: str, eps: float) -> None:
    if not eps > 0:
        raise ValueError(f"layoutkit.{op}: eps = {eps!r} must be a positive number")


def new_like(x) -> torch.Tensor:
    """An empty contiguous tensor of x's shape, dtype and device (every row op's output)."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
