"""setmaxnreg: move registers between the warpgroups of a warp-specialized CTA (sm_90a).

Rules (PTX ISA "setmaxnreg", hopper-ptx.md §6, ptxas 13.0): `setmaxnreg.{inc,dec}.sync.aligned
.u32 N` with N an immediate multiple of 8 in 24..256, executed by all four warps of a
warpgroup (branch on a uniform warpgroup index). `.dec` releases registers down to N (N must
not exceed the current count), `.inc` blocks until the CTA's pool can raise it to N (N must not
be below it); new registers hold garbage.

C7508: ptxas honours setmaxnreg only when the entry has a register cap at entry — `.maxnreg`,
or `.maxntid`/`.reqntid` together with `.minnctapersm` (ptxas then derives the cap, e.g. 168
for 384 threads). Without one it prints the info line "(C7508) Potential Performance Loss:
'setmaxnreg' ignored; unable to determine register count at entry." and DROPS the instruction
(an info line, not an error): the toolchain turns it into SetmaxnregIgnoredWarning, and
`has_register_cap` tells whether a kernel's directives avoid it.
"""
from __future__ import annotations

from ..builder import KernelBuilder, PTXTypeError
from .checks import choose
from .hopper_operands import SM90A, u32_operand

MIN_REGISTERS, MAX_REGISTERS, REGISTER_GRANULE = 24, 256, 8
REQUIREMENT = SM90A            # setmaxnreg exists only on sm_90a


def setmaxnreg(k: KernelBuilder, action: str, count: int, *, pred=None) -> None:
    """`setmaxnreg.{inc,dec}.sync.aligned.u32 count` for the executing warpgroup.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k", maxnreg=168); setmaxnreg(k, "dec", 24); k.body_lines()[-1]
    '    setmaxnreg.dec.sync.aligned.u32 24;'
    """
    choose("setmaxnreg", "action", action, ("inc", "dec"))
    instr = f"setmaxnreg.{action}.sync.aligned.u32"
    if not isinstance(count, int) or isinstance(count, bool):
        raise PTXTypeError("must be an integer constant (setmaxnreg takes an immediate)",
                           instruction=instr, operand="count", value=count)
    value = u32_operand(k, instr, "count", count, MIN_REGISTERS, MAX_REGISTERS,
                        multiple=REGISTER_GRANULE, rule="registers per thread, in steps of 8")
    k.emit(instr, (value,), pred=pred, requires=REQUIREMENT)


def has_register_cap(k: KernelBuilder) -> bool:
    """Whether `k`'s directives give ptxas a register count at entry (else C7508 drops
    every setmaxnreg of the kernel)."""
    d = k.directives
    return d.maxnreg is not None or (d.minnctapersm is not None and bool(d.maxntid or d.reqntid))


__all__ = ["MAX_REGISTERS", "MIN_REGISTERS", "REGISTER_GRANULE", "REQUIREMENT",
           "has_register_cap", "setmaxnreg"]
