"""Lowering of TMA copies (layoutkit/dsl/tma.py): cp.async.bulk.tensor loads (and
multicast) into shared tensors and stores from them, with their commit/wait groups. A mixin of `Lowering`: one `op_<name>` method per IR op."""
from __future__ import annotations


class TmaLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""
