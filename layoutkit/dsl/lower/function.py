"""Lowering of a verified IR `Function` to a PTX module through layoutkit.ptx's builder.

Each op lowers through its definition's `lower(op, lw)` facet (layoutkit.dsl.core.opdef), with
the `Lowering` here as `lw`: values map to PTX registers (or immediates for integer/f32/f64
constants), index expressions go through `IndexLowering` (shared subexpressions per scope),
shared addresses apply the buffer's swizzle to the element offset at run time
(`smem + base + Sw(offset) * n + disp * n`, Sw(x) = x ^ ((x & yyy_mask) >> S)). Each op is
stamped with its source line (`.loc`), so SASS maps back to the user's code.
"""
from __future__ import annotations

import struct

from layoutkit.algebra import Swizzle
from layoutkit.ptx.builder import Address, Module, Reg
from layoutkit.ptx.isa import arith, bits, control, convert

from ..core.ir import Block, Function, Op
from ..core.opdef import SM90A
from ..interpreter.float8 import round_fp8, to_bits
from .index import IndexLowering

def half_bits(value: float, name: str) -> int:
    """The 16-bit pattern of `value` as f16 or bf16 (round to nearest even)."""
    if name == "f16":
        return struct.unpack("<H", struct.pack("<e", value))[0]
    f32 = struct.unpack("<I", struct.pack("<f", value))[0]
    return (f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16   # round to nearest even (bf16)


SMEM_SYMBOL = "smem"


class Lowering:
    """The state of lowering one Function: the PTX module and kernel being built (`k`), each
    IR value's register or immediate (`vals`), index expressions shared per scope (`index`),
    address arithmetic shared per scope (`addr_cache`), the enclosing loops' carried registers
    (`loops`), and the dynamic shared array's address (`smem`). Each op's `lower` facet works
    through it."""

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
    # ---- shared memory ------------------------------------------------------------------------
    def declare_shared(self) -> None:
        """The dynamic shared array and its address, once at the kernel's top."""
        self.smem = None
        if self.fn.shared:
            align = max(a.align for a in self.fn.shared)
            symbol = self.module.extern_shared(SMEM_SYMBOL, align=max(align, 16))
            self.smem = convert.mov(self.k, symbol, dtype="u32")

    def swizzled(self, offset, swizzle) -> "Reg | int":
        if swizzle is None:
            return offset
        sw = Swizzle(*swizzle)
        if isinstance(offset, int):
            return sw(offset)
        k = self.k
        picked = bits.and_(k, offset, sw.yyy_mask, dtype="b32")
        moved = bits.shr(k, picked, sw.shift, dtype="b32") if sw.shift >= 0 else \
            bits.shl(k, picked, -sw.shift, dtype="b32")
        return bits.xor(k, offset, moved, dtype="b32", out=k.reg("u32"))

    def shared_address(self, op, nbytes: int) -> Address:
        a = op.attrs
        disp = a["base"] + a["disp"] * nbytes
        key = ("shared", op.operands[0].id, a["swizzle"], nbytes)
        for cache in reversed(self.addr_cache):
            if key in cache:
                return Address(cache[key], disp)
        offset = self.swizzled(self.operand(op.operands[0]), a["swizzle"])
        if isinstance(offset, int):
            return Address(self.smem, disp + offset * nbytes)
        offset = convert.mov(self.k, offset, dtype="b32", out=self.k.reg("u32")) \
            if offset.type.name != "u32" else offset
        address = arith.mad(self.k, offset, nbytes, self.smem, mode="lo", dtype="u32")
        self.addr_cache[-1][key] = address
        return Address(address, disp)

    # ---- global memory ------------------------------------------------------------------------
    def global_address(self, op) -> Address:
        """The address of a global load/store: pointer + (offset + disp) elements (the
        offset's arithmetic shared per scope)."""
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

    def masked_fill(self, op, dtype):
        """The value a masked-off load gives (its `other`), as a register or immediate."""
        value = op.attrs["other"]
        if dtype.name in ("f16", "bf16"):
            return convert.mov(self.k, half_bits(float(value), dtype.name), dtype="b16",
                               out=self.k.reg(dtype.ptx))
        if dtype.storage_only:
            return byte_register(self.k, fill_bits(value, dtype, 1))
        return float(value) if dtype.is_float else int(value)

    # ---- control flow -------------------------------------------------------------------------
def mov_type(dtype) -> str:
    return {"bf16": "b16", "f16": "b16", "bool": "pred"}.get(dtype.name, dtype.ptx)


def fill_bits(value, dtype, per: int = 1):
    """The immediate of `value` as dtype, repeated `per` times in one word for 8- and 16-bit
    types (a packed fill); a float or int for wider types."""
    if dtype.name in ("f16", "bf16"):
        bits = half_bits(float(value), dtype.name)
    elif dtype.storage_only:                         # fp8: cvt.rn.satfinite's rounding
        bits = int(to_bits(round_fp8(float(value), dtype.name), dtype.name))
    else:
        return float(value) if dtype.is_float else int(value)
    return sum(bits << (8 * dtype.nbytes * i) for i in range(per))


def byte_register(k, bits: int, out=None):
    """A .b8 register holding `bits` (PTX has no mov.b8: a .b16 immediate narrowed by cvt)."""
    return convert.cvt(k, convert.mov(k, bits, dtype="b16"), "u8", src_type="u16",
                       out=out if out is not None else k.reg("b8"))


def static_cmp(kind: str, a, b) -> bool:
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
            "ne": a != b}[kind]


def lower(fn: Function) -> str:
    """The PTX text of `fn` (one `.visible .entry` named fn.name)."""
    return Lowering(fn).run().text()
