"""Lowering of the sm_80 matrix path (layoutkit/dsl/mma.py): ldmatrix, mma.sync,
cp.async with its commit/wait groups. A mixin of `Lowering`: one `op_<name>` method per IR op."""
from __future__ import annotations


class MmaLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""
