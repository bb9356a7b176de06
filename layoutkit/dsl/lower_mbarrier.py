"""Lowering of mbarrier arrays in shared memory (layoutkit/dsl/mbarrier.py): init, arrive,
expect-tx, parity waits (bounded in debug builds), fences. A mixin of `Lowering`: one `op_<name>` method per IR op."""
from __future__ import annotations


class MbarrierLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""
