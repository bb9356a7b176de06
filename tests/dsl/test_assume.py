"""lk.assume: facts of the integer parameters that the proofs use (bounds, ring states, the
protocol check's search) and that every launch checks on the host (and the interpreter when it
runs the op); every misuse is a TraceError at the user's line."""
import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.core.launch_plan import plan_from_json, plan_to_json
from layoutkit.dsl.interpreter import interpret
from layoutkit.dsl.interpreter.errors import ExecutionError

from .source_lines import line_of

PTR = lk.Pointer[lk.f32]
ONE = lk.tv_layout(Layout(32), Layout(1))


def _line(marker: str) -> int:
    return line_of(__file__, marker)


def test_a_fact_proves_a_ring_counter_non_negative():
    def without(x: PTR, n: lk.i32, m: lk.i32):
        for i in lk.range(0, n - m + 4):
            lk.sm90.consumer_state(i + m - 4, 2)  # NOT PROVEN
    with pytest.raises(lk.TraceError, match="not provably >= 0") as info:
        lk.Kernel(without, 1).ptx(PTR, 64, 3)           # m = 3: m >= 1 only
    assert info.value.location.line == _line("# NOT PROVEN")

    def stated(x: PTR, n: lk.i32, m: lk.i32):
        lk.assume(m >= 4)
        for i in lk.range(0, n - m + 4):
            lk.sm90.consumer_state(i + m - 4, 2)
    lk.Kernel(stated, 1).ptx(PTR, 64, 3)


def test_a_fact_of_a_difference_applies_wherever_its_terms_appear():
    def k(x: PTR, sq: lk.i32, sk: lk.i32):
        lk.assume(sq <= sk)                         # sk - sq >= 0
        for i in lk.range(0, 4):
            lk.sm90.consumer_state(sk - sq + i, 2)  # the hint of sk - sq, plus i >= 0
            lk.sm90.consumer_state(2 * i + sk - sq + 1, 2)
    lk.Kernel(k, 1).ptx(PTR, 64, 64)


