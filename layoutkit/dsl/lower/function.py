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
from .index import IndexLowering
from .mbarrier import MbarrierLowering
from .sm80 import MmaLowering
from .roles import RoleLowering
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


class Lowering(SharedLowering, MbarrierLowering, RoleLowering, TmaLowering, WgmmaLowering,
               MmaLowering):
    def __init__(self, fn: Function):
        self.fn = fn
        self.module = Module(line_info=True)
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

    def op_load(self, op):
        k, vec, dtype = self.k, op.attrs["vec"], op.operands[0].type.dtype
        mask = self.operand(op.operands[2]) if op.attrs["masked"] else True
        if mask is False:
            for r in op.results:
                self.vals[r.id] = self.vals_other(op, dtype)
            return
        pred = None if mask is True else mask
        address = self._address(op)
        packed = dtype.nbytes == 2 and vec == 8
        mem_type, count = ("b32", 4) if packed else (dtype.ptx, vec)
        if pred is not None:
            outs = tuple(k.var(mem_type) for _ in range(count))
            fill = fill_bits(op.attrs["other"], dtype, packed)
            for out in outs:
                convert.mov(k, fill, dtype="b32" if packed else mov_type(dtype), out=out)
        else:
            outs = None
        got = memory.ld(k, "global", address, mem_type, vec=count,
                        out=(outs if count > 1 else outs[0]) if outs else None, pred=pred)
        got = got if isinstance(got, tuple) else (got,)
        if packed:
            got = tuple(r for word in got for r in convert.unpack(k, word, 2, part_type=dtype.ptx))
        for r, reg in zip(op.results, got):
            self.vals[r.id] = reg

    def vals_other(self, op, dtype):
        value = op.attrs["other"]
        if dtype.name in ("f16", "bf16"):
            return convert.mov(self.k, half_bits(float(value), dtype.name), dtype="b16",
                               out=self.k.reg(dtype.ptx))
        return float(value) if dtype.is_float else int(value)

    def op_store(self, op):
        k, vec = self.k, op.attrs["vec"]
        dtype = op.operands[0].type.dtype
        mask = self.operand(op.operands[-1]) if op.attrs["masked"] else True
        if mask is False:
            return
        data = [self.reg(v) for v in op.operands[2:2 + vec]]
        address = self._address(op)
        if dtype.nbytes == 2 and vec == 8:
            data = [convert.pack(k, data[i:i + 2]) for i in range(0, 8, 2)]
        memory.st(k, "global", address, tuple(data) if len(data) > 1 else data[0],
                  pred=None if mask is True else mask)

    # ---- control flow -------------------------------------------------------------------------
    def op_for(self, op):
        k = self.k
        start, stop, step, *inits = op.operands
        body = op.blocks[0]
        itype = start.type.ptx
        iv = k.var(itype)
        convert.mov(k, self.operand(start), dtype=itype, out=iv)
        carried = []
        for init in inits:
            var = k.var(init.type.ptx)
            convert.mov(k, self.operand(init), dtype=mov_type(init.type), out=var)
            carried.append(var)
        step_value = self.operand(step)
        forward = step_value > 0
        stop_value = self.operand(stop)
        top, end = k.label("loop"), k.label("loop_end")
        exit_cmp = "ge" if forward else "le"
        p = compare.setp(k, exit_cmp, iv, stop_value, dtype=itype)
        control.bra(k, end, pred=p)
        k.place(top)
        if op.attrs.get("unroll") == 1:
            control.pragma(k, "nounroll")
        self.vals[body.args[0].id] = iv
        for arg, var in zip(body.args[1:], carried):
            self.vals[arg.id] = var
        self.push()
        self.loops.append(carried)
        self.block(body)          # ends with the yield of the next carried values
        self.loops.pop()
        self.pop()
        arith.add(k, iv, step_value, dtype=itype, out=iv)
        q = compare.setp(k, "lt" if forward else "gt", iv, stop_value, dtype=itype)
        control.bra(k, top, pred=q)
        k.place(end)
        for result, var in zip(op.results, carried):
            self.vals[result.id] = var

    def op_yield(self, op):
        parent_args = self.loops[-1]    # the enclosing loop's carried registers
        k = self.k
        staged = []
        for value, var in zip(op.operands, parent_args):
            src = self.operand(value)
            if isinstance(src, Reg) and src.mutable and src != var:
                src = convert.mov(k, src, dtype=mov_type(value.type))   # parallel copy
            staged.append((src, var, value))
        for src, var, value in staged:
            if src != var:
                convert.mov(k, src, dtype=mov_type(value.type), out=var)

    def op_if(self, op):
        cond = self.operand(op.operands[0])
        if cond is False:
            return
        self.push()
        if cond is True:
            self.block(op.blocks[0])
        else:
            end = self.k.label("endif")
            control.bra(self.k, end, pred=~cond)
            self.block(op.blocks[0])
            self.k.place(end)
        self.pop()


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
