"""facts.provably_nonnegative answers what it answered by sympy's is_nonnegative first (an
interval's low end a value takes decides False without sympy), and the interval of a constant
times a half-line is that half-line scaled."""
from __future__ import annotations

import sympy
from hypothesis import given, strategies as st

import layoutkit.algebra as la
from layoutkit.dsl.core import facts
from tests.algebra.strategies import settings_for

t = sympy.Symbol("t", integer=True, nonnegative=True)
u = sympy.Symbol("u", integer=True, positive=True)
s = sympy.Symbol("s", integer=True)
M = la.symbol("M", 16)
LEAVES = (t, u, s, M, sympy.Integer(-3), sympy.Integer(2), sympy.Rational(1, 2))


def _grow(children):
    pairs = st.tuples(children, children)
    return (pairs.map(lambda ab: ab[0] + ab[1]) | pairs.map(lambda ab: ab[0] * ab[1])
            | st.tuples(st.integers(-4, 4), children).map(lambda ca: ca[0] * ca[1])
            | children.map(lambda a: sympy.floor(a / 2)) | children.map(lambda a: sympy.Mod(a, 4))
            | pairs.map(lambda ab: sympy.Min(*ab)) | pairs.map(lambda ab: sympy.Max(*ab)))


def as_it_was(expr) -> bool:
    expr = sympy.sympify(expr)
    if expr.is_nonnegative:
        return True
    lo = facts.interval(expr, facts.sign_range)[0]
    return lo is not None and lo >= 0


@settings_for(300)
@given(st.recursive(st.sampled_from(LEAVES), _grow, max_leaves=6))
def test_provably_nonnegative_answers_as_it_did(expr):
    assert facts.provably_nonnegative(expr) == as_it_was(expr)


def test_attained_ends_worked_examples():
    assert facts._attains_its_ends(sympy.floor(t / 2 - sympy.Rational(1, 2)))   # -1 at t = 0
    assert not facts._attains_its_ends(t * t - 1)        # t occurs twice
    assert not facts._attains_its_ends(sympy.Mod(t, 4) - 1)
    assert facts.provably_nonnegative(1 - sympy.floor(-M / 128))
    assert not facts.provably_nonnegative(t - 1)


def test_a_constant_times_a_half_line():
    assert facts._times((-2, -2), (3, None)) == (None, -6)
    assert facts._times((None, 4), (3, 3)) == (None, 12)
    assert facts._times((-1, -1), (None, None)) == (None, None)
    assert facts.interval(-3 * t + 5, facts.sign_range) == (None, 5)
