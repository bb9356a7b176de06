"""Every lk.sm90.wgmma mistake is a specific error naming the rule, with the user's source line:
operand types and layouts, the in-place accumulator protocol (linear use, reads before the
covering wait, fences after copies, loops), and the fence/wait arguments."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout

from . import source_lines
from .wgmma_kernels import k_major_tile

THIS_FILE = __file__
P = lk.Pointer


def line_of(text: str) -> int:
    return source_lines.line_of(THIS_FILE, text)


def tiles(n=64):
    return lk.shared_tensor(k_major_tile(64), lk.bf16), lk.shared_tensor(k_major_tile(n), lk.bf16)


def out(c):
    return lk.global_tensor(c, Layout((64, 64), (64, 1))).partition(
        lk.sm90.wgmma_accumulator_layout(64))


def fails(kernel, error, marker, *messages):
    with pytest.raises(error) as info:
        kernel.ptx(P[lk.f32])
    text = str(info.value)
    for message in messages:
        assert message in text, text
    assert info.value.location is not None and info.value.location.line == line_of(marker), text
    assert f"test_wgmma_errors.py:{line_of(marker)}" in text
    return text


# ---- operands -----------------------------------------------------------------------------------
@lk.kernel(num_warps=4)
def acc_wrong_layout(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    acc = lk.full(lk.TVLayout((64, 64), lk.tv_layout(Layout(128), Layout(32)).layout), 0.0)
    lk.sm90.wgmma(acc, sA, sB)  # ACC LAYOUT


@lk.kernel(num_warps=4)
def acc_wrong_type(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma(lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0, lk.bf16), sA, sB)  # ACC TYPE


@lk.kernel(num_warps=4)
def register_a_f32(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    p = lk.full(lk.sm90.wgmma_a_layout(64), 1.0)
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), p, sB, accumulate=False)  # A F32


@lk.kernel(num_warps=4)
def register_a_wrong_layout(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    p = lk.full(lk.TVLayout((64, 64), lk.tv_layout(Layout(128), Layout(32)).layout), 1.0, lk.bf16)
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), p, sB, accumulate=False)  # A LAYOUT


@lk.kernel(num_warps=4)
def b_wrong_shape(c: lk.Pointer[lk.f32]):
    sA, sB = tiles(64)
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(128), sA, sB, accumulate=False)  # B SHAPE


@lk.kernel(num_warps=4)
def b_padded(c: lk.Pointer[lk.f32]):
    sA = lk.shared_tensor(k_major_tile(64), lk.bf16)
    sB = lk.shared_tensor(Layout((64, 64), (72, 1)), lk.bf16)
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)  # B PADDED


@lk.kernel(num_warps=4)
def mixed_types(c: lk.Pointer[lk.f32]):
    sA = lk.shared_tensor(k_major_tile(64), lk.bf16)
    sB = lk.shared_tensor(k_major_tile(64), lk.f16)
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)  # MIXED


@lk.kernel(num_warps=4)
def bad_accumulate(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=1.5)  # ACCUMULATE


@lk.kernel(num_warps=2)
def half_a_warpgroup(c: lk.Pointer[lk.f32]):
    lk.sm90.wgmma_fence()  # TWO WARPS


@lk.kernel(num_warps=4)
def wait_too_many(c: lk.Pointer[lk.f32]):
    lk.sm90.wgmma_wait(8)  # WAIT 8


@lk.kernel(num_warps=4)
def transpose_partition(c: lk.Pointer[lk.f32]):
    sA, _ = tiles()
    sA.partition(lk.sm90.wgmma_accumulator_layout(64)).T  # TRANSPOSE


OPERAND_CASES = [
    (acc_wrong_layout, lk.LayoutMismatchError, "# ACC LAYOUT",
     ["acc must have the wgmma register layout", "expected: ((4,8,4),(2,2,8))"]),
    (acc_wrong_type, lk.TraceError, "# ACC TYPE", ["acc is an f32 register tensor"]),
    (register_a_f32, lk.TraceError, "# A F32", ["register A operand is bf16 or f16", "got f32"]),
    (register_a_wrong_layout, lk.LayoutMismatchError, "# A LAYOUT",
     ["the register A operand must have the wgmma register layout"]),
    (b_wrong_shape, lk.TraceError, "# B SHAPE", ["must be a (128, 64) tile (N x K), got (64, 64)"]),
    (b_padded, lk.SharedMemoryError, "# B PADDED",
     ["not a canonical wgmma layout", "element (r=1, k=0) is 72 elements"]),
    (mixed_types, lk.TraceError, "# MIXED", ["A is bf16, B is f16"]),
    (bad_accumulate, lk.TraceError, "# ACCUMULATE", ["accumulate is True, False, a bool scalar"]),
    (half_a_warpgroup, lk.TraceError, "# TWO WARPS", ["num_warps=2, not a multiple of 4"]),
    (wait_too_many, lk.TraceError, "# WAIT 8", ["pending is a Python int in 0..7", "got 8"]),
    (transpose_partition, lk.TraceError, "# TRANSPOSE", ["transpose a whole tile, not a thread's "
                                                         "partition"]),
]


@pytest.mark.parametrize("kernel, error, marker, messages", OPERAND_CASES,
                         ids=[case[2].strip("# ").lower() for case in OPERAND_CASES])
def test_operand_errors(kernel, error, marker, messages):
    fails(kernel, error, marker, *messages)


# ---- the accumulator protocol -------------------------------------------------------------------
@lk.kernel(num_warps=4)
def read_consumed(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    acc = lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0)
    lk.sm90.wgmma_fence()
    new = lk.sm90.wgmma(acc, sA, sB)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    lk.store(out(c), new + acc)  # READ CONSUMED


@lk.kernel(num_warps=4)
def read_before_wait(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma_fence()
    acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.store(out(c), acc)  # READ EARLY
    lk.sm90.wgmma_wait(0)


@lk.kernel(num_warps=4)
def read_uncommitted(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma_fence()
    acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)
    lk.sm90.wgmma_wait(0)
    lk.store(out(c), acc)  # READ UNCOMMITTED


@lk.kernel(num_warps=4)
def read_after_partial_wait(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma_fence()
    first = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)
    lk.sm90.wgmma_commit()
    second = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(1)
    lk.store(out(c), first)
    lk.store(out(c), second)  # READ SECOND


@lk.kernel(num_warps=4)
def fence_outside_loop(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma_fence()
    loop = lk.range(0, 4, carry=(lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0),))
    for i, (acc,) in loop:
        acc = lk.sm90.wgmma(acc, sA, sB)  # NO FENCE
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        loop.next(acc)


@lk.kernel(num_warps=4)
def accumulate_undefined(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma_fence()
    lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB)  # UNDEFINED


@lk.kernel(num_warps=4)
def consumed_in_loop(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    acc = lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0)
    for i in lk.range(0, 4):
        lk.sm90.wgmma_fence()
        lk.sm90.wgmma(acc, sA, sB)  # CONSUMED IN LOOP
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)


@lk.kernel(num_warps=4)
def swap_in_flight(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    layout = lk.sm90.wgmma_accumulator_layout(64)
    loop = lk.range(0, 4, carry=(lk.full(layout, 0.0), lk.full(layout, 1.0)))
    for i, (x, y) in loop:  # SWAP (the loop's copies run at the end of its body)
        lk.sm90.wgmma_fence()
        x = lk.sm90.wgmma(x, sA, sB)
        y = lk.sm90.wgmma(y, sA, sB)
        lk.sm90.wgmma_commit()
        loop.next(y, x)
    lk.sm90.wgmma_wait(0)


@lk.kernel(num_warps=4)
def register_a_in_flight(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    lk.sm90.wgmma_fence()
    s = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    p = lk.cast(s, lk.bf16)
    lk.sm90.wgmma_fence()
    o = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), p, sB, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.store(out(c), lk.cast(p, lk.f32))  # P IN FLIGHT
    lk.sm90.wgmma_wait(0)


@lk.kernel(num_warps=4)
def rs_reissued_in_flight(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    loop = lk.range(0, 4, carry=(lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0),))
    for i, (acc,) in loop:
        p = lk.cast(lk.full(lk.sm90.wgmma_a_layout(64), 0.0) + lk.cast(i, lk.f32), lk.bf16)
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(acc, p, sB)  # REISSUED
        lk.sm90.wgmma_commit()
        loop.next(acc)
    lk.sm90.wgmma_wait(0)


PROTOCOL_CASES = [
    (read_consumed, "# READ CONSUMED",
     [f"consumed as the accumulator of the wgmma at line {line_of('new = lk.sm90.wgmma(acc')}",
      "read the wgmma's result instead"]),
    (read_before_wait, "# READ EARLY",
     ["the accumulator result of the wgmma at line", "while that wgmma may still run"]),
    (read_uncommitted, "# READ UNCOMMITTED", ["lk.sm90.wgmma_commit()"]),
    (read_after_partial_wait, "# READ SECOND", ["accumulator result"]),
    (fence_outside_loop, "# NO FENCE",
     ["written by a copy at line", "inside the loop body for a carried accumulator"]),
    (accumulate_undefined, "# UNDEFINED", ["accumulates into", "undefined values",
                                           "accumulate=False"]),
    (consumed_in_loop, "# CONSUMED IN LOOP",
     ["defined outside the lk.range at line", "carry the accumulator through the loop"]),
    (swap_in_flight, "# SWAP",
     ["loop.next (a copy into the loop's registers at the end of its body) reads"]),
    (register_a_in_flight, "# P IN FLIGHT", ["the register A operand of the wgmma at line"]),
    (rs_reissued_in_flight, "# REISSUED",
     ["writes its register A operand again while its previous execution may still run"]),
]


@pytest.mark.parametrize("kernel, marker, messages", PROTOCOL_CASES,
                         ids=[case[1].strip("# ").lower() for case in PROTOCOL_CASES])
def test_protocol_errors(kernel, marker, messages):
    fails(kernel, lk.sm90.AccumulatorUseError, marker, *messages)


@lk.kernel(num_warps=4)
def register_a_reread_in_flight(c: lk.Pointer[lk.f32]):
    sA, sB = tiles()
    p = lk.full(lk.sm90.wgmma_a_layout(64), 1.0, lk.bf16)
    loop = lk.range(0, 4, carry=(lk.full(lk.sm90.wgmma_accumulator_layout(64), 0.0),))
    for i, (acc,) in loop:
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(acc, p, sB)  # REREAD
        lk.sm90.wgmma_commit()
        loop.next(acc)
    lk.sm90.wgmma_wait(0)


def test_the_next_iteration_may_not_reuse_a_register_operand_still_in_flight():
    fails(register_a_reread_in_flight, lk.sm90.AccumulatorUseError, "# REREAD",
          "reads %", "the register A operand of the wgmma at line "
          f"{line_of('# REREAD')}, while that wgmma may still run")


@lk.kernel(num_warps=4)
def pipelined(c: lk.Pointer[lk.f32]):
    """One group stays in flight across iterations (wait(1)); the accumulator is read after
    the final wait(0): legal."""
    sA, sB = tiles()
    loop = lk.range(0, 4, carry=(lk.sm90.wgmma_accumulator(64),))
    for i, (acc,) in loop:
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(acc, sA, sB, accumulate=i > 0)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(1)
        loop.next(acc)
    (acc,) = loop.results
    lk.sm90.wgmma_wait(0)
    lk.store(out(c), acc)


def test_a_group_in_flight_across_iterations_is_legal_and_retired_by_the_waits():
    from layoutkit.dsl.sm90.wgmma.accumulators import retiring_waits
    with lk.protocol_check_skipped():       # its tiles are never written: the waits only
        fn = pipelined.ir(P[lk.f32])
        ptx = pipelined.ptx(P[lk.f32])
    ((mma, waits),) = retiring_waits(fn)
    assert [w.attrs["pending"] for w in waits] == [1, 0]
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
