"""Lowering of TMA copies (layoutkit/dsl/sm90/tma/copy.py): cp.async.bulk.tensor loads (and multicast)
into shared tiles and stores from them, with their bulk async-group commit and wait. A mixin of
`Lowering`: one `op_<name>` method per IR op.

Addresses: the tensor map is the generic address of its by-value parameter (`cvta.param`, made
once per scope that uses it); a shared tile is `smem + base + offset * element bytes` (the
offset is a box start, a multiple of the swizzle period, so the swizzle leaves it unchanged);
the barrier is `smem + its byte offset`; a multicast mask is `pattern << mask_base` (.b16).
"""
from __future__ import annotations

from layoutkit.ptx.builder import Address, Reg
from layoutkit.ptx.isa import arith, bits, convert, memory
from layoutkit.ptx.isa import tma as isa_tma

from ..core.types import DTYPES


class TmaLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""

    def _tma_u32(self, value) -> "Reg | int":
        v = self.operand(value)
        if isinstance(v, int):
            return v
        return v if v.type.name == "u32" else \
            convert.mov(self.k, v, dtype="b32", out=self.k.reg("u32"))

    def _tma_map(self, value) -> Reg:
        key = ("tensormap", value.id)
        for cache in reversed(self.addr_cache):      # made in this scope or one enclosing it
            if key in cache:
                return cache[key]
        address = memory.cvta_param(self.k, self.vals[value.id])
        self.addr_cache[-1][key] = address
        return address

    def _tma_shared(self, offset_value, scale: int, base: int) -> Address:
        offset = self._tma_u32(offset_value)
        if isinstance(offset, int):
            return Address(self.smem, base + offset * scale)
        if scale == 1:
            return Address(arith.add(self.k, offset, self.smem, dtype="u32"), base)
        return Address(arith.mad(self.k, offset, scale, self.smem, mode="lo", dtype="u32"), base)

    def _tma_coords(self, values) -> tuple:
        return tuple(self.operand(v) if isinstance(self.operand(v), int) else self.reg(v)
                     for v in values)

    def op_tma_load(self, op):
        a = op.attrs
        tmap, bar, dst, *rest = op.operands
        rank = len(a["box"])
        nbytes = DTYPES[a["dtype"]].nbytes
        mask = None
        if a["multicast"] is not None:
            shift = self._tma_u32(rest[rank])
            pattern = convert.mov(self.k, a["multicast"]["pattern"], dtype="b16")
            mask = bits.shl(self.k, pattern, shift, dtype="b16")
        isa_tma.load(self.k, self._tma_shared(dst, nbytes, a["base"]), self._tma_map(tmap),
                     self._tma_coords(rest[:rank]), self._tma_shared(bar, 1, 0), multicast=mask)

    def op_tma_store(self, op):
        a = op.attrs
        tmap, src, *coords = op.operands
        nbytes = DTYPES[a["dtype"]].nbytes
        isa_tma.store(self.k, self._tma_map(tmap), self._tma_coords(coords),
                      self._tma_shared(src, nbytes, a["base"]))

    def op_tma_store_commit(self, op):
        isa_tma.commit_group(self.k)

    def op_tma_store_wait(self, op):
        isa_tma.wait_group(self.k, op.attrs["pending"], read=not op.attrs["writes"])
