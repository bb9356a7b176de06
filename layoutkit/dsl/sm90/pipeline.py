"""The position in an mbarrier ring as kernel integers: stage and phase of a running counter.

`lk.sm90.producer_state(counter, STAGES)` / `lk.sm90.consumer_state(counter, STAGES)` follow
layoutkit.sync.PipelineState's rules exactly (its start phases, and "after k advances: index =
k mod stages, phase = start XOR ((k div stages) mod 2)"), but over an integer expression the
author advances, typically `counter = tile_iteration * K_TILES + k` inside lk.range loops. For
a power-of-two STAGES the stage lowers to a mask and the phase to a shift and a mask. Nothing
waits here: the author writes every wait.

    full = lk.sm90.mbarrier_array(STAGES, 1, name="full")            # producer arrive + TMA bytes
    empty = lk.sm90.mbarrier_array(STAGES, CONSUMERS, name="empty")  # each consumer thread arrives
    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=24):
        for k in lk.range(0, K_TILES):
            p = lk.sm90.producer_state(k, STAGES)       # first pass: parity 1 passes on fresh empty
            lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
            with lk.sm90.elect_one(), lk.sm90.expect_tx(full[p.stage]):
                ...                                # TMA copies completing on full[p.stage]
    with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
        for k in lk.range(0, K_TILES):
            c = lk.sm90.consumer_state(k, STAGES)       # first pass: parity 0 blocks until filled
            lk.sm90.mbarrier_wait(full[c.stage], c.phase)
            ...                                    # read the slot
            lk.sm90.mbarrier_arrive(empty[c.stage])

>>> from layoutkit.sync import PipelineState
>>> [(s.stage, s.phase) for s in (producer_state(k, 2) for k in range(5))]
[(0, 1), (1, 1), (0, 0), (1, 0), (0, 1)]
>>> PipelineState.producer_start(2).advance_by(4)
PipelineState(stages=2, index=0, phase=1)
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.algebra.sympy_gate import deferred_module, sympy
from layoutkit.sync import PipelineState, PipelineStateError

from ..core.errors import TraceError
from ..core.facts import provably_less
from ..core.bounds import value_range
from ..core.tracer import active_trace, is_int_expr

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)


@dataclass(frozen=True)
class RingState:
    """Where `counter` (an int or integer expression, >= 0) stands in a `stages`-slot ring:
    `stage` (0..stages-1) and `phase` (0/1, the parity to wait for), both kernel integers."""

    stages: int
    counter: object
    start_phase: int

    @property
    def stage(self):
        if isinstance(self.counter, int):
            return self._concrete().index
        return symbolic.mod(self.counter, self.stages)

    @property
    def phase(self):
        if isinstance(self.counter, int):
            return self._concrete().phase
        return symbolic.mod(sympy.floor(self.counter / self.stages) + self.start_phase, 2)

    def _concrete(self) -> PipelineState:
        return PipelineState(self.stages, 0, self.start_phase).advance_by(self.counter)

    def __str__(self) -> str:
        return f"stage {self.stage}, phase {self.phase} of a {self.stages}-stage ring"


def _state(what: str, counter, stages: int, start: PipelineState) -> RingState:
    if not is_int_expr(counter):
        raise TraceError(f"{what}: the counter is an int or an integer expression of kernel "
                         f"integers (e.g. tile * K_TILES + k), got {counter!r}")
    counter = sympy.sympify(counter) if isinstance(counter, sympy.Basic) else counter
    low, _ = value_range(active_trace(), counter)
    if (low is None or low < 0) and provably_less(-1, counter) is not True:
        raise TraceError(f"{what}: the counter {counter} is not provably >= 0 (states only "
                         "advance); count from lk.range loops with non-negative bounds")
    return RingState(stages, int(counter) if isinstance(counter, sympy.Integer) else counter,
                     start.phase)


def _start(what: str, stages, role: str) -> PipelineState:
    try:
        return getattr(PipelineState, f"{role}_start")(stages)
    except PipelineStateError as exc:
        raise TraceError(f"{what}: {exc.thing} = {exc.value!r}: {exc.rule}") from None


def producer_state(counter, stages: int) -> RingState:
    """The producer's ring position after `counter` slots: it waits on `empty[stage]` with
    parity `phase`, starting at phase 1 so its first pass over fresh barriers does not block."""
    return _state("lk.sm90.producer_state", counter, stages,
                  _start("lk.sm90.producer_state", stages, "producer"))


def consumer_state(counter, stages: int) -> RingState:
    """The consumer's ring position after `counter` slots: it waits on `full[stage]` with
    parity `phase`, starting at phase 0 so its first wait blocks until the first fill."""
    return _state("lk.sm90.consumer_state", counter, stages,
                  _start("lk.sm90.consumer_state", stages, "consumer"))


__all__ = ["RingState", "consumer_state", "producer_state"]
