"""Special registers (%tid, %laneid, %clock64, ...) as one table, read with `sreg`.

`%warpid` is the PHYSICAL warp slot and may change under preemption: never derive warp roles
from it; use `%tid.x >> 5` broadcast with shfl (hopper-ptx.md §2). `%smid` likewise is for
diagnostics only. Cluster registers need sm_90.
"""
from __future__ import annotations

from ..builder import TYPES, KernelBuilder, PTXBuildError, Reg, Requirement, SpecialReg
from .checks import dest

_U32, _U64 = TYPES["u32"], TYPES["u64"]
_SM90 = Requirement((7, 8), 90)
_BASE = Requirement()


def _xyz(name: str, req=_BASE) -> dict:
    return {f"{name}.{axis}": (_U32, req) for axis in "xyz"}


# name (without %) -> (type, requirement)
SPECIAL_REGISTERS: dict[str, tuple] = {
    **_xyz("tid"), **_xyz("ntid"), **_xyz("ctaid"), **_xyz("nctaid"),
    "laneid": (_U32, _BASE), "warpid": (_U32, _BASE), "nwarpid": (_U32, _BASE),
    "smid": (_U32, _BASE), "nsmid": (_U32, _BASE), "gridid": (_U64, _BASE),
    "lanemask_eq": (_U32, _BASE), "lanemask_le": (_U32, _BASE), "lanemask_lt": (_U32, _BASE),
    "lanemask_ge": (_U32, _BASE), "lanemask_gt": (_U32, _BASE),
    "clock": (_U32, _BASE), "clock64": (_U64, _BASE), "globaltimer": (_U64, _BASE),
    "dynamic_smem_size": (_U32, _BASE), "total_smem_size": (_U32, _BASE),
    "aggr_smem_size": (_U32, Requirement((8, 1), 90)),
    **_xyz("cluster_ctaid", _SM90), **_xyz("cluster_nctaid", _SM90),
    **_xyz("clusterid", _SM90), **_xyz("nclusterid", _SM90),
    "cluster_ctarank": (_U32, _SM90), "cluster_nctarank": (_U32, _SM90),
    "is_explicit_cluster": (TYPES["pred"], _SM90),
}


def special(name: str) -> SpecialReg:
    """The operand for `%name` (e.g. special('tid.x')), usable wherever a source register is."""
    key = name.lstrip("%")
    if key not in SPECIAL_REGISTERS:
        raise PTXBuildError(f"unknown special register; known: {', '.join(SPECIAL_REGISTERS)}",
                            instruction="mov", operand="a", value=name)
    return SpecialReg(f"%{key}", SPECIAL_REGISTERS[key][0])


def sreg(k: KernelBuilder, name: str, *, out=None, pred=None) -> Reg:
    """Read a special register into a fresh register: `mov.u32 %u0, %tid.x;`.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); _ = sreg(k, "clock64"); k.body_lines()[-1]
    '    mov.u64 %ud0, %clock64;'
    """
    operand = special(name)
    requirement = SPECIAL_REGISTERS[operand.name[1:]][1]
    d = dest(k, f"mov.{operand.type}", out, operand.type)
    k.emit(f"mov.{operand.type}", (d, operand), defs=(d,), pred=pred, requires=requirement)
    return d
