"""Lowering of the block-level ops: shared-memory loads/stores (with the swizzle applied to the
element offset at run time), the block barrier and warp shuffles. A mixin of `Lowering`.

A shared address is `smem + base + Sw(offset) * nbytes + disp * nbytes`: `smem` the 32-bit
shared::cta address of the kernel's dynamic shared array, `base` the buffer's byte offset,
`Sw` the buffer's swizzle (y = x ^ ((x & yyy_mask) >> S), three instructions).
"""
from __future__ import annotations

from layoutkit.algebra import Swizzle
from layoutkit.ptx.builder import Address, Reg
from layoutkit.ptx.isa import arith, bits, convert, memory, warp
from layoutkit.sync import cta_sync

SMEM_SYMBOL = "smem"


class SharedLowering:
    """Methods `op_shared_load`, `op_shared_store`, `op_barrier`, `op_shfl` for `Lowering`."""

    def declare_shared(self) -> None:
        """The dynamic shared array and its address, once at the kernel's top."""
        self.smem = None
        if self.fn.shared:
            align = max(a.align for a in self.fn.shared)
            symbol = self.module.extern_shared(SMEM_SYMBOL, align=max(align, 16))
            self.smem = convert.mov(self.k, symbol, dtype="u32")

    def _swizzled(self, offset, swizzle) -> "Reg | int":
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

    def _shared_address(self, op, nbytes: int) -> Address:
        a = op.attrs
        disp = a["base"] + a["disp"] * nbytes
        key = ("shared", op.operands[0].id, a["swizzle"], nbytes)
        for cache in reversed(self.addr_cache):
            if key in cache:
                return Address(cache[key], disp)
        offset = self._swizzled(self.operand(op.operands[0]), a["swizzle"])
        if isinstance(offset, int):
            return Address(self.smem, disp + offset * nbytes)
        offset = convert.mov(self.k, offset, dtype="b32", out=self.k.reg("u32")) \
            if offset.type.name != "u32" else offset
        address = arith.mad(self.k, offset, nbytes, self.smem, mode="lo", dtype="u32")
        self.addr_cache[-1][key] = address
        return Address(address, disp)

    def op_shared_load(self, op):
        dtype, vec = op.results[0].type, op.attrs["vec"]
        address = self._shared_address(op, dtype.nbytes)
        packed = dtype.nbytes == 2 and vec == 8
        mem_type, count = ("b32", 4) if packed else (dtype.ptx, vec)
        got = memory.ld(self.k, "shared", address, mem_type, vec=count)
        got = got if isinstance(got, tuple) else (got,)
        if packed:
            got = tuple(r for word in got
                        for r in convert.unpack(self.k, word, 2, part_type=dtype.ptx))
        for r, reg in zip(op.results, got):
            self.vals[r.id] = reg

    def op_shared_store(self, op):
        vec = op.attrs["vec"]
        data = [self.reg(v) for v in op.operands[1:1 + vec]]
        address = self._shared_address(op, op.operands[1].type.nbytes)
        if op.operands[1].type.nbytes == 2 and vec == 8:
            data = [convert.pack(self.k, data[i:i + 2]) for i in range(0, 8, 2)]
        memory.st(self.k, "shared", address, tuple(data) if len(data) > 1 else data[0])

    def op_barrier(self, op):
        cta_sync(self.k)

    def op_shfl(self, op):
        value, lane = op.operands
        t = value.type
        src = self.reg(value)
        lane = self.operand(lane)
        if t.nbytes == 2:        # shfl moves 32 bits: carry a 16-bit value in the low half
            word = convert.pack(self.k, (src, src))
            got = warp.shfl(self.k, op.attrs["mode"], word, lane)
            self.define(op, convert.unpack(self.k, got, 2, part_type=t.ptx)[0])
        else:
            self.define(op, warp.shfl(self.k, op.attrs["mode"], src, lane))
