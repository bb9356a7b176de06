"""Operand validation shared by every instruction family (Gluon's layering: op -> check -> emit).

Each helper takes the instruction's name (for the message), the operand's name and value, and
either returns the operand ready to print or raises a PTXBuildError subclass naming the rule.
Family modules (this package and the Hopper families built on it) use only these and
`KernelBuilder.emit`.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..builder import (Address, Imm, KernelBuilder, NotPred, PTXBuildError, PTXRangeError, PTXType,
                       PTXTypeError, Reg, SpecialReg, Symbol, ptx_type, reg_compatible)
from ..builder.operands import _Sink, float_fits

Source = "Reg | NotPred | SpecialReg | Imm | int | float"


def int_range(ptype: PTXType) -> tuple[int, int]:
    """Immediates accepted for an integer/bit type: signed or unsigned reading of `bits` bits."""
    return -(1 << (ptype.bits - 1)), (1 << ptype.bits) - 1


def choose(instr: str, operand: str, value, allowed: Iterable):
    """`value` if it is one of `allowed`, else a PTXBuildError listing them."""
    allowed = tuple(allowed)
    if value not in allowed:
        shown = ", ".join(repr(a) for a in allowed)
        raise PTXBuildError(f"must be one of {shown}", instruction=instr, operand=operand, value=value)
    return value


def check_type(instr: str, dtype, allowed: Iterable[str]) -> PTXType:
    """The instruction type `dtype` if its name is in `allowed`."""
    ptype = ptx_type(dtype)
    allowed = tuple(allowed)
    if ptype.name not in allowed:
        raise PTXTypeError(f"the type must be one of .{', .'.join(allowed)}",
                           instruction=instr, operand="type", value=ptype.name)
    return ptype


def infer_type(instr: str, dtype, *values) -> PTXType:
    """`dtype` when given, else the type of the first register operand (immediates have none)."""
    if dtype is not None:
        return ptx_type(dtype)
    for value in values:
        if isinstance(value, (Reg, NotPred, SpecialReg)):
            return value.type
    raise PTXTypeError("the instruction type cannot be inferred from immediates alone; pass dtype=",
                       instruction=instr, value=values)


def imm_int(instr: str, operand: str, value, lo: int, hi: int) -> int:
    """A Python int in lo..hi (an immediate that PTX requires to be a constant)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PTXTypeError("must be an integer constant", instruction=instr, operand=operand,
                           value=value)
    if not lo <= value <= hi:
        raise PTXRangeError(f"must be in {lo}..{hi}", instruction=instr, operand=operand, value=value)
    return value


def _owned(k: KernelBuilder, instr: str, operand: str, reg: Reg) -> Reg:
    k.check_owned(reg, instr, operand)
    return reg


def source(k: KernelBuilder, instr: str, operand: str, value, ptype: PTXType, *, imm: bool = True):
    """A source operand of instruction type `ptype`: a compatible register, special register,
    or (when `imm`) a Python int/float that fits the type."""
    if isinstance(value, NotPred):
        if not ptype.is_pred:
            raise PTXTypeError(f"a negated predicate cannot stand where .{ptype} is expected",
                               instruction=instr, operand=operand, value=value)
        _owned(k, instr, operand, value.reg)
        return value
    if isinstance(value, (Reg, SpecialReg)):
        if not reg_compatible(ptype, value.type):
            raise PTXTypeError(f"a .{value.type} register cannot be used as .{ptype} (PTX needs "
                               "the same size, and an int/float/bit kind that matches)",
                               instruction=instr, operand=operand, value=value)
        if isinstance(value, Reg):
            _owned(k, instr, operand, value)
        return value
    if isinstance(value, Imm):
        value = value.value
    if imm and isinstance(value, (int, float)) and not isinstance(value, bool):
        if ptype.is_pred:
            raise PTXTypeError("a predicate operand must be a .pred register",
                               instruction=instr, operand=operand, value=value)
        if ptype.is_float:
            if ptype.bits not in (32, 64):
                raise PTXTypeError(f"PTX has no .{ptype} immediates; mov the bits into a register",
                                   instruction=instr, operand=operand, value=value)
            if not float_fits(float(value), ptype):
                raise PTXRangeError(f"overflows .{ptype}", instruction=instr, operand=operand,
                                    value=value)
            return Imm(float(value), ptype)
        if isinstance(value, float):
            raise PTXTypeError(f"a float immediate cannot be used as .{ptype}",
                               instruction=instr, operand=operand, value=value)
        lo, hi = int_range(ptype)
        if not lo <= value <= hi:
            raise PTXRangeError(f"does not fit .{ptype} (range {lo}..{hi})",
                                instruction=instr, operand=operand, value=value)
        return Imm(value, ptype)
    what = "a register or an immediate" if imm else "a register"
    raise PTXTypeError(f"must be {what} of type .{ptype}", instruction=instr, operand=operand,
                       value=value)


