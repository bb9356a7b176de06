"""Lowering a RoleSplit to PTX: one uniform branch per role, setmaxnreg at the top of each.

    mov.u32 t, %tid.x;  shr.u32 w, t, 5;
    shfl.sync.idx.b32 w, w, 0, 31, 0xFFFFFFFF;  // lane 0's warp index: provably warp-uniform
    shr.u32 wg, w, 2;                            // warpgroup = tid.x >> 7
    setp.ge.u32 p, wg, <first of role n-1>;  @p bra.uni $role_<name n-1>;
    ...                                          // one test per role, highest first,
                                                 // but role 0, which falls through
  $role_<name0>:
    setmaxnreg.dec.sync.aligned.u32 24;          // per RoleSplit.direction; none at the cap
    <body of role 0>
    bra.uni $roles_end;
  ...
  $roles_end:

The kernel's directives must give ptxas the register cap the split was computed for
(`Module.kernel(name, **split.directives())`), or ptxas would drop setmaxnreg (C7508) or the
budgets would be checked against the wrong cap. `%warpid` is never used (it is the physical
slot and may change: hopper-ptx.md §2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from layoutkit.ptx.builder import KernelBuilder, Reg
from layoutkit.ptx.isa import setmaxnreg as isa_setmaxnreg
from layoutkit.ptx.isa import sm90 as I

from .errors import RoleBudgetError
from .roles import WARP_THREADS, WARPGROUP_WARPS, RoleSplit, WarpRole


@dataclass(frozen=True)
class RoleContext:
    """What a role's body gets: the role, the split, `tid` (%tid.x) and `warpgroup` (the
    warp-uniform warpgroup index in the CTA, u32)."""

    role: WarpRole
    split: RoleSplit
    tid: Reg
    warpgroup: Reg

    @property
    def first_warpgroup(self) -> int:
        return self.split.first_warpgroup(self.role.name)

    def warpgroup_in_role(self, k: KernelBuilder) -> Reg:
        """Emit the warpgroup's index within its role (0..role.warpgroups-1), uniform."""
        return I.sub(k, self.warpgroup, self.first_warpgroup, dtype="u32")


def _entry_cap_of(k: KernelBuilder) -> tuple[int | None, str]:
    d = k.directives
    if d.maxnreg is not None:
        return d.maxnreg, f".maxnreg {d.maxnreg}"
    dims = d.maxntid or d.reqntid
    if dims is None or d.minnctapersm is None:
        return None, "no .maxnreg and no .maxntid/.reqntid with .minnctapersm"
    return None, f".maxntid/.reqntid {dims[0]}x{dims[1]}x{dims[2]}, .minnctapersm {d.minnctapersm}"


def check_directives(k: KernelBuilder, split: RoleSplit) -> None:
    """Refuse a kernel whose entry register cap is not the one `split` was computed for."""
    d = k.directives
    dims = d.maxntid or d.reqntid
    cap, shown = _entry_cap_of(k)
    if cap is not None:
        ok = cap == split.entry_registers
    else:
        ok = dims is not None and dims[1:] == (1, 1) and dims[0] == split.threads\
            and d.minnctapersm == split.ctas_per_sm
    if not ok:
        raise RoleBudgetError(
            f"kernel '{k.name}' has {shown}, but the split needs {split.threads} threads at "
            f"{split.ctas_per_sm} CTA(s)/SM, entry cap {split.entry_registers}: make the kernel "
            f"with Module.kernel(name, **split.directives()) = {split.directives()} (else ptxas "
            "drops setmaxnreg, C7508, or the budgets are wrong)",
            thing=f"kernel '{k.name}' directives", value=shown)


def warpgroup_index(k: KernelBuilder, tid: Reg | None = None) -> tuple[Reg, Reg]:
    """(tid.x, warpgroup index) with the index made warp-uniform by a lane-0 broadcast."""
    tid = I.sreg(k, "tid.x") if tid is None else tid
    warp = I.shr(k, tid, WARP_THREADS.bit_length() - 1, dtype="u32")
    uniform = I.shfl(k, "idx", warp, 0)
    return tid, I.shr(k, uniform, WARPGROUP_WARPS.bit_length() - 1, dtype="u32")


def set_role_registers(k: KernelBuilder, split: RoleSplit, role: str) -> None:
    """The role's setmaxnreg (inc or dec, relative to the entry cap), or nothing at the cap."""
    direction = split.direction(role)
    if direction is not None:
        isa_setmaxnreg.setmaxnreg(k, direction, split.role(role).registers)


def emit_role_split(k: KernelBuilder, split: RoleSplit,
                    bodies: Mapping[str, Callable[[KernelBuilder, RoleContext], None]], *,
                    tid: Reg | None = None) -> None:
    """Branch once per role on the uniform warpgroup index, set the role's registers, run its
    body (`bodies[name](k, ctx)` emits it), and join after all roles."""
    check_directives(k, split)
    names = [r.name for r in split.roles]
    missing = [n for n in names if n not in bodies]
    extra = [n for n in bodies if n not in names]
    if missing or extra:
        raise RoleBudgetError(f"bodies must be given for exactly the roles {names}"
                              + (f"; missing {missing}" if missing else "")
                              + (f"; unknown {extra}" if extra else ""),
                              thing="role bodies", value=sorted(bodies))
    tid, wg = warpgroup_index(k, tid)
    labels = {n: k.label(f"role_{n}") for n in names}
    end = k.label("roles_end")
    for role in reversed(split.roles[1:]):   # highest role first; role 0 falls through
        first = split.first_warpgroup(role.name)
        I.bra(k, labels[role.name], uni=True, pred=I.setp(k, "ge", wg, first, dtype="u32"))
    for i, role in enumerate(split.roles):
        k.place(labels[role.name])
        set_role_registers(k, split, role.name)
        bodies[role.name](k, RoleContext(role, split, tid, wg))
        if i + 1 < len(split.roles):
            I.bra(k, end, uni=True)
    k.place(end)


__all__ = ["RoleContext", "check_directives", "emit_role_split", "set_role_registers",
           "warpgroup_index"]
