"""Broken wgmma discipline: fences after register writes (the accumulator check on the IR,
`lk.sm90.AccumulatorUseError`), a first wgmma with no fence, a wgmma never committed or never
waited before its threads exit, and a wgmma op run by part of a warpgroup (the static
protocol check, `lk.ProtocolError`); warnings where it cannot be decided. Exact texts."""
import warnings

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import DivergenceError, run_ir

from ..dsl.source_lines import line_of
from ..dsl.wgmma_kernels import accumulator_out as out
from ..dsl.wgmma_kernels import ones_operand as tile
from .harness import COLLECTIVE, F32, IN_FLIGHT, check, diagnose


def L(marker: str) -> int:
    return line_of(__file__, marker)


def first_product(s):
    lk.sm90.wgmma_fence()                                                  # FIRST FENCE
    acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    return acc


# ---- fences after register writes (the IR) ----------------------------------------------------
def test_accumulator_rescaled_after_the_fence():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        acc = first_product(s)
        lk.sm90.wgmma_fence()
        acc = acc * 0.5                                               # RESCALE
        acc = lk.sm90.wgmma(acc, s, s)                                     # SECOND
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        lk.store(out(c), acc)
    err = diagnose(k, F32, error=lk.sm90.AccumulatorUseError)
    value = err.message.split()[4].rstrip(",")
    check(err, __file__, "# SECOND",
          f"the wgmma accumulates into {value}, which the op (binary) at line {L('# RESCALE')} "
          f"wrote after the last lk.sm90.wgmma_fence() (line {L('# RESCALE') - 1}): the tensor "
          "cores see registers other instructions wrote only after a wgmma.fence (PTX ISA "
          "'wgmma.fence'); call lk.sm90.wgmma_fence() after that write and before the wgmma")


def test_accumulator_read_then_overwritten_in_place_without_a_fence():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        loop = lk.range(0, 4, carry=(lk.sm90.wgmma_accumulator(64),))
        for i, (acc,) in loop:
            lk.sm90.wgmma_fence()                                          # LOOP FENCE
            acc = lk.sm90.wgmma(acc, s, s, accumulate=i > 0)
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(0)
            lk.store(out(c), acc)                                     # READ
            acc = lk.sm90.wgmma(acc, s, s)                                 # IN PLACE
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(0)
            loop.next(acc)
    err = diagnose(k, F32, error=lk.sm90.AccumulatorUseError)
    value = err.message.split()[9].rstrip(",")
    check(err, __file__, "# IN PLACE",
          f"the wgmma writes its accumulator into the registers of {value}, which the op "
          f"(store) at line {L('# READ')} read after the last lk.sm90.wgmma_fence() (line "
          f"{L('# LOOP FENCE')}): wgmma.fence orders other instructions' accesses to a "
          "wgmma's registers before it (PTX ISA 'wgmma.fence'); call lk.sm90.wgmma_fence() after "
          "that read and before the wgmma")


def test_register_a_operand_converted_after_the_fence():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        scores = first_product(s)
        lk.sm90.wgmma_fence()                                              # EARLY FENCE
        p = lk.cast(scores, lk.bf16)                                  # CONVERT
        o = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), p, s, accumulate=False)  # RS
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        lk.store(out(c), o)
    err = diagnose(k, F32, error=lk.sm90.AccumulatorUseError)
    value = err.message.split()[7].rstrip(",")
    check(err, __file__, "# RS",
          f"the wgmma reads its register A operand {value}, which the op (cast) at line "
          f"{L('# CONVERT')} wrote after the last lk.sm90.wgmma_fence() (line "
          f"{L('# EARLY FENCE')}): the tensor cores see registers other instructions wrote only "
          "after a wgmma.fence (PTX ISA 'wgmma.fence'); call lk.sm90.wgmma_fence() after that "
          "write and before the wgmma")


def test_a_fence_only_inside_a_branch_is_a_warning():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        acc = first_product(s)
        acc = acc * 0.5                                               # SCALE
        with lk.if_(lk.eq(lk.block_id(0), 0)):                        # SOME CTAS
            lk.sm90.wgmma_fence()                                          # BRANCH FENCE
        acc = lk.sm90.wgmma(acc, s, s)                                     # AFTER BRANCH
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        lk.store(out(c), acc)
    with pytest.warns(lk.ProtocolWarning) as record:
        lk.Kernel(k, 4).ptx(F32)
    (warning,) = [w for w in record if "wgmma fence check" in str(w.message)]
    text = str(warning.message)
    value = text.split("accumulates into ")[1].split(",")[0]
    assert text == (
        "kernel k: the wgmma fence check could not decide: could not prove that an "
        f"lk.sm90.wgmma_fence() runs between the op (binary) at line {L('# SCALE')} and the wgmma "
        f"at line {L('# AFTER BRANCH')}: the only fence after that op, at line "
        f"{L('# BRANCH FENCE')}, is inside the lk.if_ at line {L('# SOME CTAS')}, which not every "
        f"thread may run. Unproven: the wgmma accumulates into {value}, which the op (binary) at "
        f"line {L('# SCALE')} wrote after the last lk.sm90.wgmma_fence() (line "
        f"{L('# FIRST FENCE')}): the tensor cores see registers other instructions wrote only "
        "after a wgmma.fence (PTX ISA 'wgmma.fence'); call lk.sm90.wgmma_fence() after that write "
        "and before the wgmma")
    assert (warning.filename, warning.lineno) == (__file__, L("# AFTER BRANCH"))


