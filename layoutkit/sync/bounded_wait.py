"""Debug builds: mbarrier waits that give up after a %globaltimer deadline, record, and trap.

`BoundedWaits(k, timeout_s=2.0)` adds the hidden parameter `ERROR_BUFFER_PARAM` (the device
address of a zeroed mapped-host record, see debug_record) and reads it once at the kernel's
top, where it dominates every wait. Each `wait` then emits, out of the fall-through path:

        bra $sync_wait_N;                    // skip the handler
    $sync_timeout_M:                         // reached only when the deadline passed
        atom.global.add.u32 c, [buf], 1;     // claim: the first thread writes the record
        @c!=0 exit;                          // the others leave; the first one traps
        st fields (barrier, stage, parity, site, ctaid, tid, timeout);
        membar.sys; st magic; membar.sys; trap;
    $sync_wait_N:
        <mbarrier_wait.wait_parity_bounded: spin until done or deadline>

Release builds do not construct BoundedWaits and emit the plain loop: nothing is paid there.
The host side: `DebugTable` (`.table`) decodes the record into a BarrierTimeoutError.
"""
from __future__ import annotations

import math

from layoutkit.ptx.builder import Address, KernelBuilder, Reg, SourceLocation, user_location
from layoutkit.ptx.isa import mbarrier_wait
from layoutkit.ptx.isa import sm90 as I

from . import debug_record as rec
from .errors import DebugRecordError

DEFAULT_TIMEOUT_S = 2.0


class BoundedWaits:
    """The debug-build wait emitter of one kernel; construct it at the top of the kernel."""

    def __init__(self, k: KernelBuilder, *, timeout_s: float = DEFAULT_TIMEOUT_S):
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))\
                or not math.isfinite(timeout_s) or not 1e-6 <= timeout_s <= 3600:
            raise DebugRecordError("must be a number of seconds in 1e-6..3600 (the bound of "
                                   "each debug-build wait)", thing="timeout_s", value=timeout_s)
        self.kernel = k
        self.timeout_ns = round(timeout_s * 1e9)
        self.table = rec.DebugTable(k.name)
        self.param = k.pointer_param(rec.ERROR_BUFFER_PARAM)
        self.buffer = I.cvta(k, "global", I.ld_param(k, self.param))

    def wait(self, k: KernelBuilder, slot, parity: "int | Reg", *,
             location: SourceLocation | None = None) -> None:
        """Wait on `slot` (a BarrierSlot) for `parity`, bounded; on timeout record and trap."""
        if k is not self.kernel:
            raise DebugRecordError(f"these BoundedWaits belong to kernel '{self.kernel.name}'",
                                   thing="kernel", value=k.name)
        location = location if location is not None else user_location()
        site = self.table.add_site(slot.array.name, location)
        barrier = self.table.barrier_index(slot.array.name)
        start, handler = k.label("sync_wait"), k.label("sync_timeout")
        I.bra(k, start)
        k.place(handler)
        self._record_and_trap(k, barrier, slot.stage, parity, site)
        k.place(start)
        mbarrier_wait.wait_parity_bounded(k, slot.address, parity, timeout_ns=self.timeout_ns,
                                          on_timeout=handler)

    def _record_and_trap(self, k: KernelBuilder, barrier: int, stage, parity, site: int) -> None:
        buf = self.buffer
        claims = I.atom(k, "global", "add", Address(buf, rec.CLAIMS), 1, dtype="u32")
        I.exit_(k, pred=I.setp(k, "ne", claims, 0, dtype="u32"))
        fields = [(rec.BARRIER, barrier), (rec.STAGE, stage), (rec.PARITY, parity),
                  (rec.SITE, site), (rec.TIMEOUT_US, self.timeout_ns // 1000)]
        for base, sreg in ((rec.BLOCK, "ctaid"), (rec.THREAD, "tid")):
            fields += [(base + 4 * i, I.sreg(k, f"{sreg}.{axis}")) for i, axis in enumerate("xyz")]
        for offset, value in fields:
            I.st(k, "global", Address(buf, offset), value, dtype="u32")
        I.membar(k, "sys")   # the fields reach host memory before the magic word says so
        I.st(k, "global", Address(buf, rec.MAGIC), rec.RECORD_MAGIC, dtype="u32")
        I.membar(k, "sys")
        I.trap(k)


__all__ = ["BoundedWaits", "DEFAULT_TIMEOUT_S"]
