"""symbolic.divides' term-by-term fast path and the memo of the provers answer exactly what the
sympy.cancel proof answers (the fast path only ever says True, and only where cancel does)."""
from __future__ import annotations

import sympy
from hypothesis import given, strategies as st

import layoutkit.algebra as la
from layoutkit.algebra import symbolic
from tests.algebra.strategies import settings_for

M, N = la.symbol("M", 16), la.symbol("N", 6)
t = sympy.Symbol("t", integer=True, nonnegative=True)
x = sympy.Symbol("x")                                  # no assumptions: not an integer
ATOMS = (1, M, N, t, x, M * N, t ** 2, M ** 2, sympy.Mod(t + M, 4), sympy.floor(t / 3),
         sympy.floor(M / 64), t / 2)


def cancel_proof(d, n):
    """divides as it was: sympy.cancel of n / d with extents written as multiples."""
    if d == 0:
        return True if n == 0 else None
    q = sympy.cancel(symbolic._hidden(sympy.sympify(n) / d))
    return True if q.is_integer else False if q.is_Rational else None


expressions = st.lists(st.tuples(st.integers(-64, 64), st.sampled_from(ATOMS)),
                       min_size=1, max_size=4).map(lambda terms: sum(c * a for c, a in terms))


@settings_for(200)
@given(st.sampled_from((1, 2, 3, 4, 8, 12, 16, 64, 96, -4)), expressions)
def test_divides_answers_as_cancel_does(d, n):
    assert symbolic.divides(d, n) == cancel_proof(d, n)
    assert symbolic.divides(d, n) == cancel_proof(d, n)          # the remembered answer


def test_visibly_multiple_worked_examples():
    assert symbolic._visibly_multiple(512, 8192 * sympy.Mod(t - M, 4) + 2048)
    assert symbolic._visibly_multiple(96, 6 * M + 96 * t)      # M = 16 q: 6 M = 96 q
    assert not symbolic._visibly_multiple(8, 4 * t)            # t may be odd
    assert not symbolic._visibly_multiple(2, 2 * x)            # x may be no integer
    assert symbolic.divides(8, 4 * t) is None and symbolic.divides(2, 2 * x) is None
    assert symbolic.divides(3, sympy.Integer(7)) is False


def test_memo_keeps_answers_of_distinct_extents_apart():
    a, b = la.symbol("A", 64), la.symbol("A", 2)               # one name, two divisors
    assert symbolic.divides(64, a) is True and symbolic.divides(64, b) is None
    assert symbolic.le(64, a) is True and symbolic.le(64, b) is None
