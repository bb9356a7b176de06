"""TRANSITION ONLY: empty. The sm_80 ops (ldmatrix, mma.sync, cp.async with its commit/wait
groups) are lowered by their definitions in layoutkit/dsl/sm80/ops.py; `MmaLowering` stays
only because lower/function.py still lists it among Lowering's bases, and goes with that."""
from __future__ import annotations


class MmaLowering:
    """Empty (see the module docstring)."""
