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


def _half_bits(value: float, name: str) -> int:
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
            value = op.results[0]
            if isinstance(value.type, TensorMapType):   # used by address, never loaded
                self.vals[value.id] = k.tensormap_param(op.attrs["name"])
                continue
            ptype = "u64" if isinstance(value.type, PointerType) else value.type.ptx
            param = k.param(op.attrs["name"], ptype if ptype not in ("bf16", "f16") else "b16")
            with k.at(op.location):
                self.vals[value.id] = memory.ld_param(k, param)
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
                getattr(self, "op_" + op.name)(op)

    def define(self, op: Op, value) -> None:
        self.vals[op.results[0].id] = value

    # ---- scalar ops ---------------------------------------------------------------------------
    def op_thread_idx(self, op):
        self.define(op, special.sreg(self.k, "tid." + "xyz"[op.attrs["axis"]]))

    def op_block_idx(self, op):
        self.define(op, special.sreg(self.k, "ctaid." + "xyz"[op.attrs["axis"]]))

    def op_const(self, op):
        t, value = op.results[0].type, op.attrs["value"]
        if t == bool_:
            self.define(op, bool(value))
        elif t.name in ("f16", "bf16"):
            self.define(op, convert.mov(self.k, _half_bits(float(value), t.name), dtype="b16",
                                        out=self.k.reg(t.ptx)))
        else:
            self.define(op, value)

    def op_index(self, op):
        for sym, value in zip(op.attrs["syms"], op.operands):
            self.index.env[sym] = self.reg(value)
        self.define(op, self.index.emit(op.attrs["expr"], op.results[0].type.ptx))

    def op_binary(self, op):
        a, b = (self.operand(v) for v in op.operands)
        t, kind = op.results[0].type, op.attrs["kind"]
        if not isinstance(a, Reg):
            a = self.reg(op.operands[0])
        if kind in ("add", "sub"):
            d = getattr(arith, kind)(self.k, a, b, dtype=t.ptx)
        elif kind == "mul":
            d = arith.mul(self.k, a, b, dtype=t.ptx)
        elif kind == "div":
            d = arith.div(self.k, a, b, dtype=t.ptx, rounding="rn" if t.is_float else None)
        else:
            d = getattr(arith, kind + "_")(self.k, a, b, dtype=t.ptx)
        self.define(op, d)

    def op_fma(self, op):
        a, b, c = (self.operand(v) for v in op.operands)
        self.define(op, arith.fma(self.k, self.reg(op.operands[0]), b, c,
                                  dtype=op.results[0].type.ptx))

    def op_unary(self, op):
        a, t, kind = self.reg(op.operands[0]), op.results[0].type, op.attrs["kind"]
        k = self.k
        if kind in ("neg", "abs"):
            d = getattr(arith, kind if kind == "neg" else "abs_")(k, a, dtype=t.ptx)
        elif kind == "exp2":
            d = sfu.ex2(k, a, dtype=t.ptx, ftz=t.name == "bf16" or op.attrs.get("ftz", False))
        elif kind == "log2":
            d = sfu.lg2(k, a, dtype=t.ptx)
        elif kind == "sqrt":
            d = sfu.sqrt(k, a, rounding="rn", dtype=t.ptx)
        elif kind == "rcp":
            d = sfu.rcp(k, a, rounding="rn", dtype=t.ptx)
        else:
            d = sfu.rsqrt(k, a, dtype=t.ptx)
        self.define(op, d)

    def op_cast(self, op):
        src, dst = op.operands[0].type, op.results[0].type
        a = self.reg(op.operands[0])
        if src.is_float and dst.is_float:
            rounding = "rn" if dst.nbytes < src.nbytes else None
        elif dst.is_float:
            rounding = "rn"
        elif src.is_float:
            rounding = "rzi"
        else:
            rounding = None
        self.define(op, convert.cvt(self.k, a, dst.ptx, rounding=rounding))

    def op_cmp(self, op):
        a, b = (self.operand(v) for v in op.operands)
        t = op.operands[0].type.ptx
        if not isinstance(a, Reg):
            if not isinstance(b, Reg):
                self.define(op, _static_cmp(op.attrs["kind"], a, b))
                return
            a = self.reg(op.operands[0])
        self.define(op, compare.setp(self.k, op.attrs["kind"], a, b, dtype=t))

    def op_logic(self, op):
        a, b = (self.operand(v) for v in op.operands)
        if isinstance(a, bool) or isinstance(b, bool):
            static, other = (a, b) if isinstance(a, bool) else (b, a)
            if op.attrs["kind"] == "and":
                self.define(op, other if static else False)
            else:
                self.define(op, True if static else other)
            return
        self.define(op, getattr(bits, op.attrs["kind"] + "_")(self.k, a, b))

    def op_select(self, op):
        c, a, b = (self.operand(v) for v in op.operands)
        t = op.results[0].type
        if isinstance(c, bool):
            self.define(op, a if c else b)
            return
        ptype = {"bf16": "b16", "f16": "b16"}.get(t.name, t.ptx)
        d = compare.selp(self.k, self.reg(op.operands[1]), b, c, dtype=ptype,
                         out=self.k.reg(t.ptx))
        self.define(op, d)

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
            fill = _fill_bits(op.attrs["other"], dtype, packed)
            for out in outs:
                convert.mov(k, fill, dtype="b32" if packed else _mov_type(dtype), out=out)
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
            return convert.mov(self.k, _half_bits(float(value), dtype.name), dtype="b16",
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
            convert.mov(k, self.operand(init), dtype=_mov_type(init.type), out=var)
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
                src = convert.mov(k, src, dtype=_mov_type(value.type))   # parallel copy
            staged.append((src, var, value))
        for src, var, value in staged:
            if src != var:
                convert.mov(k, src, dtype=_mov_type(value.type), out=var)

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


def _mov_type(dtype) -> str:
    return {"bf16": "b16", "f16": "b16", "bool": "pred"}.get(dtype.name, dtype.ptx)


def _fill_bits(value, dtype, packed: bool):
    if dtype.name in ("f16", "bf16"):
        half = _half_bits(float(value), dtype.name)
        return half | (half << 16) if packed else half
    return float(value) if dtype.is_float else int(value)


def _static_cmp(kind: str, a, b) -> bool:
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
            "ne": a != b}[kind]


def lower(fn: Function) -> str:
    """The PTX text of `fn` (one `.visible .entry` named fn.name)."""
    return Lowering(fn).run().text()
