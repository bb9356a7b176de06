"""Lowering of mbarrier arrays in shared memory (layoutkit/dsl/sm90/mbarrier.py): init, arrive,
expect-tx, parity waits (bounded in debug builds), fences. A mixin of `Lowering`: one `op_<name>`
method per IR op, each a call into layoutkit.sync (or its ptx isa family for init and the
remote arrive) with the barrier's address `smem + offset`.
"""
from __future__ import annotations

from layoutkit.ptx.builder import Address, Reg
from layoutkit.ptx.isa import arith, convert, memory
from layoutkit.ptx.isa import mbarrier as isa_mbarrier
from layoutkit.sync import MBARRIER_BYTES, BarrierSlot, MbarrierArray
from layoutkit.sync import arrive, arrive_expect_tx, fence_proxy_async, wait

from ..sm90.debug_waits import LoweredWaits


class MbarrierLowering:
    """The `op_*` lowering methods of these ops (see the module docstring)."""

    def _u32(self, value) -> "Reg | int":
        """An i32 Value as a u32 register (or its int immediate)."""
        v = self.operand(value)
        if isinstance(v, int):
            return v
        return v if v.type.name == "u32" else \
            convert.mov(self.k, v, dtype="b32", out=self.k.reg("u32"))

    def _barrier_address(self, offset_value) -> Address:
        offset = self._u32(offset_value)
        if isinstance(offset, int):
            return Address(self.smem, offset)
        return Address(arith.add(self.k, self.smem, offset, dtype="u32"), 0)

    def _barrier_arrays(self) -> dict:
        arrays = getattr(self, "_mbarrier_arrays", None)
        if arrays is None:
            arrays = self._mbarrier_arrays = {}
            pending = [self.fn.body]
            while pending:
                for op in pending.pop().ops:
                    pending.extend(op.blocks)
                    if op.name == "mbarrier_init":
                        a = op.attrs
                        arrays[a["barrier"]] = MbarrierArray(a["barrier"], a["stages"],
                                                             a["arrive_count"], 0)
        return arrays

    def _slot(self, op, stage=None) -> BarrierSlot:
        a = op.attrs
        stage = stage if stage is not None else a["stage"] if isinstance(a["stage"], int) \
            else 0
        return BarrierSlot(self._barrier_arrays()[a["barrier"]], stage,
                           self._barrier_address(op.operands[0]))

    def op_mbarrier_init(self, op):
        a = op.attrs
        for stage in range(a["stages"]):
            isa_mbarrier.init(self.k, Address(self.smem, a["offset"] + MBARRIER_BYTES * stage),
                              a["arrive_count"])

    def op_fence_mbarrier_init(self, op):
        isa_mbarrier.fence_init(self.k)

    def op_mbarrier_arrive(self, op):
        count = op.attrs["count"] if op.attrs["count"] != 1 else None
        if op.attrs["remote"]:
            address = self._barrier_address(op.operands[0])
            base = address.base if address.offset == 0 else \
                arith.add(self.k, address.base, address.offset, dtype="u32")
            if not isinstance(base, Reg):
                base = convert.mov(self.k, base, dtype="u32")
            isa_mbarrier.arrive_remote(self.k, base, self._u32(op.operands[1]), count,
                                       scope=op.attrs.get("scope", "cluster"))
        else:
            arrive(self.k, self._slot(op), count)

    def op_mbarrier_arrive_expect_tx(self, op):
        arrive_expect_tx(self.k, self._slot(op), op.attrs["tx_bytes"])

    def op_mbarrier_wait(self, op):
        parity = self._u32(op.operands[1])
        if not op.attrs["debug"]:
            wait(self.k, self._slot(op), parity)
            return
        stage, errors = op.operands[2], op.operands[3]
        sink = next(p.attrs["resolve"] for p in self.fn.params if p.results[0].id == errors.id)
        stage_reg = self._u32(stage)
        waits = LoweredWaits(self.k, sink, memory.cvta(self.k, "global", self.reg(errors)))
        wait(self.k, self._slot(op, stage_reg), parity, debug=waits, location=op.location)

    def op_fence_proxy_async(self, op):
        fence_proxy_async(self.k, op.attrs["space"])
