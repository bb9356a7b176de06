"""EMPTY (TRANSITION): the mbarrier ops lower through their definitions in
layoutkit/dsl/sm90/mbarrier_ops.py; `MbarrierLowering` is kept only while lower/function.py
still lists it among Lowering's bases (the lead removes both)."""
from __future__ import annotations


class MbarrierLowering:
    """Empty: see the module docstring."""
