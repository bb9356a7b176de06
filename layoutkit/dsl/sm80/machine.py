"""The CPU interpreter's model of the sm_80 units that the ops of sm80/ops.py drive: cp.async
copies in per-thread commit groups with their group waits, and the meeting of a warp's 32 lanes
at a warp-collective instruction (ldmatrix, mma.sync).

cp.async: at issue the thread reads its global bytes (none where the mask is false: zeros) and
claims the shared destination; the copy lands when the scheduler completes it, and the claim
is released (and the write recorded for race detection as the thread's) when the thread's
cp.async.wait_group covers its group. So reading a stage before its wait, or another thread
reading it before a barrier, is a RaceError.
"""
from __future__ import annotations

import numpy as np

from ..interpreter.errors import DivergenceError
from ..interpreter.machine import WARP_SIZE, Wait, WaitQueue, location_text
from ..interpreter.memory import swizzle_function
from ..interpreter.scheduler import AsyncOperation

_U32 = 0xFFFFFFFF


def split_address(op, nbytes: int, disp_key: str):
    """Byte offset in shared memory of Sw(inner) + outer + disp (smem_address)."""
    swizzle = swizzle_function(op.attrs["swizzle"]) or (lambda x: x)
    constant = op.attrs["base"] + op.attrs[disp_key] * nbytes
    return lambda inner, outer: (constant + (swizzle(inner & _U32) + outer) * nbytes) & _U32


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


def groups(thread) -> dict:
    """The thread's cp.async groups: "open" (copies since its last commit) and "committed"
    (a list of groups, oldest first)."""
    return thread.state.setdefault("cp_async", {"open": [], "committed": []})


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


class Rendezvous(Wait):
    """The 32 lanes of a warp meeting at one warp-collective op."""

    def __init__(self, warp, op, finish):
        self.warp, self.op, self.finish = warp, op, finish
        self.queue = WaitQueue(warp.cta.machine.scheduler)
        self.arrivals: dict = {}
        self.complete = False

    def ready(self) -> bool:
        return self.complete

    def describe(self) -> str:
        return f"waits at {self.op.name}: {len(self.arrivals)} of {WARP_SIZE} lanes arrived"


def meet(thread, op, payload, finish):
    """Lane `thread` reaches the warp-collective `op` with `payload`; the last of the 32 lanes
    runs `finish(warp, arrivals)` (lane -> payload) and wakes the others."""
    warp = thread.warp
    key = op.name
    open_one = warp.collectives.get(key)
    if open_one is None:
        open_one = warp.collectives[key] = Rendezvous(warp, op, finish)
    elif open_one.op is not op:
        raise DivergenceError(f"lane {thread.lane} reaches a {op.name} while lanes "
                              f"{sorted(open_one.arrivals)} wait at another one "
                              f"({location_text(open_one.op)}): all 32 lanes must execute the "
                              f"same {op.name} (.sync.aligned)", op.location)
    open_one.arrivals[thread.lane] = payload
    if len(open_one.arrivals) == WARP_SIZE:
        del warp.collectives[key]
        open_one.finish(warp, open_one.arrivals)
        open_one.complete = True
        open_one.queue.notify()
    return open_one


__all__ = ["split_address", "Copy", "groups", "GroupWait", "Rendezvous", "meet"]
