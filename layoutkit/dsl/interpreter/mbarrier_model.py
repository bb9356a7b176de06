"""The mbarrier state of the interpreter: what the mbarrier ops (their `interpret` facets in
layoutkit.dsl.sm90.mbarrier_ops) and the TMA copies' complete-tx act on.

Each barrier has the state of PTX ISA "mbarrier": the current phase, its pending arrival count
(reset to the arrive count when a phase completes) and its tx-count (expect-tx adds bytes,
a copy's complete-tx subtracts them; it may go negative while copies land before their
expect-tx). A phase completes when both reach zero. `try_wait.parity P` succeeds once the
phase of parity P has completed, i.e. while the current phase's parity differs from P. Arrivals
publish the arriving thread's memory (happens-before) to the phase; a successful wait takes it.
"""
from __future__ import annotations

import numpy as np

from .errors import ExecutionError
from .machine import Wait, WaitQueue


class MbarrierState:
    """One mbarrier of one CTA (see the module docstring)."""

    def __init__(self, cta, name: str, stage: int, arrive_count: int, offset: int):
        self.cta, self.name, self.stage = cta, name, stage
        self.arrive_count, self.offset = arrive_count, offset
        self.pending, self.tx, self.phase = arrive_count, 0, 0
        self.queue = WaitQueue(cta.machine.scheduler)
        hb = cta.state.get("hb")
        size = hb.clock.shape[1] if hb is not None else 0
        self.clock = np.zeros(size, dtype=np.int64)         # joined arrivals of this phase
        self.published = {0: None, 1: None}                 # parity -> clock of that phase

    def describe(self) -> str:
        return f"{self.name}[{self.stage}]"

    def arrive(self, count: int, op, thread=None) -> None:
        if count > self.pending:
            who = thread.describe() if thread is not None else "an arrival"
            raise ExecutionError(
                f"{who} arrives {count} time(s) on {self.describe()}, whose phase {self.phase} "
                f"has only {self.pending} arrival(s) left (arrive count {self.arrive_count}) and "
                f"{self.tx} transaction bytes outstanding: more arrivals than the barrier was "
                "initialised for (PTX leaves this undefined)", op.location)
        if thread is not None and thread.cta is self.cta and thread.cta.machine.hb is not None:
            released = thread.cta.machine.hb.release(self.cta, thread.tid)
            np.maximum(self.clock, released, out=self.clock)
        self.pending -= count
        self._maybe_complete()

    def expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int, clock=None) -> None:
        """A copy delivered `nbytes` (its writes published with `clock`, if tracked)."""
        self.tx -= nbytes
        if clock is not None:
            np.maximum(self.clock, clock, out=self.clock)
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.published[self.phase % 2] = self.clock
            self.clock = np.zeros_like(self.clock)
            self.phase += 1
            self.pending = self.arrive_count
            self.queue.notify()


class MbarrierWait(Wait):
    def __init__(self, barrier: MbarrierState, parity: int, op):
        self.barrier, self.parity, self.op = barrier, parity, op
        self.queue = barrier.queue

    def ready(self) -> bool:
        return self.barrier.phase % 2 != self.parity

    def describe(self) -> str:
        b = self.barrier
        return (f"waits {b.describe()} parity {self.parity} (its phase {b.phase}, parity "
                f"{b.phase % 2}, is open: {b.arrive_count - b.pending} of {b.arrive_count} "
                f"arrivals, {b.tx} transaction bytes outstanding)")

    def acquired(self, thread) -> None:
        published = self.barrier.published[self.parity]
        hb = thread.cta.machine.hb
        if hb is not None and published is not None and thread.cta is self.barrier.cta:
            hb.acquire(thread.cta, thread.tid, published)


def barriers(cta) -> dict:
    return cta.state.setdefault("mbarrier", {})


def lookup(cta, offset: int, op, what: str) -> MbarrierState:
    """The initialised mbarrier at shared byte `offset` of `cta` (ExecutionError if none)."""
    found = barriers(cta).get(offset)
    if found is None:
        name = op.attrs.get("barrier", "?")
        raise ExecutionError(
            f"{what} uses mbarrier {name}[{op.attrs.get('stage', '?')}] (shared byte {offset}) of "
            f"CTA {cta.coord} before it is initialised: lk.sm90.mbarrier_init must run, then a "
            "barrier (lk.barrier() / lk.sm90.cluster_sync()), before any thread uses it",
            op.location)
    return found


