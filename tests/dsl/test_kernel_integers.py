"""Kernel-integer arithmetic computed inside the kernel: lk.minimum / lk.maximum of kernel
integers stay kernel integers whose ranges the bounds and ring-state checks know; floor, ceiling
and Mod lower to PTX with floor semantics for any sign of the numerator, and the interpreter
computes exactly what the lowering emits."""
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutkit.dsl as lk
from layoutkit.dsl.core.bounds import value_range
from layoutkit.dsl.core.tracer import current
from layoutkit.dsl.interpreter.index_eval import compile_index
from layoutkit.dsl.lower.index import IndexLowering, reciprocal_multiplier
from layoutkit.ptx.builder import Module

from .source_lines import line_of

PTR = lk.Pointer[lk.f32]


def test_minimum_and_maximum_of_python_ints_are_ints():
    assert lk.minimum(3, 5) == 3 and type(lk.minimum(3, 5)) is int
    assert lk.maximum(3, 5) == 5 and type(lk.maximum(3, 5)) is int


def test_minimum_and_maximum_of_kernel_integers_keep_their_ranges():
    seen = {}

    def k(x: PTR, n: lk.i32):
        trace = current()
        blocks = -(-n // 128)                      # ceiling division: a kernel integer
        clamped = lk.maximum(lk.minimum(blocks, n - 1000), 1)
        seen["type"] = type(clamped)
        seen["clamped"] = value_range(trace, clamped)
        seen["blocks"] = value_range(trace, blocks)
    lk.Kernel(k, 4).ptx(PTR, 256)                  # n = 256 specialises n >= 16, n % 16 == 0
    assert seen["type"] is sympy.Max
    top = -(-(2**31 - 16) // 128)                  # the largest i32 multiple of 16, in blocks
    assert seen["blocks"] == (1, top) and seen["clamped"] == (1, top)


def test_ring_state_of_a_loop_from_a_clamped_count_is_proven_non_negative():
    seen = []

    def k(x: PTR, n: lk.i32):
        n_masked = lk.maximum(lk.minimum(-(-n // 128), 3) - 1, 1)
        for i in lk.range(n_masked, n):
            seen.append(lk.sm90.consumer_state(i - 1, 2))      # i >= n_masked >= 1
    lk.Kernel(k, 4).ptx(PTR, 256)
    assert len(seen) == 1

    def bad(x: PTR, n: lk.i32):
        for i in lk.range(lk.minimum(n, 24) - 20, n):            # n >= 16: from -4
            lk.sm90.consumer_state(i, 2)  # MAYBE NEGATIVE
    with pytest.raises(lk.TraceError, match="not provably >= 0") as info:
        lk.Kernel(bad, 4).ptx(PTR, 256)
    assert info.value.location.line == line_of(__file__, "# MAYBE NEGATIVE")


def _lines(expr, symbol, ptype: str = "s32") -> list[str]:
    k = Module(line_info=False).kernel("k")
    IndexLowering(k, {symbol: k.reg(ptype)}).emit(expr, ptype)
    return [line.split()[0] for line in k.body_lines()]


def test_floor_and_mod_by_a_constant_round_toward_minus_infinity():
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    for expr, want in ((sympy.floor((t - 100) / 3), lambda v: (v - 100) // 3),
                       (sympy.Mod(t - 100, 3), lambda v: (v - 100) % 3),
                       (sympy.floor((t - 100) / 8), lambda v: (v - 100) // 8),
                       (sympy.Mod(t - 100, 8), lambda v: (v - 100) % 8),
                       (sympy.ceiling((t - 100) / 176), lambda v: -(-(v - 100) // 176))):
        f = compile_index(expr, (t,), 32)
        assert [f(v) for v in range(0, 300)] == [want(v) for v in range(0, 300)], expr
    # a numerator that may be negative: div and rem, then the sign fix-up (shift by 31, add)
    assert _lines(sympy.floor((t - 100) / 3), t) == \
        ["add.s32", "div.s32", "rem.s32", "shr.s32", "add.s32"]
    # t >= 0: a multiply-high and a shift (ptxas would expand div.s32 by 3 into ~20 SASS)
    assert _lines(sympy.floor(t / 3), t) == ["mul.hi.u32", "shr.u32"]
    assert _lines(sympy.floor((t - 100) / 8), t) == ["add.s32", "shr.s32"]   # shr is a floor
    assert _lines(sympy.ceiling(t / 176), t) == ["add.s32", "mul.hi.u32", "shr.u32"]
    # the floor and the Mod of one numerator share the quotient
    k = Module(line_info=False).kernel("k")
    ix = IndexLowering(k, {t: k.reg("s32")})
    ix.emit(sympy.floor(t / 66), "s32"), ix.emit(sympy.Mod(t, 66), "s32")
    assert [line.split()[0] for line in k.body_lines()] == ["mul.hi.u32", "shr.u32",
                                                            "mad.lo.s32"]


def _run_lines(lines: list[str], x: int, bits: int) -> int:
    """The integer result of emitted `mul.hi.uN` / `shr.uN` / `mad.lo.sN` lines on input x
    (register %s0 / %sd0), as the hardware computes them."""
    mask = (1 << bits) - 1
    regs = {}
    for line in lines:
        op, rest = line.split(None, 1)
        d, *srcs = [s.strip() for s in rest.rstrip(";").split(",")]
        val = [regs.get(s, x) if s.startswith("%") else int(s, 0) for s in srcs]
        val = [v & mask for v in val]
        if op.startswith("mul.hi.u"):
            regs[d] = (val[0] * val[1]) >> bits
        elif op.startswith("shr.u"):
            regs[d] = val[0] >> val[1]
        elif op.startswith("mad.lo.s"):
            regs[d] = (val[0] * val[1] + val[2]) & mask
        else:
            raise AssertionError(f"unexpected line {line}")
    result = regs[d]
    return result - (1 << bits) if result >> (bits - 1) else result


@settings(max_examples=300, deadline=None)
@given(st.integers(3, 2**31 - 1).filter(lambda d: d & (d - 1)), st.integers(0, 2**31 - 1))
def test_constant_floor_and_mod_of_a_non_negative_numerator_are_exact(d, x):
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    for expr, want in ((sympy.floor(t / d), x // d), (sympy.Mod(t, d), x % d)):
        k = Module(line_info=False).kernel("k")
        IndexLowering(k, {t: k.reg("s32")}).emit(expr, "s32")
        assert _run_lines(k.body_lines(), x, 32) == want, (expr, x)


def test_a_64_bit_index_divided_by_a_constant_keeps_div_and_rem():
    # a 64-bit multiply-high is a chain of 32-bit multiplies with live temporaries (spills)
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    assert _lines(sympy.floor(t / 3), t, "s64") == ["div.s64"]
    assert _lines(sympy.Mod(t, 3), t, "s64") == ["rem.s64"]


def test_reciprocal_multiplier_refuses_what_it_cannot_divide():
    for d in (0, 1, 64):
        with pytest.raises(ValueError, match=f"d = {d} is not a non-power-of-two"):
            reciprocal_multiplier(d, 31)
    with pytest.raises(ValueError, match="more bits than the dividend"):
        reciprocal_multiplier(2**40 + 1, 31)


def test_min_and_max_lower_to_min_and_max():
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    assert _lines(sympy.Max(sympy.Min(t, 7), 1), t) == ["min.s32", "max.s32"]
    f = compile_index(sympy.Max(sympy.Min(t - 3, 7), 1), (t,), 32)
    assert [f(v) for v in (0, 5, 20)] == [1, 2, 7]