def test_refuted_and_misplaced_facts_are_trace_errors():
    def refuted(x: PTR, n: lk.i32):
        lk.assume(n < 0)  # REFUTED
    with pytest.raises(lk.TraceError, match="the declared facts refute the condition") as info:
        lk.Kernel(refuted, 1).ptx(PTR, 64)           # n = 64 specialises n >= 16
    assert info.value.location.line == _line("# REFUTED")

    def refuted_by_ranges(x: PTR, n: lk.i32):
        lk.assume(n // 16 < 1)  # REFUTED BY RANGES
    with pytest.raises(lk.TraceError, match=r"refute it \(n/16 is in 1\.\.134217727 for every"):
        lk.Kernel(refuted_by_ranges, 1).ptx(PTR, 64)

    def thread(x: PTR, n: lk.i32):
        lk.assume(lk.thread_id() < n)  # NOT A PARAMETER
    with pytest.raises(lk.TraceError, match="tid is not an integer parameter") as info:
        lk.Kernel(thread, 1).ptx(PTR, 64)
    assert info.value.location.line == _line("# NOT A PARAMETER")

    def loop(x: PTR, n: lk.i32):
        for i in lk.range(0, n):
            lk.assume(i < 8)
    with pytest.raises(lk.TraceError, match="is not an integer parameter"):
        lk.Kernel(loop, 1).ptx(PTR, 64)

    def either(x: PTR, n: lk.i32, m: lk.i32):
        lk.assume((n < 100) | (m < 100))
    with pytest.raises(lk.TraceError, match="joined with &"):
        lk.Kernel(either, 1).ptx(PTR, 64, 64)

    def python_bool(x: PTR, n: lk.i32):
        lk.assume(True)
    with pytest.raises(lk.TraceError, match="the Python bool True"):
        lk.Kernel(python_bool, 1).ptx(PTR, 64)


def _copy_kernel():
    @lk.kernel(num_warps=1)
    def copy(x: lk.Tensor[lk.f32, 1], y: lk.Tensor[lk.f32, 1], n: lk.i32):
        lk.assume((x.shape[0] <= y.shape[0]) & (n >= 1))  # THE FACT
        X = x.tile((32,), (lk.block_id(0),)).partition(ONE)
        Y = y.tile((32,), (lk.block_id(0),)).partition(ONE)
        lk.store(Y, lk.load(X) * 2.0)
    return copy


def test_the_host_refuses_a_launch_that_breaks_a_fact():
    copy = _copy_kernel()
    x, y = np.ones(64, np.float32), np.zeros(32, np.float32)
    with pytest.raises(lk.KernelArgumentError) as info:
        copy[2](x, y, 5)                              # x has 64 elements, y 32
    message = str(info.value)
    # n = 5 specialises n >= 1, so the kept condition is the shapes' (n = 0 is another key)
    assert "kernel copy: lk.assume(x_shape0 <= y_shape0) at " in message, message
    assert f"test_assume.py:{_line('# THE FACT')} does not hold" in message, message
    assert "(x_shape0 = 64, y_shape0 = 32)" in message, message
    assert info.value.location.line == _line("copy[2](x, y, 5)")      # the caller's line
    with pytest.raises(lk.KernelArgumentError, match="n = 0"):
        copy[2](x, np.zeros(64, np.float32), 0)


def test_the_interpreter_checks_the_fact_and_runs_when_it_holds():
    copy = _copy_kernel()
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    interpret(copy, 2, x, y, 3)
    assert (y == 2 * x).all()
    with pytest.raises(ExecutionError, match=r"lk.assume\(.*\) does not hold") as info:
        interpret(copy, 2, x, np.zeros(32, np.float32), 3)
    assert info.value.location.line == _line("# THE FACT")


def test_the_launch_plan_keeps_its_facts_through_the_cache():
    copy = _copy_kernel()
    x = np.ones(64, np.float32)
    spec = copy.specialize(x, x, 5)
    plan = plan_from_json(plan_to_json(spec.plan, spec.ir))
    assert [a.text for a in plan.assumptions] == ["x_shape0 <= y_shape0"]
    plan.check_assumptions((x, x, 5))
    with pytest.raises(lk.KernelArgumentError, match="x_shape0 = 64, y_shape0 = 32"):
        plan.check_assumptions((x, x[:32], 5))
    zero = copy.specialize(x, x, 0)                   # n = 0: n >= 1 is kept and checked
    assert [a.text for a in zero.plan.assumptions] == ["(n >= 1) & (x_shape0 <= y_shape0)"]
    with pytest.raises(lk.KernelArgumentError, match="n = 0"):
        zero.plan.check_assumptions((x, x, 0))


def test_a_fact_traced_at_one_line_several_times_is_checked_once_per_launch():
    @lk.kernel(num_warps=1)
    def copies(x: lk.Tensor[lk.f32, 1], y: lk.Tensor[lk.f32, 1]):
        for t in range(3):                       # a Python loop: the line traced three times
            lk.assume(x.shape[0] <= y.shape[0])
            X = x.tile((32,), (lk.block_id(0) * 3 + t,)).partition(ONE)
            lk.store(y.tile((32,), (lk.block_id(0) * 3 + t,)).partition(ONE), lk.load(X))
    x = np.ones(96, np.float32)
    (fact,) = copies.specialize(x, x).plan.assumptions
    assert fact.text == "x_shape0 <= y_shape0"


def test_the_protocol_check_walks_only_values_that_obey_the_facts():
    def ring(x: PTR, n: lk.i32, m: lk.i32):
        lk.assume(n >= m + 40)
        full = lk.sm90.mbarrier_array(2, 32, name="full")     # every thread arrives
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        for i in lk.range(0, n - m):
            s = lk.sm90.consumer_state(i, 2)
            lk.sm90.mbarrier_arrive(full[s.stage])
            lk.sm90.mbarrier_wait(full[s.stage], s.phase)
    from layoutkit.dsl.check.extract import Extractor
    with lk.protocol_check_skipped():
        spec = lk.Kernel(ring, 1).specialize(PTR, 64, 16)
    ex = Extractor(spec.ir)
    chosen = {ex.params[vid]: int(ex.values.fixed[vid]) for vid in ex.searched}
    assert chosen["n"] >= chosen["m"] + 40, chosen
    lk.Kernel(ring, 1).ptx(PTR, 64, 16)             # and the check itself passes


def test_the_protocol_check_says_when_no_value_it_tried_obeys_the_facts():
    def far(x: PTR, n: lk.i32):
        lk.assume(n >= 2 ** 30)                     # past every multiple the search tries
        full = lk.sm90.mbarrier_array(2, 32, name="full")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        for i in lk.range(0, 3):
            s = lk.sm90.consumer_state(i, 2)
            lk.sm90.mbarrier_arrive(full[s.stage])
            lk.sm90.mbarrier_wait(full[s.stage], s.phase)
    with pytest.warns(lk.ProtocolWarning, match=r"no parameter values the check tried satisfy "
                      r"lk.assume \(n >= 1073741824\)"):
        lk.Kernel(far, 1).ptx(PTR, 64)
