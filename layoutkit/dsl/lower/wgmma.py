"""Lowering of wgmma (layoutkit/dsl/sm90/wgmma/ops.py): descriptors from shared layouts,
mma_async with accumulators in registers, fence/commit/wait. A mixin of `Lowering`: one
`op_<name>` method per IR op.

Accumulators stay in place: a result takes its operand's (mutable) registers when the protocol's
in-place rule allows (wgmma_protocol.Facts.in_place); otherwise it gets fresh registers, filled
by copies (none when the wgmma does not accumulate). Copies and the packing of a register A
operand into .b32 pairs (low half = even value, PTX register fragments) are register writes, so
a `wgmma.fence` follows them. A descriptor is built once per operand from its runtime start
address (smem + buffer + origin) and advanced by a constant per instruction.
"""
from __future__ import annotations

from layoutkit.ptx.builder import Reg
from layoutkit.ptx.isa import arith, convert
from layoutkit.ptx.isa import wgmma as isa
from layoutkit.ptx.isa import wgmma_descriptor as descriptors

from ..sm90.wgmma.accumulators import check, register_a


class WgmmaLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""

    def _wgmma_facts(self):
        """The protocol check of the whole function (once), and its facts."""
        facts = getattr(self, "_wgmma_checked_facts", None)
        if facts is None:
            facts = self._wgmma_checked_facts = check(self.fn).facts
        return facts

    def op_wgmma_fence(self, op):
        self._wgmma_facts()
        isa.fence(self.k)

    def op_wgmma_commit(self, op):
        isa.commit_group(self.k)

    def op_wgmma_wait(self, op):
        isa.wait_group(self.k, op.attrs["pending"])

    def op_wgmma_undef(self, op):
        for r in op.results:
            self.vals[r.id] = self.k.var("f32")

    def _descriptor_base(self, spec: dict, origin):
        """The descriptor of the operand's element `origin` (its tile origin)."""
        k = self.k
        nbytes = 2                                      # f16/bf16 elements
        offset = self.operand(origin)
        if isinstance(offset, int):
            address = arith.add(k, self.smem, spec["base"] + offset * nbytes, dtype="u32")
        else:
            if offset.type.name != "u32":
                offset = convert.mov(k, offset, dtype="b32", out=k.reg("u32"))
            address = arith.mad(k, offset, nbytes, self.smem, mode="lo", dtype="u32")
            if spec["base"]:
                address = arith.add(k, address, spec["base"], dtype="u32")
        return descriptors.make_descriptor(k, address, lbo=spec["lbo"], sbo=spec["sbo"],
                                           swizzle=spec["mode"])

    def _descriptors(self, spec: dict, origin) -> dict:
        """(block, kstep) -> descriptor register of each instruction."""
        base = self._descriptor_base(spec, origin)
        out = {}
        for block, kstep, start in spec["starts"]:
            out[(block, kstep)] = base if start == 0 else \
                descriptors.advance_descriptor(self.k, base, start * 2)
        return out

    def _accumulator_registers(self, op, facts) -> tuple[list[Reg], bool]:
        """The registers the wgmma writes, and whether filling them wrote registers."""
        k, a = self.k, op.attrs
        flags = facts.in_place(op)
        regs, wrote = [], False
        for v, in_place in zip(op.operands[:a["acc_count"]], flags):
            src = self.vals[v.id]
            if in_place and isinstance(src, Reg) and src.mutable:
                regs.append(src)
                continue
            var = k.var("f32")
            if a["accumulate"] is not False:
                convert.mov(k, src, dtype="f32", out=var)
                wrote = True
            regs.append(var)
        return regs, wrote

    def op_wgmma(self, op):
        k, a = self.k, op.attrs
        facts = self._wgmma_facts()
        m, n, kdim = a["m"], a["n"], a["k"]
        blocks, ksteps = m // 64, kdim // 16
        acc, wrote = self._accumulator_registers(op, facts)
        rest = list(op.operands[a["acc_count"] + a["a_count"]:])
        if a["a"]["kind"] == "registers":
            values = [self.reg(v) for v in register_a(op)]
            per_block = kdim // 2
            a_regs = {}
            for b in range(blocks):
                for j in range(ksteps):
                    first = b * per_block + 8 * j
                    a_regs[(b, j)] = tuple(convert.pack(k, values[first + 2 * q:first + 2 * q + 2])
                                           for q in range(4))
            wrote = True
        else:
            a_regs = self._descriptors(a["a"], rest.pop(0))
        b_desc = self._descriptors(a["b"], rest.pop(0))
        if a["accumulate"] is None:
            flag = self.operand(rest.pop(0))
            first_scale = (1 if flag else 0) if isinstance(flag, bool) else flag
        else:
            first_scale = 1 if a["accumulate"] else 0
        if wrote:
            isa.fence(k)          # the copies/packs above are register writes (PTX wgmma.fence)
        trans_a = None if a["a"]["kind"] == "registers" else (0 if a["a"]["major"] == "K" else 1)
        trans_b = 0 if a["b"]["major"] == "K" else 1
        per_acc = n // 2
        for j in range(ksteps):
            for b in range(blocks):
                isa.mma_async(k, acc[b * per_acc:(b + 1) * per_acc], a_regs[(b, j)],
                              b_desc[(0, j)], n=n, ab_type=a["dtype"],
                              scale_d=first_scale if j == 0 else 1, trans_a=trans_a,
                              trans_b=trans_b)
        for r, reg in zip(op.results, acc):
            self.vals[r.id] = reg
