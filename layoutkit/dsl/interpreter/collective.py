"""Rendezvous of the threads that execute one collective instruction together (a warp's
ldmatrix or mma.sync, a warpgroup's wgmma): each member contributes its operands; the last
arrival runs `finish` with all of them. A blocking rendezvous is the Wait its members block on
until then; a non-blocking one (wgmma) lets each member go on at once.

Members must reach the same op (per PTX `.sync.aligned`): a member that reaches another
collective op of the same kind while the rendezvous is open is a `DivergenceError`.
"""
from __future__ import annotations

from .deadlock import compress
from .errors import DivergenceError
from .machine import WARP_SIZE, Wait, WaitQueue, location_text


class Rendezvous(Wait):
    """The open rendezvous of `members` (threads) at `op`; `arrivals` maps a member's tid to
    what it contributed; `complete` once `finish` ran."""

    def __init__(self, op, members: list, kind: str, queue: WaitQueue):
        self.op, self.members, self.kind, self.queue = op, members, kind, queue
        self.arrivals: dict = {}
        self.complete = False

    def ready(self) -> bool:
        return self.complete

    def describe(self) -> str:
        missing = [t.tid for t in self.members if t.tid not in self.arrivals]
        return (f"waits at {self.kind}: {len(self.arrivals)} of {len(self.members)} threads "
                f"arrived (missing threads {compress(missing)})")


def arrive(thread, key, members: list, op, kind: str, payload, finish) -> Rendezvous:
    """Contribute `payload` to the rendezvous `key` (per CTA) at `op`; the last of `members`
    to arrive calls `finish(rendezvous)` and wakes the others."""
    table = thread.cta.state.setdefault("rendezvous", {})
    open_one = table.get(key)
    if open_one is None:
        open_one = table[key] = Rendezvous(op, members, kind,
                                           WaitQueue(thread.cta.machine.scheduler))
    elif open_one.op is not op:
        waiting = compress(open_one.arrivals)
        raise DivergenceError(
            f"thread {thread.tid} reaches {kind} ({location_text(op)}) while threads {waiting} "
            f"wait at another {open_one.kind} ({location_text(open_one.op)}): every thread of "
            f"the {'warp' if len(members) == 32 else 'warpgroup'} must execute the same "
            "instruction together (PTX .sync.aligned)", op.location)
    open_one.arrivals[thread.tid] = payload
    if len(open_one.arrivals) == len(members):
        del table[key]
        finish(open_one)
        open_one.complete = True
        open_one.queue.notify()
    return open_one


__all__ = ["Rendezvous", "arrive", "ShflRendezvous"]


class ShflRendezvous(Wait):
    """The lanes of one warp meeting at one shfl op: their (value, lane operand) pairs."""

    def __init__(self, warp, op, queue: WaitQueue):
        self.warp, self.op, self.queue = warp, op, queue
        self.arrivals: dict[int, tuple] = {}
        self.complete = False

    def ready(self) -> bool:
        return self.complete

    def describe(self) -> str:
        missing = [t.lane for t in self.warp.threads if t.lane not in self.arrivals]
        return (f"waits at shfl.sync.{self.op.attrs['mode']}: {len(self.arrivals)} of "
                f"{WARP_SIZE} lanes arrived (missing lanes {missing[:8]}"
                f"{'...' if len(missing) > 8 else ''})")

    def finish(self, result_id: int) -> None:
        mode = self.op.attrs["mode"]
        for thread in self.warp.threads:
            b = self.arrivals[thread.lane][1] & (WARP_SIZE - 1)
            source = b if mode == "idx" else thread.lane ^ b
            thread.env[result_id] = self.arrivals[source][0]
        self.complete = True
        self.queue.notify()
