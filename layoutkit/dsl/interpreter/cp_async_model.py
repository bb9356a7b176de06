"""The CPU interpreter's model of cp.async (the ops' interpret facets, layoutkit.dsl.sm80.ops,
run on it): copies in per-thread commit groups with their group waits.

cp.async: at issue the thread reads its global bytes (none where the mask is false: zeros) and
claims the shared destination; the copy lands when the scheduler completes it, and the claim
is released (and the write recorded for race detection as the thread's) when the thread's
cp.async.wait_group covers its group. So reading a stage before its wait, or another thread
reading it before a barrier, is a RaceError.
"""
from __future__ import annotations

import numpy as np

from layoutkit.sync import CommitGroups

from .machine import Wait, WaitQueue, location_text
from .scheduler import AsyncOperation


class Copy(AsyncOperation):
    """One thread's cp.async in flight: `data` lands at shared byte `start` on completion."""

    def __init__(self, thread, start: int, data: np.ndarray, op, claim):
        self.thread, self.start, self.data, self.op, self.claim = thread, start, data, op, claim
        self.done = False
        self.queue = None

    def complete(self) -> None:
        self.thread.cta.shared.view(self.start, self.data.size)[:] = self.data
        self.done = True
        if self.queue is not None:
            self.queue.notify()

    def describe(self) -> str:
        return (f"the cp.async of {self.data.size} bytes issued at {location_text(self.op)} by "
                f"{self.thread.describe()}")


def groups(thread) -> CommitGroups:
    """The thread's cp.async copies by commit group (layoutkit.sync.CommitGroups)."""
    found = thread.state.get("cp_async")
    if found is None:
        found = thread.state["cp_async"] = CommitGroups()
    return found


class GroupWait(Wait):
    """cp.async.wait_group: ready when the covered `copies` landed (their claims released and
    their writes recorded as the waiting thread's)."""

    def __init__(self, thread, copies: list, op):
        self.thread, self.copies, self.op = thread, copies, op
        self.queue = WaitQueue(thread.cta.machine.scheduler)
        for copy in copies:
            copy.queue = self.queue

    def ready(self) -> bool:
        if not all(c.done for c in self.copies):
            return False
        shared, machine = self.thread.cta.shared, self.thread.cta.machine
        for copy in self.copies:
            if copy.claim in shared.claims:
                shared.release(copy.claim)
                machine.on_shared_access(self.thread, copy.start, copy.data.size, True,
                                         copy.describe(), copy.op)
        return True

    def describe(self) -> str:
        pending = sum(not c.done for c in self.copies)
        return f"waits at cp.async.wait_group for {pending} copies"


__all__ = ["Copy", "groups", "GroupWait"]
