"""Lowering of the sm_80 matrix path (layoutkit/dsl/sm80/mma.py, ldmatrix.py, cp_async.py):
ldmatrix, mma.sync, cp.async with its commit/wait groups. A mixin of `Lowering`.

Shared addresses are `smem + base + Sw(inner) * nbytes + outer * nbytes + disp * nbytes`
(smem_address.py); each (inner, outer) pair is computed once per scope. An ldmatrix register
is unpacked into its two 16-bit values for the IR, and mma.sync takes the packed register
back when its operand pair is exactly that register's halves (no repacking).
"""
from __future__ import annotations

from layoutkit.ptx.builder import Address
from layoutkit.ptx.isa import arith, async_copy, compare, convert, matrix


class MmaLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""

    def _packed_pairs(self) -> dict:
        """(lo value id, hi value id) -> the 32-bit register ldmatrix loaded them in."""
        return self.__dict__.setdefault("_mma_packed", {})

    def _u32(self, value):
        reg = self.reg(value)
        if reg.type.name == "u32":
            return reg
        return convert.mov(self.k, reg, dtype="b32", out=self.k.reg("u32"))

    def _split_shared_address(self, op, inner, outer, disp: int, nbytes: int) -> Address:
        swizzle = op.attrs["swizzle"]
        const = op.attrs["base"] + disp * nbytes
        key = ("split-shared", inner.id, outer.id, swizzle, nbytes)
        for cache in reversed(self.addr_cache):
            if key in cache:
                reg, extra = cache[key]
                return Address(reg, const + extra)
        offset = self._swizzled(self.operand(inner), swizzle)
        extra, address = 0, self.smem
        if isinstance(offset, int):
            extra += offset * nbytes
        else:
            if offset.type.name != "u32":
                offset = convert.mov(self.k, offset, dtype="b32", out=self.k.reg("u32"))
            address = arith.mad(self.k, offset, nbytes, address, mode="lo", dtype="u32")
        rest = self.operand(outer)
        if isinstance(rest, int):
            extra += rest * nbytes
        else:
            address = arith.mad(self.k, self._u32(outer), nbytes, address, mode="lo",
                                dtype="u32")
        self.addr_cache[-1][key] = (address, extra)
        return Address(address, const + extra)

    def op_ldmatrix(self, op):
        k, dtype = self.k, op.results[0].type
        inner, outer = op.operands
        address = self._split_shared_address(op, inner, outer, op.attrs["disp"], dtype.nbytes)
        regs = matrix.ldmatrix(k, address, op.attrs["num"], trans=op.attrs["trans"])
        pairs = self._packed_pairs()
        for i, reg in enumerate(regs):
            lo, hi = op.results[2 * i], op.results[2 * i + 1]
            self.vals[lo.id], self.vals[hi.id] = convert.unpack(k, reg, 2, part_type=dtype.ptx)
            pairs[(lo.id, hi.id)] = reg

    def _packed(self, lo, hi):
        reg = self._packed_pairs().get((lo.id, hi.id))
        if reg is not None:
            return reg
        return convert.pack(self.k, (self.reg(lo), self.reg(hi)))

    def op_mma_sync(self, op):
        a = op.attrs
        na, nb = a["a_layout"][1].size(), a["b_layout"][1].size()
        values = op.operands
        ra = [self._packed(values[i], values[i + 1]) for i in range(0, na, 2)]
        rb = [self._packed(values[na + i], values[na + i + 1]) for i in range(0, nb, 2)]
        rc = [self.reg(v) for v in values[na + nb:]]
        rd = matrix.mma_sync(self.k, ra, rb, rc, shape=a["shape"], ab_type=a["ab"],
                             acc_type=a["acc"])
        for result, reg in zip(op.results, rd):
            self.vals[result.id] = reg

    def op_cp_async(self, op):
        a, k = op.attrs, self.k
        ptr, _, inner, outer = op.operands[:4]
        dst = self._split_shared_address(op, inner, outer, a["sdisp"], ptr.type.dtype.nbytes)
        src = self._address(op)
        keep = self.operand(op.operands[4]) if a["masked"] else True
        if keep is True:
            size = None
        elif keep is False:
            size = 0
        else:        # src-size 0: nothing read, the destination zero-filled (PTX ISA cp.async)
            size = compare.selp(k, a["bytes"], 0, keep, dtype="u32")
        async_copy.cp_async(k, dst, src, a["bytes"], cache="cg" if a["bytes"] == 16 else "ca",
                            src_size=size)

    def op_cp_async_commit(self, op):
        async_copy.commit_group(self.k)

    def op_cp_async_wait(self, op):
        async_copy.wait_group(self.k, op.attrs["pending"])
