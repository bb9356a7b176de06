"""Lowering of wgmma (layoutkit/dsl/wgmma.py): descriptors from shared layouts,
mma_async with accumulators in registers, fence/commit/wait. A mixin of `Lowering`: one `op_<name>` method per IR op."""
from __future__ import annotations


class WgmmaLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""
