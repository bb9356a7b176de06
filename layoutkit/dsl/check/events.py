"""The events each synchronization, copy, wgmma and shared-memory op of the IR contributes to
the static protocol check (a mixin of protocol_extract.Extractor, one `op_<name>` per op).

An op executed by a set of threads becomes one event per distinct value of what it names per
thread (barrier stage, CTA, parity, ...), so threads naming different barriers end up in
different thread classes. Byte ranges are pre-swizzle element offsets times the element size:
every view of one shared buffer shares its swizzle, so overlaps compare exactly.
"""
from __future__ import annotations

import numpy as np

from layoutkit.algebra import cosize
from layoutkit.sync import kernel_model as km

from ..core.types import DTYPES


class EventOps:
    """`op_<name>(op, mask, loops)` for each event-making IR op (see the module docstring)."""

    def op_tma_load(self, op, mask, loops) -> None:
        a = op.attrs
        site = self.site(op, loops)
        bars = self.per_thread(op.operands[1], mask)
        dsts = self.per_thread(op.operands[2], mask)
        mc = a.get("multicast")
        bases = self.per_thread(op.operands[-1], mask) if mc else self.cta[mask]
        if bars is None or dsts is None or bases is None:
            self.undecidable(op, loops, "this TMA load's barrier or destination is computed "
                             "from memory; the check skipped it")
            return
        elements = int(np.prod(a["box"]))
        nbytes = a["bytes"] // elements
        for sub, (bar, dst, base, cta) in self.split(mask, [bars, dsts, bases, self.cta[mask]]):
            name, stage = self.slot_of(bar, op, site)
            ctas = (cta,) if not mc else tuple(r for r in range(self.ctas)
                                               if (mc["pattern"] << base) >> r & 1)
            rng = km.ByteRange(cta, a["buffer"], dst * nbytes, dst * nbytes + a["bytes"])
            self.emit(sub, km.Copy, {"barrier": name, "stage": stage, "ctas": ctas,
                                     "nbytes": a["bytes"], "dst": rng, "site": site,
                                     "what": f"TMA load into {a['buffer']}"})

    def op_tma_store(self, op, mask, loops) -> None:
        a = op.attrs
        nbytes = a["bytes"] // int(np.prod(a["box"]))
        self._range(op, mask, loops, op.operands[1], nbytes, a["bytes"], a["buffer"],
                    km.SharedRead, "tma_store")

    def op_tma_store_commit(self, op, mask, loops) -> None:
        self.emit(mask, km.Commit, {"kind": "tma_store", "site": self.site(op, loops)})

    def op_tma_store_wait(self, op, mask, loops) -> None:
        self.emit(mask, km.GroupWait, {"kind": "tma_store", "pending": op.attrs["pending"],
                                       "site": self.site(op, loops)})

    def op_wgmma(self, op, mask, loops) -> None:
        a = op.attrs
        nbytes = DTYPES[a["dtype"]].nbytes
        position = a["acc_count"] + a["a_count"]
        for operand in ("a", "b"):
            spec = a[operand]
            if spec["kind"] != "shared":
                continue
            span = int(cosize(spec["layout"])) * nbytes
            self._range(op, mask, loops, op.operands[position], nbytes, span, spec["buffer"],
                        km.SharedRead, "wgmma")
            position += 1

    def op_wgmma_commit(self, op, mask, loops) -> None:
        self.emit(mask, km.Commit, {"kind": "wgmma", "site": self.site(op, loops)})

    def op_wgmma_wait(self, op, mask, loops) -> None:
        self.emit(mask, km.GroupWait, {"kind": "wgmma", "pending": op.attrs["pending"],
                                       "site": self.site(op, loops)})

    def op_shared_store(self, op, mask, loops) -> None:
        vec, nbytes = op.attrs["vec"], op.operands[1].type.nbytes
        self._range(op, mask, loops, op.operands[0], nbytes, vec * nbytes, op.attrs["buffer"],
                    km.SharedWrite, None, op.attrs["disp"])

    def op_shared_load(self, op, mask, loops) -> None:
        vec, nbytes = op.attrs["vec"], op.results[0].type.nbytes
        self._range(op, mask, loops, op.operands[0], nbytes, vec * nbytes, op.attrs["buffer"],
                    km.SharedRead, "generic", op.attrs["disp"])

    def _range(self, op, mask, loops, offset, nbytes, span, buffer, kind, proxy, disp=0):
        site = self.site(op, loops)
        offsets = self.per_thread(offset, mask)
        if offsets is None:
            self.undecidable(op, loops, f"the shared offset into {buffer} is computed from "
                             "memory; the check skipped this access")
            return
        for sub, (cta,) in self.split(mask, [self.cta[mask]]):
            part = offsets[self.cta[mask] == cta]
            rng = km.ByteRange(cta, buffer, (int(part.min()) + disp) * nbytes,
                               (int(part.max()) + disp) * nbytes + span)
            fields = {"bytes": rng, "site": site}
            if proxy is not None:
                fields["proxy"] = proxy
            self.emit(sub, kind, fields)

    def op_barrier(self, op, mask, loops) -> None:
        self.emit(mask, km.ThreadBarrier, {"ident": 0, "threads": self.block_threads,
                                           "waits": True, "site": self.site(op, loops)},
                  per_thread=1)

__all__ = ["EventOps"]
