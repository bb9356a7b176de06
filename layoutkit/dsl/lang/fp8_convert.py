"""The PTX of a `cast` op to or from the fp8 storage types (e4m3, e5m2), one or two values.

An fp8 register is a .b8. PTX (sm_90) converts fp8 only in pairs held in a .b16, low byte the
first value (layoutkit.ptx.isa.convert): two f32 -> `cvt.rn.satfinite.e4m3x2.f32` -> .b16 ->
two .b8; two .b8 -> .b16 -> `cvt.rn.f16x2.e4m3x2` -> two f16 -> f32/bf16/f64 (each step exact).
A lone value is paired with itself and its twin dropped. The trace (core/values.py `cast`)
pairs a register tensor's adjacent values and widens f16/bf16 sources to f32 first, so here a
source is f32 or fp8.
"""
from __future__ import annotations

from layoutkit.ptx.isa import convert

from ..core.types import DType

_PAIR = {"e4m3": "e4m3x2", "e5m2": "e5m2x2"}


def to_fp8(k, regs: list, dst: DType) -> list:
    """The .b8 registers of the f32 registers `regs` (1 or 2) rounded to dst (satfinite)."""
    lo, hi = regs[0], regs[-1]
    pair = convert.cvt_pack_fp8(k, hi=hi, lo=lo, dtype=_PAIR[dst.name])
    parts = convert.unpack(k, pair, 2)
    return list(parts[:len(regs)])


def from_fp8(k, regs: list, src: DType, dst: DType) -> list:
    """The `dst` registers (f16, f32, bf16 or f64) of the fp8 .b8 registers `regs` (1 or 2)."""
    pair = convert.pack(k, (regs[0], regs[-1]))
    halves = convert.unpack(k, convert.cvt_unpack_fp8(k, pair, _PAIR[src.name]), 2,
                            part_type="f16")[:len(regs)]
    if dst.name == "f16":
        return list(halves)
    rounding = "rn" if dst.name == "bf16" else None     # exact either way; PTX wants .rn
    return [convert.cvt(k, h, dst.ptx, rounding=rounding) for h in halves]


__all__ = ["to_fp8", "from_fp8"]
