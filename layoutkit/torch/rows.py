"""What the row operators (softmax, layernorm, rmsnorm and their backwards) share: rows of
the last dimension. Each row recipe describes its launches once, `launches(...)` ->
[(kernel, grid, args, constexprs)], which its GPU path runs and the CPU path here runs in the
interpreter (interpreted.run_launches).
"""
from __future__ import annotations


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
