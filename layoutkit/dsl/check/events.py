"""The events each synchronization, copy, wgmma and shared-memory op of the IR contributes to
the static protocol check (a mixin of protocol_extract.Extractor, one `op_<name>` per op).

An op executed by a set of threads becomes one event per distinct value of what it names per
thread (barrier stage, CTA, parity, ...), so threads naming different barriers end up in
different thread classes. Byte ranges are pre-swizzle element offsets times the element size:
every view of one shared buffer shares its swizzle, so overlaps compare exactly.
"""
from __future__ import annotations

from layoutkit.sync import kernel_model as km


class EventOps:
    """`op_<name>(op, mask, loops)` for each event-making IR op (see the module docstring)."""

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


__all__ = ["EventOps"]