def test_first_wgmma_of_a_role_without_a_fence():
    def k(c: lk.Pointer[lk.f32]):
        s = tile(8)
        with lk.sm90.warp_role("fenced", warpgroups=0):
            lk.store(out(c), first_product(s))
        with lk.sm90.warp_role("unfenced", warpgroups=1):
            acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)  # UNFENCED
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(0)
            lk.store(out(c), acc)
    check(diagnose(k, F32, error=lk.ProtocolError, num_warps=8), __file__, "# UNFENCED",
          "kernel k: the static protocol check found 1 error:\n  - wgmma fence: role 'unfenced' "
          f"(threads 128-255) issues the wgmma at line {L('# UNFENCED')} with no "
          "lk.sm90.wgmma_fence() before it: PTX requires wgmma.fence before a warpgroup's first "
          "wgmma (registers other instructions wrote are not yet visible to the tensor cores; PTX "
          "ISA 'wgmma.fence'); call lk.sm90.wgmma_fence() before it")


# ---- commit / wait before the threads exit ---------------------------------------------------
def test_wgmma_never_committed():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        lk.sm90.wgmma_fence()
        lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # NEVER COMMITTED
    check(diagnose(k, F32, error=lk.ProtocolError), __file__, "# NEVER COMMITTED",
          "kernel k: the static protocol check found 1 error:\n  - wgmma commit: threads 0-127 "
          f"reaches the end of the kernel with the wgmma at line {L('# NEVER COMMITTED')} never "
          "committed: no lk.sm90.wgmma_commit() follows it, and lk.sm90.wgmma_wait retires "
          f"committed groups only, {IN_FLIGHT}; lk.sm90.wgmma_commit() and lk.sm90.wgmma_wait(0) "
          "after it")


def test_wgmma_committed_but_never_waited():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        lk.sm90.wgmma_fence()
        lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # NEVER WAITED
        lk.sm90.wgmma_commit()                                             # COMMIT ONLY
    check(diagnose(k, F32, error=lk.ProtocolError), __file__, "# NEVER WAITED",
          "kernel k: the static protocol check found 1 error:\n "
          " - wgmma wait: threads 0-127 reaches the end of the kernel with the wgmma at line "
          f"{L('# NEVER WAITED')} still in flight: it was committed at line "
          f"{L('# COMMIT ONLY')}, but no lk.sm90.wgmma_wait follows that commit, {IN_FLIGHT}; "
          "lk.sm90.wgmma_wait(0) before the end")


def test_pipelined_wait_leaves_the_last_k_step_in_flight_at_the_end_of_the_role():
    def k(c: lk.Pointer[lk.f32], n: lk.i32):
        s = tile(8)
        with lk.sm90.warp_role("idle", warpgroups=0):
            pass
        with lk.sm90.warp_role("consumer", warpgroups=1):
            loop = lk.range(0, n, carry=(lk.sm90.wgmma_accumulator(64),))
            for i, (acc,) in loop:                                    # K LOOP
                lk.sm90.wgmma_fence()
                acc = lk.sm90.wgmma(acc, s, s, accumulate=i > 0)           # K STEP
                lk.sm90.wgmma_commit()                                     # K COMMIT
                lk.sm90.wgmma_wait(1)                                      # KEEP ONE
                loop.next(acc)
    it = f"(iteration 2 of the lk.range at line {L('# K LOOP')})"
    check(diagnose(k, F32, 8, error=lk.ProtocolError, num_warps=8), __file__, "# K STEP",
          "kernel k: the static protocol check found 1 error (runtime loops checked with n=3):\n  "
          "- wgmma wait: role 'consumer' (threads 128-255) reaches the end of the kernel with the "
          f"wgmma at line {L('# K STEP')} {it} still in flight: it was committed at line "
          f"{L('# K COMMIT')} {it}, but the last lk.sm90.wgmma_wait after it, at line "
          f"{L('# KEEP ONE')} {it}, leaves 1 group(s) in flight, {IN_FLIGHT}; "
          "lk.sm90.wgmma_wait(0) before the end")