def dest(k: KernelBuilder, instr: str, out, ptype: PTXType, operand: str = "d") -> Reg:
    """The destination register: `out` checked against `ptype`, or a fresh SSA register."""
    if out is None:
        return k.reg(ptype)
    if not isinstance(out, Reg):
        raise PTXTypeError("a destination must be a register", instruction=instr, operand=operand,
                           value=out)
    if not reg_compatible(ptype, out.type):
        raise PTXTypeError(f"a .{out.type} register cannot receive a .{ptype} result",
                           instruction=instr, operand=operand, value=out)
    return _owned(k, instr, operand, out)


def sink_or_dest(k: KernelBuilder, instr: str, out, ptype: PTXType, operand: str = "d"):
    """Like `dest`, but the PTX sink `_` (builder.SINK) is allowed."""
    return out if isinstance(out, _Sink) else dest(k, instr, out, ptype, operand)


def address(k: KernelBuilder, instr: str, operand: str, value, *, offset: int = 0,
            widths: tuple[int, ...] = (32, 64)) -> Address:
    """A memory operand: an Address, or a register (u32/b32/s32 or 64-bit per `widths`) or a
    Symbol used as `[base]`, plus a byte `offset`."""
    if isinstance(value, Address):
        base, offset = value.base, value.offset + offset
    else:
        base = value
    if isinstance(base, Reg):
        if base.type.is_float or base.type.is_pred or base.type.bits not in widths:
            allowed = "/".join(f"{w}-bit" for w in widths)
            raise PTXTypeError(f"an address register is a {allowed} integer register",
                               instruction=instr, operand=operand, value=base)
        _owned(k, instr, operand, base)
    elif not isinstance(base, Symbol):
        raise PTXTypeError("an address is an Address, an integer register or a Symbol",
                           instruction=instr, operand=operand, value=value)
    if isinstance(offset, bool) or not isinstance(offset, int) or not -(1 << 31) <= offset < (1 << 31):
        raise PTXRangeError("an address offset is a 32-bit signed byte count", instruction=instr,
                            operand=operand, value=offset)
    return Address(base, offset)


def regs_of(k: KernelBuilder, instr: str, operand: str, values, ptype: PTXType, count: int,
            *, writes: bool = False, allow_sink: bool = False) -> tuple:
    """Exactly `count` registers compatible with `ptype` (a vector or MMA fragment) that the
    instruction reads, or writes when `writes`."""
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    if len(values) != count:
        raise PTXRangeError(f"needs exactly {count} registers of .{ptype}, got {len(values)}",
                            instruction=instr, operand=operand, value=values)
    out = []
    for i, v in enumerate(values):
        if allow_sink and isinstance(v, _Sink):
            out.append(v)
            continue
        if not isinstance(v, Reg):
            raise PTXTypeError(f"element {i} must be a register", instruction=instr,
                               operand=operand, value=v)
        name = f"{operand}[{i}]"
        out.append(dest(k, instr, v, ptype, name) if writes else
                   source(k, instr, name, v, ptype, imm=False))
    return tuple(out)


def mods(*parts) -> str:
    """Join opcode parts, dropping empty ones: mods('add', 'rn', '', 'f32') == 'add.rn.f32'."""
    return ".".join(p for p in parts if p)


def result_type(itype: PTXType, *values) -> PTXType:
    """The type of a fresh destination: the first register operand's type when it fits the
    instruction type (so u32 operands of and.b32 give a u32 result), else the instruction type."""
    for value in values:
        if isinstance(value, Reg):
            return value.type if reg_compatible(itype, value.type) else itype
    return itype


def flag(instr: str, operand: str, value) -> bool:
    """A boolean modifier switch (ftz=, sat=, ...); refuses non-bools so typos do not pass."""
    if not isinstance(value, bool):
        raise PTXTypeError("must be True or False", instruction=instr, operand=operand, value=value)
    return value
