"""What the row operators (softmax, layernorm, rmsnorm and their backwards) share: rows of
the last dimension and running a row recipe's kernel on CPU tensors.

Every row recipe plans a launch the same way: `config(m, n)` picks the work split for m rows of
n columns and `launch_arguments(config, m, n)` gives (kernel, grid, integer arguments, constexprs,
f32 scratch elements); its kernel takes the tensors, the scratch when there is one, the integers,
then its scalars. `run_rows` launches that in the interpreter.
"""
from __future__ import annotations

import torch

from .interpreted import refuse_large, run


def max_columns() -> int:
    """The longest row every row kernel takes (softmax's split, which they all share)."""
    from recipes.softmax import MAX_COLUMNS
    return MAX_COLUMNS


def check_rows(op: str, x, allow_empty_rows: bool) -> None:
    """ValueError unless x has a last dimension n the row kernels take: 1..MAX_COLUMNS (0 too
    where `allow_empty_rows`)."""
    if x.dim() < 1:
        raise ValueError(f"layoutkit.{op}: x is a 0-d tensor; the op normalizes over x's last "
                         "dimension")
    n, low = x.shape[-1], 0 if allow_empty_rows else 1
    if not low <= n <= max_columns():
        raise ValueError(f"layoutkit.{op}: x has shape {tuple(x.shape)}; its last dimension "
                         f"must be in {low}..{max_columns()}")


def rows_and_columns(x) -> tuple[int, int]:
    """(m, n): the rows and the row length of x over its last dimension."""
    n = x.shape[-1]
    return (x.numel() // n if n else 0), n


def cluster_scratch(m: int, cluster: int, slots: int = 1) -> torch.Tensor:
    """The f32 scratch through which a cluster's CTAs swap `slots` per-row partials (one
    unused element without a cluster): the _rowwise recipes' exchange buffer."""
    return torch.empty(m * slots * cluster if cluster > 1 else 1, dtype=torch.float32)


def run_rows(module, op: str, pointers: dict, scalars: tuple = ()) -> None:
    """Run recipe module `module`'s row kernel on CPU tensors: `pointers` ({name: contiguous
    tensor}, in the kernel's order, the first of x's shape), then `scalars`."""
    refuse_large(op, **pointers)
    m, n = rows_and_columns(next(iter(pointers.values())))
    if m == 0:
        return
    kernel, grid, ints, constexprs, scratch = module.launch_arguments(module.config(m, n), m, n)
    partials = (torch.empty(scratch, dtype=torch.float32),) if scratch else ()
    run(kernel, grid, *pointers.values(), *partials, *ints, *scalars, **constexprs)
