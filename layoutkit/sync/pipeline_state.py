"""PipelineState: the (stage index, phase parity) pair that names one slot of an mbarrier ring.

A ring of `stages` slots has two barriers per slot (hopper-ptx.md §3): `full[s]` completes when
the producer has filled slot s (its arrive.expect_tx plus the TMA bytes), `empty[s]` completes
when the consumers have released it. Both sides walk the ring in the same order; each keeps its
own state and waits on *its* barrier with *its* phase:

    producer, iteration k:  wait empty[p.index] parity p.phase; arrive.expect_tx full[p.index];
                            issue the copy;                      p = p.advance()
    consumer, iteration k:  wait full[c.index]  parity c.phase; compute;
                            arrive empty[c.index];               c = c.advance()

The ring (3 stages shown). The producer runs at most `stages` slots ahead of the consumer::

                 +---------+     +---------+     +---------+
      full[s]    | slot 0  | --> | slot 1  | --> | slot 2  | --+   producer fills, then arrives
      empty[s]   |         |     |         |     |         |   |   consumers release, then arrive
                 +---------+     +---------+     +---------+   |
                      ^                                         |
                      +------------- index wraps: phase ^= 1 ---+

Why the producer starts at phase 1 (the parity rule): `wait(parity P)` returns once the phase
with parity P has completed, and a fresh barrier (in phase 0) counts its "phase before 0",
parity 1, as completed. Slots start empty, so the producer's first pass must not block on
`empty`: it waits with parity 1. The consumer's first pass must block until the first fill:
it waits on `full` with parity 0. Getting this backwards is the classic bug: producer at 0
deadlocks at k=0; consumer at 1 returns at once and reads garbage (a race, not a hang).

States over iterations for 2 stages (the worked ring of hopper-ptx.md §3):

    k | index | producer phase (waits empty) | consumer phase (waits full)
    --+-------+------------------------------+----------------------------
    0 |   0   | 1  passes: fresh barrier     | 0  blocks until first fill
    1 |   1   | 1  passes: fresh barrier     | 0
    2 |   0   | 0  = consumers released k=0  | 1
    3 |   1   | 0  = released k=1            | 1
    4 |   0   | 1  = released k=2            | 0

In general after k advances from a start phase p0: index = k mod stages and
phase = p0 XOR ((k div stages) mod 2).

A PipelineState is a value: nothing waits unless the author writes the wait, and nothing
advances unless the author calls `advance`. The emitted form for a runtime loop (index and
phase in registers) is `layoutkit.sync.emit_advance`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import PipelineStateError

# Stage counts beyond this never fit in shared memory usefully; it also bounds typos.
MAX_STAGES = 64


def _check_int(thing: str, value, lo: int, hi: int, rule: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise PipelineStateError(f"must be an integer in {lo}..{hi} ({rule})", thing=thing,
                                 value=value)
    return value


@dataclass(frozen=True)
class PipelineState:
    """Stage `index` (0..stages-1) and `phase` (0/1) of a `stages`-slot ring; immutable.

    >>> p = PipelineState.producer_start(2); c = PipelineState.consumer_start(2)
    >>> p, c
    (PipelineState(stages=2, index=0, phase=1), PipelineState(stages=2, index=0, phase=0))
    >>> [(s.index, s.phase) for s in (c, c.advance(), c.advance().advance())]
    [(0, 0), (1, 0), (0, 1)]
    """

    stages: int
    index: int = 0
    phase: int = 0

    def __post_init__(self):
        _check_int("PipelineState.stages", self.stages, 1, MAX_STAGES, "slots in the ring")
        _check_int("PipelineState.index", self.index, 0, self.stages - 1,
                   f"a slot of a {self.stages}-stage ring")
        _check_int("PipelineState.phase", self.phase, 0, 1, "an mbarrier phase parity")

    @classmethod
    def producer_start(cls, stages: int) -> "PipelineState":
        """Slot 0, phase 1: the producer's first pass over the fresh `empty` barriers passes."""
        return cls(stages, 0, 1)

    @classmethod
    def consumer_start(cls, stages: int) -> "PipelineState":
        """Slot 0, phase 0: the consumer's first wait on `full` blocks until the first fill."""
        return cls(stages, 0, 0)

    def advance(self) -> "PipelineState":
        """The next slot; the phase flips when the index wraps to 0."""
        if self.index + 1 == self.stages:
            return PipelineState(self.stages, 0, self.phase ^ 1)
        return PipelineState(self.stages, self.index + 1, self.phase)

    def advance_by(self, steps: int) -> "PipelineState":
        """The state `steps` (>= 0) advances later: the phase flips once per wrap.

        >>> PipelineState.producer_start(3).advance_by(7)
        PipelineState(stages=3, index=1, phase=1)
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise PipelineStateError("must be a non-negative integer (states only advance)",
                                     thing="advance_by(steps)", value=steps)
        wraps, index = divmod(self.index + steps, self.stages)
        return PipelineState(self.stages, index, self.phase ^ (wraps & 1))

    @property
    def parity(self) -> int:
        """The parity to pass to the wait on this state's barrier (the phase)."""
        return self.phase

    def __str__(self) -> str:
        return f"stage {self.index}/{self.stages} phase {self.phase}"


__all__ = ["MAX_STAGES", "PipelineState"]
