"""The interpreter's wgmma discipline, in the static check's words (layoutkit.sync.wgmma_rules):
a wgmma uncommitted or in flight when a thread exits, and a wgmma op run by part of a
warpgroup. The kernels are traced under lk.protocol_check_skipped(), so the run decides; each
case runs under several seeds (interleavings) and asserts the message and the line."""
import re

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.interpreter import DivergenceError, ExecutionError, run_ir

from ...misuse.harness import COLLECTIVE, IN_FLIGHT
from ..source_lines import line_of
from ..wgmma_kernels import ONES_WRITERS
from ..wgmma_kernels import accumulator_out as out
from ..wgmma_kernels import ones_operand as ones_tile

SEEDS = range(3)
TV = ONES_WRITERS[4]
THREAD = re.compile(r"CTA \(0, 0, 0\) thread (\d+) \(warp \d, lane \d+\) ")


def L(marker: str) -> int:
    return line_of(__file__, marker)


def run(body, seed: int, c=None):
    with lk.protocol_check_skipped():
        fn = lk.Kernel(body, 4).ir(lk.Pointer[lk.f32])
    c = np.zeros(64 * 64, np.float32) if c is None else c
    run_ir(fn, 1, [c], seed=seed)
    return c


def raised(body, error, seed: int):
    with pytest.raises(error) as info:
        run(body, seed)
    return info.value


def exit_error(body, seed: int, marker: str, rest: str) -> int:
    """Run `body`: an ExecutionError at the line of `marker` whose message is a thread, then
    `rest`; returns that thread."""
    err = raised(body, ExecutionError, seed)
    assert err.location.line == L(marker)
    m = THREAD.match(err.message)
    assert m is not None and err.message[m.end():] == rest, err.message
    return int(m.group(1))


# ---- in flight when a thread exits ------------------------------------------------------------
def never_committed(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    lk.sm90.wgmma_fence()
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # UNCOMMITTED


@pytest.mark.parametrize("seed", SEEDS)
def test_a_wgmma_never_committed_when_its_thread_exits(seed):
    exit_error(never_committed, seed, "# UNCOMMITTED", (
        f"reaches the end of the kernel with the wgmma at line {L('# UNCOMMITTED')} never "
        "committed: no lk.sm90.wgmma_commit() follows it, and lk.sm90.wgmma_wait retires "
        f"committed groups only, {IN_FLIGHT}; lk.sm90.wgmma_commit() and lk.sm90.wgmma_wait(0) "
        "after it"))


def never_waited(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    lk.sm90.wgmma_fence()
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # UNWAITED
    lk.sm90.wgmma_commit()                                                 # ITS COMMIT


@pytest.mark.parametrize("seed", SEEDS)
def test_a_committed_wgmma_no_wait_retired_when_its_thread_exits(seed):
    exit_error(never_waited, seed, "# UNWAITED", (
        f"reaches the end of the kernel with the wgmma at line {L('# UNWAITED')} still in "
        f"flight: it was committed at line {L('# ITS COMMIT')}, but no lk.sm90.wgmma_wait "
        f"follows that commit, {IN_FLIGHT}; lk.sm90.wgmma_wait(0) before the end"))


def pipelined(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    loop = lk.range(0, 3, carry=(lk.sm90.wgmma_accumulator(64),))
    for i, (acc,) in loop:
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(acc, s, s, accumulate=i > 0)                   # K STEP
        lk.sm90.wgmma_commit()                                             # K COMMIT
        lk.sm90.wgmma_wait(1)                                              # KEEP ONE
        loop.next(acc)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_pipelined_wait_leaves_the_last_step_in_flight(seed):
    exit_error(pipelined, seed, "# K STEP", (
        f"reaches the end of the kernel with the wgmma at line {L('# K STEP')} still in flight: "
        f"it was committed at line {L('# K COMMIT')}, but the last lk.sm90.wgmma_wait after it, "
        f"at line {L('# KEEP ONE')}, leaves 1 group(s) in flight, {IN_FLIGHT}; "
        "lk.sm90.wgmma_wait(0) before the end"))


def empty_group_counts(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    lk.sm90.wgmma_fence()
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_commit()                   # an empty group: wait(1) keeps it, not the wgmma's
    lk.sm90.wgmma_wait(1)
    lk.barrier()
    lk.store(s.partition(TV), lk.full(TV, 2.0, lk.bf16))       # the wgmma no longer reads s


@pytest.mark.parametrize("seed", SEEDS)
def test_an_empty_commit_group_counts_as_a_group_as_in_ptx(seed):
    """Were the empty group not counted, the wgmma would still own s at the store (a RaceError)
    and be in flight at the exit."""
    run(empty_group_counts, seed)


# ---- part of a warpgroup -----------------------------------------------------------------------
def half_wgmma(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    lk.sm90.wgmma_fence()
    with lk.if_(lk.thread_id() < 64):
        lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # HALF WGMMA
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)


def half_commit(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    lk.sm90.wgmma_fence()
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)
    with lk.if_(lk.thread_id() >= 64):
        lk.sm90.wgmma_commit()                                             # HALF COMMIT
    lk.sm90.wgmma_wait(0)
    lk.barrier()                    # no thread exits (uncommitted) before every wait ran


def elected_fence(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    with lk.sm90.elect_one():
        lk.sm90.wgmma_fence()                                              # ELECTED FENCE
    lk.sm90.wgmma_fence()
    acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    lk.store(out(c), acc)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("body, what, marker, threads", [
    (half_wgmma, "lk.sm90.wgmma", "# HALF WGMMA",
     "64 of its 128 threads executing it (threads 0-63)"),
    (half_commit, "lk.sm90.wgmma_commit()", "# HALF COMMIT",
     "64 of its 128 threads executing it (threads 64-127)"),
    (elected_fence, "lk.sm90.wgmma_fence()", "# ELECTED FENCE",
     "4 of its 128 threads executing it (threads 0, 32, 64, 96)"),
])
def test_a_wgmma_op_part_of_a_warpgroup_runs(body, what, marker, threads, seed):
    err = raised(body, DivergenceError, seed)
    assert err.location.line == L(marker)
    assert err.message == (
        f"CTA (0, 0, 0): {what} at line {L(marker)} runs on part of a warpgroup: warpgroup 0 "
        f"(threads 0-127) has {threads}. {COLLECTIVE}")


def half_wait(c: lk.Pointer[lk.f32]):
    s = ones_tile()
    lk.sm90.wgmma_fence()
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # SKIPPED WAIT
    lk.sm90.wgmma_commit()                                                 # HALF WAIT COMMIT
    with lk.if_(lk.thread_id() < 64):
        lk.sm90.wgmma_wait(0)


@pytest.mark.parametrize("seed", SEEDS)
def test_threads_that_skip_the_wait_exit_with_the_wgmma_in_flight(seed):
    """The first of threads 64-127 to exit is reported, before the wait is decided partial."""
    tid = exit_error(half_wait, seed, "# SKIPPED WAIT", (
        f"reaches the end of the kernel with the wgmma at line {L('# SKIPPED WAIT')} still in "
        f"flight: it was committed at line {L('# HALF WAIT COMMIT')}, but no "
        f"lk.sm90.wgmma_wait follows that commit, {IN_FLIGHT}; lk.sm90.wgmma_wait(0) before the "
        "end"))
    assert 64 <= tid < 128
