"""The interpreter's scalar numerics against exact arithmetic (fractions) and numpy."""
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutkit.dsl.interpreter import numerics as N
from layoutkit.dsl.interpreter.index_eval import compile_index
from layoutkit.dsl.core.types import bf16, f16, f32, i32, i64, u32

finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


def nearest_even(exact: Fraction, candidates) -> float:
    """The candidate nearest to `exact` (ties: the one with an even last bit)."""
    def key(c):
        bits = int(np.array([c], dtype=np.float32).view(np.uint32)[0])
        return (abs(Fraction(float(c)) - exact), bits & 1)
    return min(candidates, key=key)


@settings(max_examples=300, deadline=None)
@given(finite32, finite32, finite32)
def test_f32_fma_rounds_once(a, b, c):
    a, b, c = np.float32(a), np.float32(b), np.float32(c)
    got = N.fma(a, b, c, f32)
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    approx = np.float32(float(exact)) if abs(exact) < 3e38 else None
    if approx is None or not np.isfinite(approx):
        return
    cands = [np.nextafter(approx, np.float32(-np.inf)), approx,
             np.nextafter(approx, np.float32(np.inf))]
    assert got == nearest_even(exact, cands)


def test_fma_near_ties_differ_from_double_rounding():
    # a*b + c = 1 + 2^-24 + 2^-60: a tie for float32 after rounding to float64 only
    a, b = np.float32(1 + 2 ** -12), np.float32(1 + 2 ** -12)     # a*b = 1 + 2^-11 + 2^-24
    c = np.float32(-2 ** -11)
    assert N.fma(a, b, c, f32) == np.float32(1.0)                # tie to even
    assert N.fma(a, b, np.float32(-2 ** -11 + 2 ** -35), f32) == np.float32(1 + 2 ** -23)


@settings(max_examples=300, deadline=None)
@given(finite32)
def test_bf16_cast_is_round_to_nearest_even(x):
    got = float(N.cast(np.float32(x), f32, bf16))
    bits = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
    lo = bits & 0xFFFF0000
    hi = lo + 0x10000
    down = float(np.array([lo], dtype=np.uint32).view(np.float32)[0])
    up = float(np.array([hi & 0xFFFFFFFF], dtype=np.uint32).view(np.float32)[0])
    if not np.isfinite(up):
        return
    d1, d2 = abs(Fraction(float(x)) - Fraction(down)), abs(Fraction(float(x)) - Fraction(up))
    want = down if d1 < d2 or (d1 == d2 and (lo >> 16) % 2 == 0) else up
    assert got == want


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-7e4, max_value=7e4))
def test_f16_matches_numpy(x):
    assert N.to_dtype(x, f16) == np.float16(x)


@given(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(-2 ** 31, 2 ** 31 - 1).filter(bool))
def test_int_division_truncates_and_wraps(a, b):
    q = N.int_div(a, b, i32)
    want = int(np.trunc(Fraction(a, b)))
    assert q == N.wrap(want, i32)
    assert N.binary("mul", a, b, i32) == int((np.array([a], np.int32) * np.array([b], np.int32))[0])


def test_casts_saturate_and_compare_ordered():
    assert N.cast(np.float32(3e9), f32, i32) == 2 ** 31 - 1
    assert N.cast(np.float32(-2.5), f32, i32) == -2
    assert N.cast(np.float32(np.nan), f32, i32) == 0
    assert N.cast(np.float32(-1.0), f32, u32) == 0
    assert N.cast(-1, i32, u32) == 2 ** 32 - 1 and N.cast(2 ** 40 + 5, i64, i32) == 5
    assert N.cast(2 ** 24 + 1, i32, f32) == np.float32(2 ** 24)          # ties to even
    nan = np.float32(np.nan)
    assert not N.compare("ne", nan, nan, f32) and not N.compare("lt", nan, np.float32(1), f32)
    assert N.binary("max", nan, np.float32(2), f32) == 2


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 4095), st.integers(-3, 3))
def test_index_expressions_follow_the_lowering(t, c):
    import sympy
    s = sympy.Symbol("s", integer=True, nonnegative=True)
    expr = sympy.floor((s + 3) / 8) * (c or 1) + sympy.Mod(s, 6) * 1000 + 2 ** 30 * s
    got = compile_index(expr, (s,), 32)(t)
    exact = ((t + 3) // 8) * (c or 1) + (t % 6) * 1000 + 2 ** 30 * t
    assert got == N.wrap(exact, i32)
