"""Lowering of warp roles (layoutkit/dsl/roles.py): one branch per role with setmaxnreg,
elect_one, named barriers. A mixin of `Lowering`: one `op_<name>` method per IR op."""
from __future__ import annotations


class RoleLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""
