"""Lowering of a verified IR `Function` to a PTX module through layoutkit.ptx's builder.

Values map to PTX registers (or immediates for integer/f32/f64 constants); index expressions go
through `IndexLowering` (shared subexpressions per scope); `for` becomes a guarded loop with
mutable registers for the induction variable and the carried values; `if` a branch over its
block. Each op is stamped with its source line (`.loc`), so SASS maps back to the user's code.
"""
from __future__ import annotations

import struct

from layoutkit.ptx.builder import Address, Module, Reg
from layoutkit.ptx.isa import arith, bits, compare, control, convert, memory, special
from layoutkit.ptx.isa import transcendental as sfu

from ..core.ir import Block, Function, Op
from ..core.opdef import SM90A
from .index import IndexLowering
from .shared import SharedLowering
from .tma import TmaLowering
from .wgmma import WgmmaLowering
from ..core.types import PointerType, TensorMapType, bool_

_INVERSE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def half_bits(value: float, name: str) -> int:
    """The 16-bit pattern of `value` as f16 or bf16 (round to nearest even)."""
    if name == "f16":
        return struct.unpack("<H", struct.pack("<e", value))[0]
    f32 = struct.unpack("<I", struct.pack("<f", value))[0]
    return (f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16   # round to nearest even (bf16)


class Lowering(SharedLowering, TmaLowering, WgmmaLowering):
    def __init__(self, fn: Function):
        self.fn = fn
        self.module = Module(line_info=True, target=getattr(fn, "target", SM90A))
        self.k = self.module.kernel(fn.name, reqntid=32 * fn.num_warps)
        self.vals: dict[int, object] = {}
        self.index = IndexLowering(self.k, {})
        self.addr_cache: list[dict] = [{}]
        self.loops: list[list[Reg]] = []

    def run(self) -> Module:
        k = self.k
        for op in self.fn.params:
            with k.at(op.location):
                op.defn.lower(op, self)
        self.declare_shared()
        self.block(self.fn.body)
        control.ret(k)
        return self.module

    # ---- helpers ----------------------------------------------------------------------------
    def reg(self, value) -> Reg:
        """The value as a register (materializing an immediate)."""
        v = self.vals[value.id]
        if isinstance(v, Reg):
            return v
        return convert.mov(self.k, v, dtype=value.type.ptx)

    def operand(self, value):
        return self.vals[value.id]

    def push(self):
        self.index.push()
        self.addr_cache.append({})

    def pop(self):
        self.index.pop()
        self.addr_cache.pop()

    def block(self, block: Block) -> None:
        for op in block.ops:
            with self.k.at(op.location):
                op.defn.lower(op, self)

    def define(self, op: Op, value) -> None:
        self.vals[op.results[0].id] = value

    # ---- memory -------------------------------------------------------------------------------
    def _address(self, op) -> Address:
        ptr, offset = op.operands[0], op.operands[1]
        nbytes = ptr.type.dtype.nbytes
        disp = op.attrs["disp"] * nbytes
        off = self.operand(offset)
        if not isinstance(off, Reg):
            return Address(self.reg(ptr), disp + off * nbytes)
        key = (ptr.id, offset.id)
        for cache in reversed(self.addr_cache):
            if key in cache:
                return Address(cache[key], disp)
        base = arith.mad(self.k, off, nbytes, self.reg(ptr), mode="lo", dtype="s64") \
            if nbytes > 1 else arith.add(self.k, off, self.reg(ptr), dtype="s64")
        self.addr_cache[-1][key] = base
        return Address(base, disp)

    def vals_other(self, op, dtype):
        value = op.attrs["other"]
        if dtype.name in ("f16", "bf16"):
            return convert.mov(self.k, half_bits(float(value), dtype.name), dtype="b16",
                               out=self.k.reg(dtype.ptx))
        return float(value) if dtype.is_float else int(value)

    # ---- control flow -------------------------------------------------------------------------
def mov_type(dtype) -> str:
    return {"bf16": "b16", "f16": "b16", "bool": "pred"}.get(dtype.name, dtype.ptx)


def fill_bits(value, dtype, packed: bool):
    if dtype.name in ("f16", "bf16"):
        half = half_bits(float(value), dtype.name)
        return half | (half << 16) if packed else half
    return float(value) if dtype.is_float else int(value)


def static_cmp(kind: str, a, b) -> bool:
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
            "ne": a != b}[kind]


def lower(fn: Function) -> str:
    """The PTX text of `fn` (one `.visible .entry` named fn.name)."""
    return Lowering(fn).run().text()
