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

