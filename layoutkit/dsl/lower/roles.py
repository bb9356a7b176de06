"""The kernel-level facts of warp roles and clusters: a traced kernel's RoleSplit and the PTX
directives it needs. The role, elect, named-barrier and cluster ops themselves lower through
their definitions in layoutkit/dsl/sm90/role_ops.py."""
from __future__ import annotations

from layoutkit.ptx.isa.warp import WARP_SIZE
from layoutkit.sync import RoleSplit, WarpRole


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
    return {"reqntid": WARP_SIZE * fn.num_warps,
            "minnctapersm": split.ctas_per_sm if split is not None else None,
            "reqnctapercluster": getattr(fn, "cluster", None)}


