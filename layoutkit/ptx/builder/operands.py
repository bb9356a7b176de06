"""PTX operands: registers, negated predicates, immediates, symbols, addresses, vectors, labels.

All are small frozen values whose `str` is their PTX spelling, so an instruction's text is a
join of its operands' strings and is byte-stable.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from .types import PTXType, TYPES  # noqa: F401  (TYPES: the doctests use it)


@dataclass(frozen=True)
class Reg:
    """A virtual register `name` of PTX type `type`. `mutable` registers (KernelBuilder.var) may be
    written many times (loop-carried values); all others are written exactly once (SSA)."""

    name: str
    type: PTXType
    mutable: bool = False

    def __str__(self) -> str:
        return self.name

    def __invert__(self) -> "NotPred":
        if not self.type.is_pred:
            from .errors import PTXTypeError
            raise PTXTypeError("only a .pred register can be negated with ~", value=self)
        return NotPred(self)


@dataclass(frozen=True)
class NotPred:
    """A negated predicate, `!%p0`: as an instruction guard (`@!%p0`) or a setp/selp source."""

    reg: Reg

    @property
    def type(self) -> PTXType:
        return self.reg.type

    @property
    def name(self) -> str:
        return "!" + self.reg.name

    def __str__(self) -> str:
        return self.name

    def __invert__(self) -> Reg:
        return self.reg


@dataclass(frozen=True)
class SpecialReg:
    """A read-only special register such as `%tid.x` (see isa.special for the table)."""

    name: str
    type: PTXType

    def __str__(self) -> str:
        return self.name


def _format_float(value: float, ptype: PTXType) -> str:
    if ptype.bits == 64:
        return "0d%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", value))[0]


@dataclass(frozen=True)
class Imm:
    """An immediate of type `type`. Integers print in decimal below 2**16 and in hex above
    (masks read better); floats print as exact bit patterns (`0f3F800000`, `0d...`).

    >>> str(Imm(1.0, TYPES["f32"])), str(Imm(0xFFFFFFFF, TYPES["b32"])), str(Imm(-3, TYPES["s32"]))
    ('0f3F800000', '0xFFFFFFFF', '-3')
    """

    value: int | float
    type: PTXType

    def __str__(self) -> str:
        if self.type.is_float:
            return _format_float(float(self.value), self.type)
        v = int(self.value)
        return str(v) if -(1 << 16) < v < (1 << 16) else ("-" if v < 0 else "") + "0x%X" % abs(v)


def float_fits(value: float, ptype: PTXType) -> bool:
    """Whether a Python float converts to `ptype` (f32/f64) without overflowing to infinity."""
    if math.isinf(value) or math.isnan(value) or ptype.bits == 64:
        return True
    try:
        struct.pack("<f", value)
    except OverflowError:
        return False
    return True


@dataclass(frozen=True)
class Symbol:
    """A named PTX variable: a kernel parameter, a shared/global array or the extern smem array.
    `space` is the state space ('param', 'shared', 'global', 'local')."""

    name: str
    space: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Address:
    """A memory operand `[base+offset]`: base is a 32/64-bit register or a Symbol, offset in bytes.

    >>> str(Address(Symbol("smem", "shared"), 16)), str(Address(Reg("%rd3", TYPES["b64"]), -8))
    ('[smem+16]', '[%rd3+-8]')
    """

    base: "Reg | Symbol"
    offset: int = 0

    def __str__(self) -> str:
        return f"[{self.base}+{self.offset}]" if self.offset else f"[{self.base}]"

    def __add__(self, offset: int) -> "Address":
        return Address(self.base, self.offset + int(offset))


@dataclass(frozen=True)
class Vector:
    """A brace list `{a, b, ...}` of registers (or `_` sinks) for vector loads/stores and MMA."""

    items: tuple

    def __str__(self) -> str:
        return "{" + ", ".join(str(i) for i in self.items) + "}"


@dataclass(frozen=True)
class Label:
    """A branch target, unique within its kernel (`owner`); placed once with KernelBuilder.place."""

    name: str
    owner: str = ""

    def __str__(self) -> str:
        return self.name


class _Sink:
    """The PTX bit bucket `_` (a destination whose value is discarded)."""

    __slots__ = ()

    def __str__(self) -> str:
        return "_"

    def __repr__(self) -> str:
        return "SINK"


SINK = _Sink()

Operand = "Reg | NotPred | SpecialReg | Imm | Symbol | Address | Vector | Label | _Sink"
