"""PipelineState: the worked 2-stage ring of hopper-ptx.md §3, phase arithmetic, range errors."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutkit.sync import PipelineState, PipelineStateError

# hopper-ptx.md §3 "Worked 2-stage ring": k, stage s, consumer parity on full[s],
# producer parity on empty[s].
WORKED_RING = [
    # k  s  consumer  producer
    (0, 0, 0, 1),
    (1, 1, 0, 1),
    (2, 0, 1, 0),
    (3, 1, 1, 0),
    (4, 0, 0, 1),
]


def test_the_worked_two_stage_ring():
    producer, consumer = PipelineState.producer_start(2), PipelineState.consumer_start(2)
    for k, stage, consumer_parity, producer_parity in WORKED_RING:
        assert (consumer.index, consumer.parity) == (stage, consumer_parity), f"consumer at k={k}"
        assert (producer.index, producer.parity) == (stage, producer_parity), f"producer at k={k}"
        producer, consumer = producer.advance(), consumer.advance()


def test_starts_follow_the_parity_rule():
    # A fresh barrier counts its phase before 0 (parity 1) as complete: the producer waits on
    # the fresh `empty` barriers with parity 1 and passes; the consumer blocks on `full` (0).
    assert PipelineState.producer_start(3) == PipelineState(3, 0, 1)
    assert PipelineState.consumer_start(3) == PipelineState(3, 0, 0)


@settings(max_examples=200, deadline=None)
@given(stages=st.integers(1, 12), steps=st.integers(0, 200), start_phase=st.integers(0, 1))
def test_advance_matches_the_closed_form(stages, steps, start_phase):
    state = PipelineState(stages, 0, start_phase)
    walked = state
    for _ in range(steps):
        walked = walked.advance()
    assert walked.index == steps % stages
    assert walked.phase == start_phase ^ ((steps // stages) & 1)
    assert state.advance_by(steps) == walked


@settings(max_examples=200, deadline=None)
@given(stages=st.integers(1, 12), index=st.integers(0, 11), phase=st.integers(0, 1),
       a=st.integers(0, 60), b=st.integers(0, 60))
def test_advance_by_composes(stages, index, phase, a, b):
    state = PipelineState(stages, index % stages, phase)
    assert state.advance_by(a).advance_by(b) == state.advance_by(a + b)
    # a full lap of 2*stages returns to the same state; one lap flips only the phase
    assert state.advance_by(2 * stages) == state
    lap = state.advance_by(stages)
    assert (lap.index, lap.phase) == (state.index, state.phase ^ 1)


def try_wait_parity(completed_phases: int, parity: int) -> bool:
    """The hardware rule: wait(P) passes iff the phase just before the current one (number
    completed_phases - 1; "phase -1" of a fresh barrier has parity 1) had parity P."""
    return (completed_phases - 1) & 1 == parity


@settings(max_examples=100, deadline=None)
@given(stages=st.integers(1, 8), k=st.integers(0, 100))
def test_each_side_waits_exactly_for_the_other_sides_previous_round(stages, k):
    # Iteration k uses slot k % stages in round r = k // stages. Before the producer's wait, the
    # slot's `empty` barrier has completed r-1 or r phases (the producer waited out every
    # earlier round, consumers cannot release a round not yet filled); the wait must pass
    # exactly when the consumers released round r-1, i.e. r phases completed.
    rnd = k // stages
    producer = PipelineState.producer_start(stages).advance_by(k)
    consumer = PipelineState.consumer_start(stages).advance_by(k)
    assert producer.index == consumer.index == k % stages
    for completed in (rnd - 1, rnd):
        if completed >= 0:
            assert try_wait_parity(completed, producer.parity) == (completed == rnd)
    # The consumer's wait on `full` passes exactly when round r was filled: r+1 phases done.
    for completed in (rnd, rnd + 1):
        assert try_wait_parity(completed, consumer.parity) == (completed == rnd + 1)


@pytest.mark.parametrize("args, thing, rule", [
    ((0,), "PipelineState.stages = 0", "1..64"),
    ((2, 2), "PipelineState.index = 2", "a slot of a 2-stage ring"),
    ((2, 0, 2), "PipelineState.phase = 2", "an mbarrier phase parity"),
    ((2, -1), "PipelineState.index = -1", "0..1"),
    ((True,), "PipelineState.stages = True", "integer"),
])
def test_out_of_range_states_are_refused(args, thing, rule):
    with pytest.raises(PipelineStateError) as info:
        PipelineState(*args)
    assert thing in str(info.value) and rule in str(info.value)
    assert "test_pipeline_state.py" in str(info.value)  # the user's line


def test_advance_by_refuses_going_back():
    with pytest.raises(PipelineStateError, match=r"advance_by\(steps\) = -1: must be a non-negative"):
        PipelineState(2).advance_by(-1)


def test_states_are_hashable_values():
    assert len({PipelineState(2), PipelineState(2, 0, 0), PipelineState(2, 1)}) == 2
    with pytest.raises(AttributeError):
        PipelineState(2).index = 1
