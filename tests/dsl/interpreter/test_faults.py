"""Faults the interpreter reports at the offending op (out of bounds, races, deadlocks, divergent
shuffles) and its determinism: the same seed gives the same interleaving and result."""
import copy
import re

import numpy as np
import pytest

from layoutkit.dsl.interpreter import (DeadlockError, DivergenceError, MemoryFaultError,
                                       RaceError, interpret)
from layoutkit.dsl.interpreter.launch import run_ir
from layoutkit.dsl.core.ir import Block, Op
from layoutkit.dsl.core.types import bool_, i32

from .. import source_lines
from ..block_kernels import WARP_BLOCKED, WARP_LOCAL, convert_roundtrip
from . import kernels
from .kernels import exchange, two_barriers, unmasked_copy

KERNELS = kernels.__file__


def line_of(text: str) -> int:
    return source_lines.line_of(KERNELS, text)


def test_out_of_bounds_load_names_the_array_and_line():
    x, y = np.zeros(40, np.float32), np.zeros(64, np.float32)
    with pytest.raises(MemoryFaultError) as info:
        interpret(unmasked_copy, 1, x, y)
    text = str(info.value)
    assert f"kernels.py:{line_of('# unmasked load')}" in text
    assert "outside the argument array x of 40 f32 elements" in text


def test_unsynchronized_shared_exchange_is_a_race_at_either_access():
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    for seed in range(3):
        with pytest.raises(RaceError) as info:
            interpret(exchange, 1, x, y, False, seed=seed)
        lines = {line_of("# the read of another"), line_of("lk.store(buffer.partition(OWN)")}
        assert info.value.location.line in lines
        assert "nothing ordering the two accesses" in str(info.value)
    interpret(exchange, 1, x, y, True)
    np.testing.assert_array_equal(y, x)


def _threads_below(fn, body: Block, count: int) -> Op:
    """An `if tid < count` op (new IR values of fn) around no ops yet."""
    tid = next(op.results[0] for op in fn.body.ops if op.name == "thread_idx")
    bound = fn.new_value(i32)
    cond = fn.new_value(bool_)
    top = next(i for i, op in enumerate(body.ops) if op.name not in ("thread_idx", "block_idx"))
    body.ops[top:top] = [Op("const", (), (bound,), {"value": count}),
                         Op("cmp", (tid, bound), (cond,), {"kind": "lt"})]
    return Op("if", (cond,), (), {}, (Block(),))


def test_barrier_that_half_the_threads_skip_is_a_deadlock_listing_who_waits():
    fn = copy.deepcopy(two_barriers.ir(np.zeros(32, np.float32)))   # not the cached one
    ops = fn.body.ops
    at = next(i for i, op in enumerate(ops) if op.name == "barrier")
    barrier = ops[at]
    guard = _threads_below(fn, fn.body, 16)      # tracing refuses this; edit the IR instead
    at += 2
    guard.blocks[0].ops.append(barrier)
    ops[at] = guard
    x = np.zeros(32, np.float32)
    with pytest.raises(DeadlockError) as info:
        run_ir(fn, 1, (x,), ["x"], seed=3)
    text = str(info.value)
    assert (f"threads 0-15 (warp 0) waits at bar.sync 0: 16 of 32 threads arrived "
            f"(line {line_of('# the barrier of two_barriers')})") in text
    assert "threads 16-31 (warp 0) exited (ran off the end of the kernel)" in text


def test_shuffle_that_lanes_reach_apart_is_a_divergence():
    fn = copy.deepcopy(convert_roundtrip.ir(np.zeros(256, np.float32), np.zeros(256, np.float32),
                                            WARP_LOCAL, WARP_BLOCKED))
    shuffles = [op for op in fn.body.ops if op.name == "shfl"]
    assert len(shuffles) >= 2
    # lanes 0-15 see the second shuffle first: swap the two for them only
    first, second = shuffles[0], shuffles[1]
    i, j = fn.body.ops.index(first), fn.body.ops.index(second)
    guard = _threads_below(fn, fn.body, 16)
    i, j = i + 2, j + 2
    guard.blocks[0].ops.append(Op("shfl", second.operands, (fn.new_value(second.results[0].type),),
                                  dict(second.attrs), (), second.location))
    fn.body.ops.insert(i, guard)
    x = np.arange(256, dtype=np.float32)
    line = second.location.line
    for seed in range(3):
        with pytest.raises(DivergenceError) as info:
            run_ir(fn, 1, (x, np.zeros(256, np.float32)), ["x", "y"], seed=seed)
        assert info.value.location.line == line
        assert re.fullmatch(
            rf"CTA \(0, 0, 0\) thread (\d+) \(warp 0, lane \d+\): thread \1 reaches "
            rf"shfl\.sync\.idx \(line {line}\) while (thread \d+ waits|threads [\d, -]+ wait) "
            rf"at another shfl\.sync\.idx \(line {line}\): every thread of the warp must "
            r"execute the same instruction together \(PTX \.sync\.aligned\)",
            info.value.message), info.value.message


def test_same_seed_same_schedule_other_seeds_other_schedules():
    x = np.arange(256, dtype=np.float32)
    runs = []
    for seed in (11, 11, 12):
        y = np.zeros(256, np.float32)
        runs.append((interpret(convert_roundtrip, 1, x, y, WARP_LOCAL, WARP_BLOCKED,
                               seed=seed), y))
    (a, ya), (b, yb), (c, yc) = runs
    assert a.schedule == b.schedule and a.digest == b.digest
    assert c.digest != a.digest
    np.testing.assert_array_equal(ya, yb)
    np.testing.assert_array_equal(ya, yc)
