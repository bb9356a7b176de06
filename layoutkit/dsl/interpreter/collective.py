"""Rendezvous of the threads that execute one collective instruction together (a warp's
shfl.sync, ldmatrix, stmatrix, mma.sync or wgmma.wait_group, a warpgroup's wgmma): each member
contributes its operands; the last arrival runs `finish` with all of them. A blocking
rendezvous is the Wait its members block on until then; a non-blocking one (wgmma) lets each
member go on at once. This is the one implementation every collective op's model uses.

Members must reach the same op (per PTX `.sync.aligned`): a member that reaches another
collective op under the same key while the rendezvous is open is a `DivergenceError`. The
warp-collective ops share one key per warp (`meet_warp`), so a lane at an ldmatrix while the
others wait at a shfl is one too.
"""
from __future__ import annotations

from .deadlock import compress
from .errors import DivergenceError
from .machine import Wait, WaitQueue, location_text


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
    state = thread.cta.state
    table = state.get("rendezvous")
    if table is None:
        table = state["rendezvous"] = {}
    open_one = table.get(key)
    if open_one is None:
        open_one = table[key] = Rendezvous(op, members, kind,
                                           WaitQueue(thread.cta.machine.scheduler))
    elif open_one.op is not op:
        waiting = (f"thread {compress(open_one.arrivals)} waits" if len(open_one.arrivals) == 1
                   else f"threads {compress(open_one.arrivals)} wait")
        raise DivergenceError(
            f"thread {thread.tid} reaches {kind} ({location_text(op)}) while {waiting} at "
            f"another {open_one.kind} ({location_text(open_one.op)}): every thread of the "
            f"{'warp' if len(members) == 32 else 'warpgroup'} must execute the same "
            "instruction together (PTX .sync.aligned)", op.location)
    open_one.arrivals[thread.tid] = payload
    if len(open_one.arrivals) == len(members):
        del table[key]
        finish(open_one)
        open_one.complete = True
        open_one.queue.notify()
    return open_one


def meet_warp(thread, op, kind: str, payload, finish) -> Rendezvous:
    """Lane `thread` reaches the warp-collective `op` (`kind`: its PTX name, for messages) with
    `payload`; the last of the warp's 32 lanes runs `finish(warp, arrivals)` (lane -> payload)
    and wakes the others. The Rendezvous returned is the Wait the lanes block on."""
    warp = thread.warp
    first = warp.threads[0].tid
    return arrive(thread, ("warp", warp.index), warp.threads, op, kind, payload,
                  lambda met: finish(warp, {tid - first: p for tid, p in met.arrivals.items()}))


__all__ = ["Rendezvous", "arrive", "meet_warp"]
