"""Kernel-integer arithmetic computed inside the kernel: lk.minimum / lk.maximum of kernel
integers stay kernel integers whose ranges the bounds and ring-state checks know; floor, ceiling
and Mod lower to PTX with floor semantics for any sign of the numerator, and the interpreter
computes exactly what the lowering emits."""
import pytest
import sympy

import layoutkit.dsl as lk
from layoutkit.dsl.core.bounds import value_range
from layoutkit.dsl.core.tracer import current
from layoutkit.dsl.interpreter.index_eval import compile_index
from layoutkit.dsl.lower.index import IndexLowering
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


def _lines(expr, symbol) -> list[str]:
    k = Module(line_info=False).kernel("k")
    IndexLowering(k, {symbol: k.reg("s32")}).emit(expr, "s32")
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
    assert _lines(sympy.floor(t / 3), t) == ["div.s32"]             # t >= 0: div alone
    assert _lines(sympy.floor((t - 100) / 8), t) == ["add.s32", "shr.s32"]   # shr is a floor
    assert _lines(sympy.ceiling(t / 176), t) == ["add.s32", "div.s32"]


def test_min_and_max_lower_to_min_and_max():
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    assert _lines(sympy.Max(sympy.Min(t, 7), 1), t) == ["min.s32", "max.s32"]
    f = compile_index(sympy.Max(sympy.Min(t - 3, 7), 1), (t,), 32)
    assert [f(v) for v in (0, 5, 20)] == [1, 2, 7]
