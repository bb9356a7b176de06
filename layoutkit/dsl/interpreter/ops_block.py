"""Handlers of the block-level sync ops: `barrier` (bar.sync 0: every thread of the CTA) and
`shfl` (shfl.sync over the full warp: all 32 lanes must reach the same shfl, then each lane
reads lane j's value, j per PTX ISA "shfl.sync" with c = 0x1f: idx j = b & 31, bfly j = lane ^
(b & 31))."""
from __future__ import annotations

from .errors import DivergenceError
from .executor import Step, handler
from .machine import WARP_SIZE, BarrierWait, Wait, WaitQueue, location_text


@handler("barrier")
def _barrier(op, compiler):
    def run(thread):
        cta = thread.cta
        barrier = cta.barrier(0)
        generation = barrier.arrive(thread, len(cta.threads), op)
        return BarrierWait(barrier, generation, op)
    return Step(run, op)


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


@handler("shfl")
def _shfl(op, compiler):
    value, lane = op.operands[0].id, op.operands[1].id
    result = op.results[0].id

    def run(thread):
        warp = thread.warp
        open_one = warp.collectives.get("shfl")
        if open_one is None:
            open_one = warp.collectives["shfl"] = ShflRendezvous(
                warp, op, WaitQueue(thread.cta.machine.scheduler))
        elif open_one.op is not op:
            raise DivergenceError(
                f"lane {thread.lane} reaches a shfl.sync while lanes "
                f"{sorted(open_one.arrivals)} of its warp wait at another shfl.sync "
                f"({location_text(open_one.op)}): all 32 lanes must execute the same "
                "shfl.sync (PTX ISA 'shfl.sync')", op.location)
        env = thread.env
        open_one.arrivals[thread.lane] = (env[value], env[lane])
        if len(open_one.arrivals) == WARP_SIZE:
            del warp.collectives["shfl"]
            open_one.finish(result)
        return open_one
    return Step(run, op)
