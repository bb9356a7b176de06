"""The protocol model and checker on hand-built event lists: a sound ring, and each classic
mistake of hopper-ptx.md §3 (wrong initial parity both ways, arrive count != init count,
expect-tx != attached bytes)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutkit.sync import PipelineState, ProtocolError
from layoutkit.sync import (Arrive, ArriveExpectTx, Copy, ExpectTx, Init, Protocol, RolePath,
                            Wait)
from layoutkit.sync import check_protocol as check
from layoutkit.sync import check_protocol_or_raise as check_or_raise


def ring(stages=2, iterations=6, *, producer_phase=1, consumer_phase=0, consumer_groups=2,
         group_threads=128, empty_count=256, tx=16384, copies=(8192, 8192)) -> Protocol:
    """A TMA ring: one elected producer, `consumer_groups` consumer warpgroups."""
    producer_events, p = [], PipelineState(stages, 0, producer_phase)
    for _ in range(iterations):
        producer_events += [Wait("empty", p.index, p.parity),
                            ArriveExpectTx("full", p.index, tx),
                            *[Copy("full", p.index, b) for b in copies]]
        p = p.advance()
    paths = [RolePath("producer", tuple(producer_events))]
    for g in range(consumer_groups):
        events, c = [], PipelineState(stages, 0, consumer_phase)
        for _ in range(iterations):
            events += [Wait("full", c.index, c.parity), Arrive("empty", c.index, group_threads)]
            c = c.advance()
        paths.append(RolePath(f"consumer{g}", tuple(events)))
    inits = (Init("full", stages, 1), Init("empty", stages, empty_count, starts_signalled=True))
    return Protocol(inits, tuple(paths))


@settings(max_examples=40, deadline=None)
@given(stages=st.integers(1, 4), iterations=st.integers(0, 12), groups=st.integers(1, 3))
def test_a_correct_ring_has_no_issues(stages, iterations, groups):
    protocol = ring(stages, iterations, consumer_groups=groups, empty_count=128 * groups)
    assert check(protocol) == []
    check_or_raise(protocol)


def test_producer_starting_at_phase_0_deadlocks_with_the_hint():
    issues = check(ring(producer_phase=0))
    assert issues[0].startswith("wrong parity: role 'producer' waits on 'empty'[0] for parity 0 "
                                "at its wait #0 on that barrier, which starts signalled")
    assert issues[0].endswith("this wait blocks until a later phase or forever")
    assert any(i.startswith("deadlock: role 'producer' blocks forever at event 0, the wait on "
                            "'empty'[0] for parity 0") and "uses parity 1 "
               "(PipelineState.producer_start)" in i for i in issues), issues
    assert any(i.startswith("deadlock: role 'consumer0'") for i in issues), issues


def test_consumer_starting_at_phase_1_is_wrong_parity_and_a_race():
    protocol = ring(consumer_phase=1)
    issues = check(protocol)
    assert issues[0] == (
        "wrong parity: role 'consumer0' waits on 'full'[0] for parity 1 at its wait #0 on that "
        "barrier, which does not start signalled, so wait #n is for phase n and uses parity n mod "
        "2 (PipelineState.consumer_start); this wait may pass on the wrong phase (a race) or block")
    assert not any("uses parity 1 (PipelineState.producer_start)" in i for i in issues), issues
    # scheduled before the producer, the wrong wait passes on the fresh barrier: the race
    consumers_first = Protocol(protocol.inits, protocol.paths[1:] + protocol.paths[:1])
    assert any(i.startswith("race: role 'consumer0' waits on 'full'[0] for parity 1 and passes "
                            "at once on the fresh barrier") for i in check(consumers_first))


def test_init_count_too_small_for_the_arrivals():
    # empty initialised for one warpgroup, but two arrive: phases complete twice per round
    issues = check(ring(empty_count=128, iterations=8))
    assert any(i.startswith("deadlock: role 'producer' blocks forever at event 8") and
               i.endswith("arrive count != init count: the barrier ran 1 phase(s) past the one "
                          "this role waits for (phase 0), so each phase got more arrivals than "
                          "its init count 128") for i in issues), issues


def test_one_event_with_more_arrivals_than_the_count():
    issues = check(ring(consumer_groups=1, empty_count=1, iterations=2))
    assert any(i.startswith("arrive count != init count: role 'consumer0' arrives 128 times on "
                            "'empty'[0], but phase 0 expects 1 more of its 1") for i in issues)


def test_init_count_too_large_deadlocks_and_reports_the_partial_phase():
    issues = check(ring(consumer_groups=2, empty_count=512))
    assert any(i.startswith("deadlock: role 'producer'") and "256 of 512 arrivals" in i
               for i in issues), issues
    assert any(i == "arrive count != init count: phase 0 of 'empty'[0] ends with 256 of its "
                    "512 arrivals" for i in issues), issues


@pytest.mark.parametrize("copies, verdict", [((8192,), "the wait hangs"),
                                              ((8192, 8192, 4096), "the phase completes while "
                                                                   "bytes still land")])
def test_expect_tx_must_match_the_attached_copies(copies, verdict):
    issues = check(ring(copies=copies, iterations=2))
    delivered = sum(copies)
    assert f"expect-tx != attached bytes: role 'producer' expects 16384 bytes on 'full'[0] but " \
           f"the copies attached deliver {delivered} ({verdict})" in issues, issues


def test_expect_tx_without_arriving_and_split_arrivals():
    # two producers share full[0] (count 2): one expects the bytes separately, both arrive
    inits = (Init("full", 1, 2),)
    paths = (RolePath("a", (ExpectTx("full", 0, 4096), Arrive("full", 0), Copy("full", 0, 4096))),
             RolePath("b", (Arrive("full", 0),)),
             RolePath("c", (Wait("full", 0, 0),)))
    assert check(Protocol(inits, paths)) == []
    # without b's arrival the consumer waits forever
    issues = check(Protocol(inits, paths[::2]))
    assert len(issues) == 2 and issues[0].startswith("deadlock: role 'c'"), issues
    assert "1 of 2 arrivals and 0 transaction bytes" in issues[0]


def test_check_or_raise_lists_every_issue_and_bad_events_are_refused():
    with pytest.raises(ProtocolError) as info:
        check_or_raise(ring(producer_phase=0))
    assert str(info.value).startswith("barrier protocol: \n  - wrong parity: role 'producer' "
                                      "waits on 'empty'[0] for parity 0 at its wait #0")
    assert "\n  - deadlock: role 'producer'" in str(info.value)
    with pytest.raises(ProtocolError, match=r"role 'x' event Wait = \('nope', 0\): names a "
                                            r"barrier/stage that no Init declares"):
        check(Protocol((), (RolePath("x", (Wait("nope", 0, 0),)),)))
    with pytest.raises(ProtocolError, match="is not a barrier event"):
        check(Protocol((), (RolePath("x", ("arrive",)),)))


def test_a_barrier_completing_phases_nobody_waits_for():
    inits = (Init("done", 1, 1),)
    paths = (RolePath("signal", tuple(Arrive("done", 0) for _ in range(3))),
             RolePath("watch", (Wait("done", 0, 0),)))
    assert check(Protocol(inits, paths)) == [
        "arrive count != init count: 'done'[0] completed 3 phases but is waited on at most 1 "
        "times by one role: each phase got more arrivals than needed - its init count 1 is too "
        "small for the threads that arrive"]
