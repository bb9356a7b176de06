"""lk.index_value: a loaded integer becomes a kernel integer. It bounds lk.range loops and an
lk.if_ in a warp-specialized ring, which the interpreter runs against numpy per CTA; its PTX is
the loaded register itself; the protocol check chooses its value (a loop under a branch on it
counts only where the branch is taken; a stated range bounds the choice); the static bounds take
the stated range; the interpreter refuses a value that differs between threads or leaves its
range; and every argument mistake is a TraceError at the user's line."""
import re
import warnings

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.check.extract import extract
from layoutkit.dsl.core.bounds import value_range
from layoutkit.dsl.core.tracer import current
from layoutkit.dsl.interpreter import interpret
from layoutkit.dsl.interpreter.errors import DivergenceError, ExecutionError
from layoutkit.ptx import assemble

from .source_lines import line_of

STAGES, THREADS = 2, 384
PRODUCED = lk.TVLayout((128,), Layout((128, 1), (1, 0)))
ONE_EACH = lk.TVLayout((256,), Layout((256, 1), (1, 0)))
SLOT0 = lk.TVLayout((128,), Layout((256, 1), (0, 0)))      # every consumer reads element 0


def everyone(threads: int) -> lk.TVLayout:
    """Every thread reads the one element of a (1,) tile: a broadcast load."""
    return lk.TVLayout((1,), Layout((threads, 1), (0, 0)))


def loaded(t, index, name, **kwargs):
    return lk.index_value(lk.load(t.tile((1,), (index,)).partition(everyone(THREADS))),
                          name=name, **kwargs)


@lk.kernel(num_warps=12)
def ring(out: lk.Tensor[lk.i32, 1], bounds: lk.Tensor[lk.i32, 1]):
    """CTA b: the producer hands k + 1 through a 2-stage ring for k in start .. stop-1 (bounds[b],
    bounds[b+1]); each consumer thread sums what it received into out[b * 256 + thread]; CTAs
    whose range is empty skip both roles."""
    full = lk.sm90.mbarrier_array(STAGES, 128, name="full")
    empty = lk.sm90.mbarrier_array(STAGES, 256, name="empty")
    slots = lk.shared_tensor(Layout((128, STAGES)), lk.i32, name="slots")
    b = lk.block_id(0)
    start = loaded(bounds, b, "start", lo=0)
    stop = loaded(bounds, b + 1, "stop", lo=0)
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=24):
        with lk.if_(start < stop):
            for k in lk.range(0, stop - start):
                p = lk.sm90.producer_state(k, STAGES)
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                mine = slots.tile((128,), (0, p.stage)).partition(PRODUCED)
                lk.store(mine, lk.full(PRODUCED, 0, lk.i32) + lk.cast(start + k + 1, lk.i32))
                lk.sm90.mbarrier_arrive(full[p.stage])
    with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
        with lk.if_(start < stop):
            loop = lk.range(0, stop - start, carry=(lk.full(ONE_EACH, 0, lk.i32),))
            for k, (acc,) in loop:
                c = lk.sm90.consumer_state(k, STAGES)
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)
                got = lk.load(slots.tile((128,), (0, c.stage)).partition(SLOT0))
                lk.sm90.mbarrier_arrive(empty[c.stage])
                loop.next(acc + lk.RegisterTensor(lk.i32, ONE_EACH, got.values))
            (total,) = loop.results
            lk.store(out.tile((256,), (b,)).partition(ONE_EACH), total)


def test_loaded_bounds_drive_the_loops_and_the_branch_on_the_interpreter():
    bounds = np.array([0, 3, 3, 10, 11], np.int32)          # 3 values, none, 7, 1
    out = np.full(4 * 256, -1, np.int32)
    interpret(ring, 4, out, bounds, seed=1)
    want = [sum(range(a + 1, b + 1)) if b > a else -1 for a, b in zip(bounds, bounds[1:])]
    assert out.reshape(4, 256).tolist() == [[w] * 256 for w in want]


def test_the_lowering_is_the_loaded_register_itself():
    bounds, out = np.zeros(5, np.int32), np.zeros(1024, np.int32)
    ptx = ring.ptx(out, bounds)
    loads = re.findall(r"ld\.global\.s32 (%\w+),", ptx)
    assert len(loads) == 2                                    # start and stop, once each
    start, stop = loads
    # the branch compares the two loaded registers directly: nothing copies them
    assert re.search(rf"setp\.\w+\.s32 %p\d+, {re.escape(start)}, {re.escape(stop)};", ptx) or \
        re.search(rf"setp\.\w+\.s32 %p\d+, {re.escape(stop)}, {re.escape(start)};", ptx)
    assert not re.search(rf"mov\.\w+ %\w+, {re.escape(start)};", ptx)
    assemble(ptx)


