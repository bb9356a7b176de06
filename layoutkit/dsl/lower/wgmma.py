"""EMPTIED: the wgmma ops lower through their definitions (layoutkit/dsl/sm90/wgmma/ops.py). The
mixin stays until the Lowering class drops it."""
from __future__ import annotations


class WgmmaLowering:
    """No methods left (see the module docstring)."""
