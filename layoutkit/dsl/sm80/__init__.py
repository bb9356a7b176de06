"""layoutkit.dsl.sm80: the sm_80 (Ampere) instruction families, usable on Hopper too -
`cp_async` copies with their commit/wait groups, `ldmatrix`, and `mma_sync` with the register
fragments of its shapes.
"""
from .cp_async import cp_async, cp_async_commit, cp_async_wait
from .ldmatrix import ldmatrix
from .mma import mma_sync
from .mma_layouts import MmaLayouts, mma_sync_layouts
from . import ops  # noqa: F401  (the op definitions register at import)

__all__ = ["cp_async", "cp_async_commit", "cp_async_wait", "ldmatrix", "mma_sync",
           "mma_sync_layouts", "MmaLayouts"]
