"""The state of a kernel run: threads (registers, position), warps, CTAs (shared memory, barrier
states, per-family extension state) and the objects threads block on.

A thread blocks on a `Wait` (a condition plus the `WaitQueue` that is notified when the
condition may have changed). Sync objects own WaitQueues; when their state changes they call
`notify`, which hands the waiting threads back to the scheduler, and each thread re-checks its
condition when it runs again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.ir import Op
from .errors import DivergenceError

WARP_SIZE = 32


class WaitQueue:
    """The threads blocked on one sync object, in the order they blocked."""

    __slots__ = ("threads", "scheduler")

    def __init__(self, scheduler):
        self.threads: list = []
        self.scheduler = scheduler

    def add(self, thread) -> None:
        self.threads.append(thread)

    def notify(self) -> None:
        """Make every blocked thread runnable again (each re-checks its condition)."""
        threads, self.threads = self.threads, []
        for thread in threads:
            self.scheduler.wake(thread)


class Wait:
    """What a thread waits for at a sync op. Subclasses define `ready()` and `describe()`."""

    queue: WaitQueue
    op: Op

    def ready(self) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        """'waits at bar.sync 0: 96 of 128 threads arrived' (the op's line is added)."""
        raise NotImplementedError

    def acquired(self, thread) -> None:
        """Called once when `thread` leaves the wait (a successful wait's memory ordering)."""


class Preempt:
    """Yielded before a memory access: the scheduler may run other threads first."""

    __slots__ = ()


PREEMPT = Preempt()


def location_text(op: Op | None) -> str:
    loc = None if op is None else op.location
    return f"line {loc.line}" if loc is not None else "an unknown line"


class Thread:
    """One thread of a CTA: `tid` (%tid.x), its registers `env` (Value id -> value), its
    coroutine `gen`, what it `waiting` on, and labels used in reports (`role`)."""

    __slots__ = ("tid", "lane", "warp", "cta", "env", "gen", "waiting", "done", "yielded",
                 "role", "notes", "uid", "last_op", "state")

    def __init__(self, cta: "CTA", tid: int, uid: int):
        self.cta, self.tid, self.uid = cta, tid, uid
        self.lane, self.warp = tid % WARP_SIZE, cta.warps[tid // WARP_SIZE]
        self.env: dict = {}
        self.gen = None
        self.waiting: Wait | None = None
        self.done = False
        self.yielded: list | None = None
        self.role: str | None = None        # set by warp-role regions ("consumer warpgroup 1")
        self.notes: dict = {}               # family -> last sync action, for deadlock reports
        self.last_op: Op | None = None
        self.state: dict = {}               # per-family per-thread state (pending wgmma, ...)

    def __repr__(self) -> str:
        return f"<thread {self.tid} of CTA {self.cta.coord}>"

    def describe(self) -> str:
        return f"CTA {self.cta.coord} thread {self.tid} (warp {self.warp.index}, lane {self.lane})"


class Warp:
    """32 threads (their warp-collective ops meet through collective.meet_warp)."""

    def __init__(self, cta: "CTA", index: int):
        self.cta, self.index = cta, index
        self.threads: list[Thread] = []


@dataclass
class BarrierState:
    """A CTA barrier (bar.sync id / named barriers): `expected` threads per phase (fixed by the
    first arrival of a phase), `arrived` so far, `generation` counts completed phases."""

    ident: int
    queue: WaitQueue
    expected: int | None = None
    arrived: list = field(default_factory=list)
    waiters: list = field(default_factory=list)
    generation: int = 0
    name: str | None = None
    first_op: Op | None = None

    def arrive(self, thread: Thread, count: int, op: Op, waits: bool = True) -> int:
        """Count `thread`'s arrival (a phase of `count` threads; `waits`: bar.sync, else
        bar.arrive); returns the generation it belongs to. Completing the phase notifies the
        waiters."""
        if self.expected is None:
            self.expected, self.first_op = count, op
        elif count != self.expected:
            raise DivergenceError(
                f"{thread.describe()} arrives at barrier {self.ident} expecting {count} threads, "
                f"but this phase of barrier {self.ident} was opened for {self.expected} threads "
                f"at {location_text(self.first_op)}: every participant of a phase must give the "
                "same thread count (PTX ISA 'bar.sync')", op.location)
        generation = self.generation
        self.arrived.append(thread)
        if waits:
            self.waiters.append(thread)
        if len(self.arrived) == self.expected:
            thread.cta.machine.on_barrier_complete(self, self.arrived, self.waiters)
            self.waiters = []
            self.arrived, self.expected, self.first_op = [], None, None
            self.generation += 1
            self.queue.notify()
        return generation


class BarrierWait(Wait):
    __slots__ = ("barrier", "generation", "op", "queue")

    def __init__(self, barrier: BarrierState, generation: int, op: Op):
        self.barrier, self.generation, self.op = barrier, generation, op
        self.queue = barrier.queue

    def ready(self) -> bool:
        return self.barrier.generation > self.generation

    def describe(self) -> str:
        b = self.barrier
        expected = b.expected if b.expected is not None else "?"
        name = b.name or ("bar.sync 0" if b.ident == 0 else f"named barrier {b.ident}")
        return f"waits at {name}: {len(b.arrived)} of {expected} threads arrived"


class CTA:
    """One thread block: coordinates, warps and threads, shared memory, barriers and the
    extension families' state (`state[family]`)."""

    def __init__(self, machine, coord: tuple, num_warps: int, first_uid: int):
        self.machine, self.coord = machine, coord
        self.warps = [Warp(self, w) for w in range(num_warps)]
        self.threads: list[Thread] = []
        for tid in range(num_warps * WARP_SIZE):
            thread = Thread(self, tid, first_uid + tid)
            self.threads.append(thread)
            thread.warp.threads.append(thread)
        self.shared = None          # SharedMemory, set by the machine
        self.barriers: dict[int, BarrierState] = {}
        self.state: dict = {}

    def barrier(self, ident: int) -> BarrierState:
        found = self.barriers.get(ident)
        if found is None:
            found = self.barriers[ident] = BarrierState(ident, WaitQueue(self.machine.scheduler))
        return found


__all__ = ["WARP_SIZE", "WaitQueue", "Wait", "PREEMPT", "Preempt", "Thread", "Warp", "CTA",
           "BarrierState", "BarrierWait", "location_text"]