# ---- whole-warpgroup issue -------------------------------------------------------------------
def half_warpgroup(c: lk.Pointer[lk.f32]):
    s = tile()
    with lk.if_(lk.thread_id() < 64):                                 # HALF
        lk.sm90.wgmma_fence()                                              # HALF FENCE
        acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # HALF WGMMA
        lk.sm90.wgmma_commit()                                             # HALF COMMIT
        lk.sm90.wgmma_wait(0)                                              # HALF WAIT
        lk.store(out(c), acc)


def test_wgmma_issued_by_half_a_warpgroup():
    def part(what, marker):
        return (f"\n  - warpgroup: {what} at line {L(marker)} runs on part of a warpgroup: "
                "warpgroup 0 (threads 0-127) has 64 of its 128 threads executing it (threads "
                f"0-63). {COLLECTIVE}")
    check(diagnose(half_warpgroup, F32, error=lk.ProtocolError), __file__, "# HALF FENCE",
          "kernel half_warpgroup: the static protocol check found 4 errors:"
          + part("lk.sm90.wgmma_fence()", "# HALF FENCE") + part("lk.sm90.wgmma", "# HALF WGMMA")
          + part("lk.sm90.wgmma_commit()", "# HALF COMMIT")
          + part("lk.sm90.wgmma_wait()", "# HALF WAIT"))


def test_the_interpreter_stops_at_the_first_wgmma_op_half_its_warpgroup_ran():
    """Threads 64-127 exit without the fence threads 0-63 ran: decided then, before the wait
    of threads 0-63 could deadlock (tests/dsl/interpreter/test_wgmma_discipline.py has more)."""
    with lk.protocol_check_skipped():
        fn = lk.Kernel(half_warpgroup, 4).ir(F32)
    for seed in range(3):
        with pytest.raises(DivergenceError) as info:
            run_ir(fn, 1, [np.zeros(64 * 64, np.float32)], seed=seed)
        assert info.value.location.line == L("# HALF FENCE")
        assert info.value.message == (
            f"CTA (0, 0, 0): lk.sm90.wgmma_fence() at line {L('# HALF FENCE')} runs on part of a "
            "warpgroup: warpgroup 0 (threads 0-127) has 64 of its 128 threads executing it "
            f"(threads 0-63). {COLLECTIVE}")


def test_fence_in_one_lane_of_each_warp():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        with lk.sm90.elect_one():
            lk.sm90.wgmma_fence()                                          # ELECTED FENCE
        acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        lk.store(out(c), acc)
    err = diagnose(k, F32, error=lk.ProtocolError)
    assert err.findings[0].kind == "warpgroup"
    check(err, __file__, "# ELECTED FENCE",
          "kernel k: the static protocol check found 2 errors:\n "
          f" - warpgroup: lk.sm90.wgmma_fence() at line {L('# ELECTED FENCE')} runs on part of a "
          "warpgroup: warpgroup 0 (threads 0-127) has 4 of its 128 threads executing it "
          f"(threads 0, 32, 64, 96). {COLLECTIVE}\n "
          f" - wgmma fence: 124 threads 1, 2, ..., 127 issues the wgmma at line "
          f"{L('# ELECTED FENCE') + 1} with no lk.sm90.wgmma_fence() before it: PTX requires "
          "wgmma.fence before a warpgroup's first wgmma (registers other instructions wrote "
          "are not yet visible to the tensor cores; PTX ISA 'wgmma.fence'); call "
          "lk.sm90.wgmma_fence() before it")


def test_wgmma_under_a_branch_on_loaded_data_is_a_warning():
    def k(c: lk.Pointer[lk.f32]):
        s = tile()
        flag = lk.load(lk.global_tensor(c, Layout(128)).partition(
            lk.tv_layout(Layout(128), Layout(1))))
        lk.sm90.wgmma_fence()
        with lk.if_(lk.Scalar((flag > 0).values[0])):                 # LOADED
            acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), s, s, accumulate=False)   # MAYBE
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        lk.Kernel(k, 4).ptx(F32)
    texts = [(str(w.message), w.lineno) for w in record
             if isinstance(w.message, lk.ProtocolWarning)]
    assert texts == [
        ("kernel k: the static protocol check could not decide: the condition of this lk.if_ "
         "depends on values loaded from memory; the check assumed every thread takes it",
         L("# LOADED")),
        ("kernel k: the static protocol check could not decide: whether all 128 threads of each "
         f"warpgroup execute the wgmma ops inside the lk.if_ at line {L('# LOADED')} (here "
         "lk.sm90.wgmma) together could not be proven: its condition depends on values loaded "
         "from memory (wgmma ops are warpgroup-collective, PTX .sync.aligned)",
         L("# MAYBE"))]
