"""The trace's shortcuts past sympy's evaluation build exactly what sympy's evaluation returns:
symbolic.mod of a counter (or floor(counter / d)) plus a constant, ceil_div of an extent
(ceiling(E/b) unevaluated) and expand of an expression already multiplied out (as given)."""
from __future__ import annotations

import sympy
from hypothesis import given, strategies as st

import layoutkit.algebra as la
from layoutkit.algebra import symbolic
from tests.algebra.strategies import settings_for

t = sympy.Symbol("t", integer=True, nonnegative=True)
p = sympy.Symbol("p", integer=True, positive=True)
M, N = la.symbol("M", 16), la.symbol("N", 3)
even = sympy.Symbol("e", integer=True, nonnegative=True, even=True)
signed = sympy.Symbol("s", integer=True)
real = sympy.Symbol("r", real=True, nonnegative=True)


def same(a, b) -> bool:
    """Equal, of one type, with equal arguments (what the lowering and the memos see)."""
    return a == b and type(a) is type(b) and getattr(a, "args", ()) == getattr(b, "args", ())


counters = st.sampled_from((t, p, M, N, even, signed, real))


def _floors(inner):
    """floor((+-x + b) / d) of a term x, and -x"""
    return st.tuples(inner, st.sampled_from((1, -1)), st.integers(-20, 20), st.integers(1, 200)).map(
        lambda xsbd: sympy.floor((xsbd[1] * xsbd[0] + xsbd[2]) / xsbd[3])) | inner.map(lambda x: -x)


terms = st.recursive(counters, _floors, max_leaves=3) | \
    st.sampled_from((3 * t, 4 * t, t * M, sympy.Max(1, t), sympy.Mod(t, 8), sympy.floor(t / 8) * 2))
u = sympy.Symbol("u", integer=True, nonnegative=True)
products = st.lists(st.recursive(st.sampled_from((t, p, M, N, u, signed)), _floors, max_leaves=2),
                    min_size=1, max_size=2).map(lambda fs: sympy.Mul(*fs))
sums = st.lists(st.tuples(st.sampled_from((1, -1, 2, 3, -4, 5, 8)), products), min_size=1,
                max_size=3).map(lambda kts: sum(k * x for k, x in kts))


@settings_for(80)
@given(sums, st.integers(-300, 300), st.sampled_from((2, 3, 4, 6, 8, 128)))
def test_mod_of_a_sum_of_counter_products_is_sympys_mod(x, c, q):
    """ring counters such as k + K_TILES * (t // units): a fast path when the terms are
    independent, sympy's evaluation otherwise; the same expression either way"""
    assert same(symbolic.mod(x + c, q), sympy.Mod(x + c, q))


@settings_for(80)
@given(terms, st.integers(-300, 300), st.integers(-3, 300))
def test_mod_is_sympys_mod(x, c, q):
    if q == 0:
        return
    for p_ in (x, x + c):
        assert same(symbolic.mod(p_, q), sympy.Mod(p_, q))


def test_mod_worked_examples():
    """a ring counter's stage and phase (lk.sm90.consumer_state(k - 1, 2)), a lane's quad"""
    assert same(symbolic.mod(t - 1, 2), sympy.Mod(t + 1, 2, evaluate=False))
    assert same(symbolic.mod(sympy.floor((t - 1) / 2), 2),
                sympy.Mod(sympy.floor(t / 2 - sympy.Rational(1, 2)), 2, evaluate=False))
    assert same(symbolic.mod(t + 8, 4), sympy.Mod(t, 4, evaluate=False))
    tiles = -sympy.floor(-M / 128)                     # ceil(M / 128): the last block's stage
    assert same(symbolic.mod(tiles - 1, 2), sympy.Mod(1 - sympy.floor(-M / 128), 2, evaluate=False))
    assert same(symbolic.mod(tiles, 4), sympy.Mod(3 * sympy.floor(-M / 128), 4))   # sympy's form
    first = u + tiles * sympy.floor(t / 132)          # a GEMM's ring counter
    assert same(symbolic.mod(first + 7, 4), sympy.Mod(first + 3, 4, evaluate=False))
    assert same(symbolic.mod(2 * u + 4 * t + 2, 4), 2 * sympy.Mod(u + 1, 2))  # a common factor
    assert same(symbolic.mod(sympy.floor(t / 32), sympy.Integer(4)),
                sympy.Mod(sympy.floor(t / 32), 4, evaluate=False))


def test_mod_builds_only_a_plain_counter_unevaluated():
    assert symbolic._plain_counter(t) and symbolic._plain_counter(M)
    assert not symbolic._plain_counter(even)       # Mod(e, 2) is 0
    assert not symbolic._plain_counter(signed)     # no sign: Mod's bounds differ
    assert not symbolic._plain_counter(t + 1)
    assert symbolic._unbounded_term(sympy.floor(t / 8 + sympy.Rational(3, 8)))
    assert not symbolic._unbounded_term(sympy.floor(M / 8 + t / 8))     # two counters
    assert not symbolic._unbounded_term(sympy.floor(3 * t / 8))         # coefficient 3/8
    assert symbolic.mod(even, 2) == 0 and symbolic.mod(t, 1) == 0


@settings_for(60)
@given(st.sampled_from((1, 2, 3, 4, 6, 16, 48, 128)) | st.integers(1, 600), st.integers(1, 700))
def test_ceil_div_of_an_extent_is_sympys_ceiling(d, b):
    E = la.symbol("E", d)
    expected = E / b if d % b == 0 else sympy.ceiling(E / b)
    assert same(symbolic.ceil_div(E, b), expected)


LEAVES = (t, p, M, N, signed, sympy.Integer(3), sympy.Rational(1, 4), sympy.floor(t / 8),
          sympy.Mod(t, 4), sympy.ceiling(M / 64), sympy.Mod(t + 3, 8), t ** 2, sympy.Float(0.5),
          sympy.floor(t * (M + 1) / 4))


def _grow(children):
    pairs = st.tuples(children, children)
    return (pairs.map(lambda ab: ab[0] + ab[1]) | pairs.map(lambda ab: ab[0] * ab[1])
            | children.map(lambda a: sympy.floor(a / 4)) | children.map(lambda a: sympy.Mod(a, 8))
            | st.tuples(st.integers(-5, 5), children).map(lambda ca: ca[0] * ca[1]))


expressions = st.recursive(st.sampled_from(LEAVES), _grow, max_leaves=8)


@settings_for(80)
@given(expressions)
def test_expand_returns_what_sympy_expand_returns(x):
    assert symbolic.expand(x) == sympy.expand(x)
    if symbolic._multiplied_out(x):
        assert same(sympy.expand(x), x)


def test_expand_worked_examples():
    assert symbolic._multiplied_out(128 * M * t + 256 * sympy.Mod(t, 4) + 3)
    assert not symbolic._multiplied_out(64 * M * (2 * t + 1))     # a sum inside a product
    assert not symbolic._multiplied_out(t ** 2)                   # powers: power_base rules
    assert symbolic.expand(64 * M * (2 * t + 1)) == 128 * M * t + 64 * M
    assert symbolic.expand(7) == 7
