"""The closed forms of symbolic.le / lt / eq / ceil_div for an extent against an int, and eq's
rule for a tile count ceiling(E/n) that takes the constant, answer exactly what the general
path (the sign of the difference with each extent written d*q) answers."""
from __future__ import annotations

import sympy
from hypothesis import given, strategies as st

import layoutkit.algebra as la
from layoutkit.algebra import symbolic
from tests.algebra.strategies import settings_for

divisors = st.sampled_from((1, 2, 3, 4, 6, 8, 16, 48, 64, 96, 128, 192, 256)) | \
    st.integers(1, 600)


@settings_for(150)
@given(divisors, st.integers(-8, 1100))
def test_an_extent_against_an_int_answers_as_the_general_path(d, c):
    E = la.symbol("E", d)
    for a, b in ((E, c), (c, E)):
        assert symbolic.le(a, b) is symbolic._le_by_bounds(a, b)
        assert symbolic.lt(a, b) is symbolic._lt_by_bounds(a, b)
        assert symbolic.eq(a, b) is symbolic._eq_by_bounds(a, b)


@settings_for(150)
@given(divisors, st.integers(1, 700))
def test_ceil_div_of_an_extent_is_the_general_paths_expression(d, n):
    E = la.symbol("E", d)
    assert sympy.srepr(symbolic.ceil_div(E, n)) == sympy.srepr(symbolic._ceil_div_general(E, n))


@settings_for(150)
@given(divisors, st.integers(2, 700), st.integers(-2, 80))
def test_a_tile_count_that_takes_the_constant_is_unknown_as_the_general_path_says(d, n, c):
    count = sympy.ceiling(la.symbol("E", d) / n)         # E/n itself where n divides d
    for a, b in ((count, c), (c, count)):
        assert symbolic.eq(a, b) is symbolic._eq_by_bounds(a, b)


def test_worked_examples():
    M, K = la.symbol("M", 128), la.symbol("K", 16)
    assert symbolic.le(1, M) is True and symbolic.le(M, 64) is False
    assert symbolic.le(M, 128) is None and symbolic.lt(128, M) is None
    assert symbolic.lt(127, M) is True and symbolic.lt(M, 128) is False
    assert symbolic.eq(M, 1) is False and symbolic.eq(1, K) is False
    assert symbolic.eq(K, 16) is None and symbolic.eq(K, 32) is None
    assert str(symbolic.ceil_div(M, 64)) == "M/64" and str(symbolic.ceil_div(K, 64)) == \
        "ceiling(K/64)"
    # K = 16, 32, 48, 64 give one 64-wide tile, K = 80 two: neither True nor False is sound
    assert symbolic._ceiling_takes(sympy.ceiling(K / 64), 1)
    assert symbolic.eq(sympy.ceiling(K / 64), 1) is None
    # ceiling(M/96) >= 2 for every M = 128 q: the rule does not apply, the general path decides
    assert not symbolic._ceiling_takes(sympy.ceiling(M / 96), 1)
    assert symbolic.eq(sympy.ceiling(M / 96), 1) is symbolic._eq_by_bounds(
        sympy.ceiling(M / 96), 1)