def test_the_protocol_check_chooses_the_values_under_the_branch():
    bounds, out = np.zeros(5, np.int32), np.zeros(1024, np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        protocol = extract(ring.ir(out, bounds))
    # start is found first (its multiples of 1, then stop's): every loop runs 2 * STAGES + 1
    # times, which needs start < stop, the branch both roles' loops sit under
    assert protocol.assumed == "start=1, stop=6"
    producer = next(c for c in protocol.classes if c.role == "producer")
    arrives = [e for e in producer.events if type(e).__name__ == "Arrive"]
    assert len(arrives) == 5


def test_a_stated_range_bounds_the_checks_choice():
    @lk.kernel(num_warps=12)
    def capped(out: lk.Tensor[lk.i32, 1], counts: lk.Tensor[lk.i32, 1]):
        full = lk.sm90.mbarrier_array(STAGES, 128, name="full")
        empty = lk.sm90.mbarrier_array(STAGES, 256, name="empty")
        n = loaded(counts, lk.block_id(0), "n", lo=2, hi=3)
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full, empty)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        with lk.sm90.warp_role("producer", warpgroups=(0,), registers=24):
            for k in lk.range(0, n):
                p = lk.sm90.producer_state(k, STAGES)
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                lk.sm90.mbarrier_arrive(full[p.stage])
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
            for k in lk.range(0, n):
                c = lk.sm90.consumer_state(k, STAGES)
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)
                lk.sm90.mbarrier_arrive(empty[c.stage])
    counts, out = np.array([3, 2], np.int32), np.zeros(1, np.int32)
    assert extract(capped.ir(out, counts)).assumed == "n=3"   # 5 wanted, 3 the most stated
    interpret(capped, 2, out, counts)
    with pytest.raises(ExecutionError, match=r"lk.index_value n = 7 in CTA \(0, 0, 0\) thread "
                       r"\d+ \(warp \d+, lane \d+\), outside the stated range 2\.\.3") as info:
        interpret(capped, 1, out, np.array([7], np.int32))
    assert info.value.location.line == line_of(__file__, 'return lk.index_value(lk.load(t.tile')


def test_the_static_bounds_take_the_stated_range():
    seen = {}

    @lk.kernel(num_warps=4)
    def ranges(x: lk.Tensor[lk.i32, 1]):
        one = lk.load(x.tile((1,), (0,)).partition(everyone(128)))
        seen["stated"] = value_range(current(), 4 * lk.index_value(one, lo=1, hi=100) + 3)
        seen["open"] = value_range(current(), lk.index_value(one, lo=-5))
        seen["none"] = value_range(current(), lk.index_value(one))
    ranges.ptx(lk.TensorSpec(lk.i32, (16,)))
    assert seen["stated"] == (7, 403)
    assert seen["open"] == (-5, 2**31 - 1)
    assert seen["none"] == (-2**31, 2**31 - 1)


@lk.kernel(num_warps=4)
def per_thread(x: lk.Tensor[lk.i32, 1], y: lk.Tensor[lk.i32, 1]):
    mine = x.tile((128,), (0,)).partition(lk.tv_layout(Layout(128), Layout(1)))
    n = lk.index_value(lk.load(mine), name="n")  # NOT UNIFORM
    lk.store(y.tile((128,), (0,)).partition(lk.tv_layout(Layout(128), Layout(1))),
             lk.full(lk.tv_layout(Layout(128), Layout(1)), 0, lk.i32) + lk.cast(2 * n, lk.i32))


def test_a_value_that_differs_between_threads_is_a_divergence_error():
    x, y = np.zeros(128, np.int32), np.zeros(128, np.int32)
    interpret(per_thread, 1, x + 4, y)                         # the same everywhere: fine
    assert (y == 8).all()
    x[77] = 1
    with pytest.raises(DivergenceError, match=r"lk.index_value n is 0 in CTA \(0, 0, 0\) thread "
                       r"\d+ .* but 1 in CTA \(0, 0, 0\) thread 77 .*: a kernel integer is the "
                       r"same in every thread of the CTA") as info:
        interpret(per_thread, 1, x, y)
    assert info.value.location.line == line_of(__file__, "# NOT UNIFORM")


@pytest.mark.parametrize("make, message", [
    (lambda one, x: lk.index_value(5), r"takes a runtime integer \(a Scalar or a one-value "
     r"register tensor, e.g. from lk.load\), got 5; a kernel integer already is one"),
    (lambda one, x: lk.index_value(lk.load(x.tile((256,), (0,)).partition(
        lk.tv_layout(Layout(128), Layout(2))))), r"a register tensor of one value per thread "
     r"\(a broadcast load\), got .* with 2 values"),
    (lambda one, x: lk.index_value(lk.cast(one, lk.f32)), r"the value is an i32 or i64, got "
     r"f32; lk.cast it"),
    (lambda one, x: lk.index_value(one, lo=1.5), r"lo is a Python int or None, got 1.5"),
    (lambda one, x: lk.index_value(one, hi=True), r"hi is a Python int or None, got True"),
    (lambda one, x: lk.index_value(one, lo=4, hi=3), r"the stated range lo = 4 .. hi = 3 is "
     r"empty"),
    (lambda one, x: lk.index_value(one, name="2n"), r"name is a Python identifier, got '2n'"),
    (lambda one, x: lk.index_value(one, name="x_shape0"), r"the name 'x_shape0' already names "
     r"a kernel integer of this kernel"),
])
def test_argument_mistakes_are_trace_errors_at_the_users_line(make, message):
    @lk.kernel(num_warps=4)
    def k(x: lk.Tensor[lk.i32, 1]):
        one = lk.load(x.tile((1,), (0,)).partition(everyone(128)))
        make(lk.Scalar(one.values[0]), x)
    with pytest.raises(lk.TraceError, match="lk.index_value: " + message) as info:
        k.ptx(lk.TensorSpec(lk.i32, (256,)))
    assert info.value.location.line == make.__code__.co_firstlineno


def test_outside_a_kernel_it_says_where_it_works():
    with pytest.raises(lk.TraceError, match="lk.index_value is a kernel operation"):
        lk.index_value(3)
