"""Lowering of warp roles (layoutkit/dsl/sm90/roles.py) and clusters (cluster.py): one uniform
branch per role with its setmaxnreg, elect_one, named barriers, the cluster barrier and
cluster special registers. A mixin of `Lowering`: one `op_<name>` method per IR op, each a
call into layoutkit.sync.

A role region lowers to (the warpgroup index made warp-uniform once, by layoutkit.sync):

    sub.u32 d, wg, first;  setp.lt.u32 p, d, count;  @!p bra.uni $role_skip;
    setmaxnreg.{inc,dec}.sync.aligned.u32 N;      // per RoleSplit.direction
    <body>
  $role_skip:
"""
from __future__ import annotations

from layoutkit.ptx.isa import arith, compare, control, special
from layoutkit.sync import (NamedBarrier, RoleSplit, WarpRole, check_directives, cluster_sync,
                            elect_one, named_arrive, named_sync, set_role_registers,
                            warpgroup_index)


def role_split_of(fn) -> RoleSplit | None:
    """The RoleSplit of a traced Function's top-level warp_role ops (None without roles)."""
    roles = sorted((op for op in fn.body.ops if op.name == "warp_role"),
                   key=lambda op: op.attrs["warpgroups"][0])
    if not roles:
        return None
    return RoleSplit([WarpRole(op.attrs["role"], op.attrs["warpgroups"][1],
                               op.attrs["registers"]) for op in roles])


def kernel_directives(fn) -> dict:
    """The PTX directives of a traced kernel: the exact block size; with warp roles the
    `.minnctapersm` that gives ptxas the entry register cap (else it drops setmaxnreg,
    C7508); with a cluster shape `.reqnctapercluster`."""
    split = role_split_of(fn)
    return {"reqntid": 32 * fn.num_warps,
            "minnctapersm": split.ctas_per_sm if split is not None else None,
            "reqnctapercluster": getattr(fn, "cluster", None)}


class RoleLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""

    def _role_split(self):
        if getattr(self, "_split", None) is None:
            self._split = role_split_of(self.fn)
            check_directives(self.k, self._split)
            self._tid, self._warpgroup = warpgroup_index(self.k)
        return self._split

    def op_warp_role(self, op):
        k = self.k
        split = self._role_split()
        first, count = op.attrs["warpgroups"]
        skip = k.label(f"role_{op.attrs['role']}_end")
        if count < split.threads // 128:
            offset = arith.sub(k, self._warpgroup, first, dtype="u32") if first else \
                self._warpgroup
            inside = compare.setp(k, "lt", offset, count, dtype="u32")
            control.bra(k, skip, uni=True, pred=~inside)
        set_role_registers(k, split, op.attrs["role"])
        self.push()
        self.block(op.blocks[0])
        self.pop()
        k.place(skip)

    def op_elect_one(self, op):
        skip = self.k.label("elect_end")
        control.bra(self.k, skip, pred=~elect_one(self.k))
        self.push()
        self.block(op.blocks[0])
        self.pop()
        self.k.place(skip)

    def op_named_barrier(self, op):
        a = op.attrs
        barrier = NamedBarrier(a["id"], a["threads"], a["role"] or "")
        (named_sync if a["kind"] == "sync" else named_arrive)(self.k, barrier)

    def op_cluster_sync(self, op):
        cluster_sync(self.k)

    def op_special_reg(self, op):
        self.define(op, special.sreg(self.k, op.attrs["name"]))
