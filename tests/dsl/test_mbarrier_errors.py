"""Every mbarrier/ring mistake is a trace-time TraceError naming the barrier, the value, the rule
and the user's source line."""
import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.sm90.mbarrier import attach_copy

from . import source_lines
from .sync_kernels import is_zero

PTR = lk.Pointer[lk.f32]


def line_of(text: str) -> int:
    return source_lines.line_of(__file__, text)


def trace_error(fn, num_warps=4, **options) -> lk.TraceError:
    with pytest.raises(lk.TraceError) as info:
        lk.Kernel(fn, num_warps, **options).ptx(PTR, 8)
    return info.value


def check(error, marker: str, *fragments: str) -> None:
    message = str(error)
    for fragment in fragments:
        assert fragment in message, message
    assert error.location is not None and error.location.line == line_of(marker), message
    assert f"test_mbarrier_errors.py:{line_of(marker)}" in message


def initialised(count=2, arrive_count=1):
    bars = lk.sm90.mbarrier_array(count, arrive_count, name="full")
    with lk.if_(is_zero(lk.thread_id())):
        lk.sm90.mbarrier_init(bars)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return bars


def test_wait_on_a_barrier_never_initialised():
    def k(x: PTR, n: lk.i32):
        full = lk.sm90.mbarrier_array(2, 1, name="full")
        lk.sm90.mbarrier_wait(full[0], 0)  # UNINIT WAIT
    check(trace_error(k), "# UNINIT WAIT", "lk.sm90.mbarrier_wait on full[0]",
          "'full' is not initialised", "lk.sm90.mbarrier_init(full)")


def test_arrive_before_init_is_refused_too():
    def k(x: PTR, n: lk.i32):
        full = lk.sm90.mbarrier_array(2, 1, name="full")
        lk.sm90.mbarrier_arrive(full[1])  # EARLY ARRIVE
        lk.sm90.mbarrier_init(full)
    check(trace_error(k), "# EARLY ARRIVE", "lk.sm90.mbarrier_arrive on full[1]", "not initialised")


def test_expect_tx_scope_without_copies():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        with lk.sm90.elect_one():
            with lk.sm90.expect_tx(full[0]):  # EMPTY SCOPE
                pass
    check(trace_error(k), "# EMPTY SCOPE", "lk.sm90.expect_tx(full[0])", "no async copy was "
                                                                         "attached",
          "0 bytes")


def test_copy_attached_without_an_open_scope():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        with lk.sm90.expect_tx(full[0]):
            attach_copy(full[0], 64, "TMA copy into tile")
        attach_copy(full[1], 64, "TMA copy into tile")  # NO SCOPE
    check(trace_error(k), "# NO SCOPE", "TMA copy into tile completes on full[1], but no "
          "lk.sm90.expect_tx(full[1]) scope is open")


def test_copy_in_a_loop_inside_the_scope_has_unknown_bytes():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        with lk.sm90.expect_tx(full[0]):
            for i in lk.range(0, n):
                attach_copy(full[0], 64, "TMA copy")  # LOOP COPY
    check(trace_error(k), "# LOOP COPY", "inside lk.sm90.expect_tx(full[0])", "bytes per phase")


@pytest.mark.parametrize("stage", [2, 5, -1])
def test_stage_out_of_range(stage):
    def k(x: PTR, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_arrive(full[stage])  # BAD STAGE
    check(trace_error(k), "# BAD STAGE", f"'full'[{stage}]", "outside 0..1", "2 barriers")


def test_symbolic_stage_provably_out_of_range():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        for i in lk.range(0, n):
            lk.sm90.mbarrier_arrive(full[i % 4 + 2])  # SYMBOLIC STAGE
    check(trace_error(k), "# SYMBOLIC STAGE", "outside 0..1")


@pytest.mark.parametrize("arrive_count", [0, 1 << 20])
def test_arrive_count_outside_the_hardware_range(arrive_count):
    def k(x: PTR, n: lk.i32):
        lk.sm90.mbarrier_array(2, arrive_count, name="bad")  # BAD COUNT
    check(trace_error(k), "# BAD COUNT", "lk.sm90.mbarrier_array", "arrive_count",
          f"{arrive_count}", "2^20-1")


def test_arrive_count_above_the_array_count():
    def k(x: PTR, n: lk.i32):
        full = initialised(arrive_count=4)
        lk.sm90.mbarrier_arrive(full[0], count=5)  # TOO MANY
    check(trace_error(k), "# TOO MANY", "count = 5", "1..4")


def test_phase_not_provably_a_parity():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        for i in lk.range(0, n):
            lk.sm90.mbarrier_wait(full[i % 2], i // 2)  # BAD PHASE
    check(trace_error(k), "# BAD PHASE", "not provably 0 or 1", "% 2")


def test_phase_two_is_refused():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_wait(full[0], 2)  # PHASE TWO
    check(trace_error(k), "# PHASE TWO", "parity 2")


def test_initialising_twice_and_duplicate_names():
    def twice(x: PTR, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_init(full)  # INIT TWICE
    check(trace_error(twice), "# INIT TWICE", "initialised twice")

    def dup(x: PTR, n: lk.i32):
        lk.sm90.mbarrier_array(2, 1, name="full")
        lk.sm90.mbarrier_array(2, 1, name="full")  # DUP NAME
    check(trace_error(dup), "# DUP NAME", "'full' is already an mbarrier array")


def test_remote_arrive_needs_a_cluster_kernel():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_arrive(full[0], cta=1)  # NO CLUSTER
    check(trace_error(k), "# NO CLUSTER", "cta=1", "cluster kernel")


def test_remote_arrive_rank_outside_the_cluster():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_arrive(full[0], cta=2)  # BAD RANK
    check(trace_error(k, cluster=(2, 1, 1)), "# BAD RANK", "0..1", "2 CTAs")


def test_wait_and_whole_array_misuse():
    def k(x: PTR, n: lk.i32):
        full = initialised()
        lk.sm90.mbarrier_wait(full, 0)  # WHOLE ARRAY
    check(trace_error(k), "# WHOLE ARRAY", "the whole array 'full'")

    def k2(x: PTR, n: lk.i32):
        full = initialised()
        with lk.sm90.elect_one():
            lk.sm90.mbarrier_wait(full[0], 0)  # WAIT IN ELECT
    check(trace_error(k2), "# WAIT IN ELECT", "inside lk.sm90.elect_one()")


def test_ring_state_counter_must_be_non_negative():
    def k(x: PTR, n: lk.i32):
        lk.sm90.producer_state(n - 9, 4)  # NEGATIVE COUNTER (n = 8 specialises n >= 8)
    check(trace_error(k), "# NEGATIVE COUNTER", "lk.sm90.producer_state", "not provably >= 0")

    def k2(x: PTR, n: lk.i32):
        lk.sm90.consumer_state(0, 0)  # ZERO STAGES
    check(trace_error(k2), "# ZERO STAGES", "lk.sm90.consumer_state", "stages = 0")
