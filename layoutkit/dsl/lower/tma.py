"""EMPTIED: the TMA ops lower through their definitions (layoutkit/dsl/sm90/tma/ops.py). The
mixin stays until the Lowering class drops it."""
from __future__ import annotations


class TmaLowering:
    """No methods left (see the module docstring)."""
