"""facts.integer_by_form says "an integer" only where sympy's assumptions say so; facts.
provably_less's interval decision of `constant < b` only adds True where the prover has no
answer (never contradicts it), and its two-sided values give the prover's None."""
from __future__ import annotations

import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from layoutkit.algebra import less, symbol
from layoutkit.dsl.core.facts import _both_ways, integer_by_form, provably_less

t = sympy.Symbol("t", integer=True, nonnegative=True)
u = sympy.Symbol("u", integer=True, positive=True)
n = sympy.Symbol("n", integer=True)                 # a run-time int: sign unknown
x = sympy.Symbol("x")                               # no assumptions: not an integer
M = symbol("M", 16)
ATOMS = (t, u, n, x, M, sympy.Integer(3), sympy.Integer(-2), sympy.Rational(1, 2))


def _combine(sub):
    pair = st.tuples(sub, sub)
    small = st.integers(1, 9)
    return st.one_of(
        pair.map(lambda p: p[0] + p[1]), pair.map(lambda p: p[0] * p[1]),
        pair.map(lambda p: sympy.Max(*p)), pair.map(lambda p: sympy.Min(*p)),
        st.tuples(sub, small).map(lambda p: sympy.floor(p[0] / p[1])),
        st.tuples(sub, small).map(lambda p: sympy.ceiling(p[0] / p[1])),
        st.tuples(sub, st.sampled_from((2, 4, 6, t, u, n))).map(lambda p: sympy.Mod(*p)),
        sub.map(lambda e: e ** 2))


expressions = st.recursive(st.sampled_from(ATOMS), _combine, max_leaves=5)
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@SETTINGS
@given(expressions)
def test_integer_by_form_only_says_what_sympy_says(e):
    if integer_by_form(e):
        assert e.is_integer is True


@SETTINGS
@given(st.integers(-3, 3), expressions)
def test_provably_less_of_a_constant_never_contradicts_the_prover(c, b):
    proven = provably_less(c, b)
    assert proven in (less(c, b), True)
    assert not (proven is True and less(c, b) is False)


@SETTINGS
@given(expressions, st.sampled_from((M, M + t, 64 * u, n + 3)))
def test_provably_less_of_a_coordinate_answers_as_the_prover(a, bound):
    # values of the symbols on both sides of the bound decide None without the prover
    assert provably_less(a, bound) is less(a, bound)


def test_a_bounds_check_seen_both_ways_is_unknown():
    coordinate = 192 * t + sympy.Mod(sympy.floor(u / 4), 8) + 16 * sympy.floor(u / 32) + 128
    assert _both_ways(coordinate, M) and provably_less(coordinate, M) is None
    assert not _both_ways(127, symbol("E", 128))       # 127 < E always: the prover says True
    assert provably_less(127, symbol("E", 128)) is True
    assert not _both_ways(n, M)                         # n's sign is unknown: the prover decides


def test_integer_by_form_worked_examples():
    assert integer_by_form(4 * sympy.Mod(t, 8) + sympy.floor(t / 3) - 1)
    assert integer_by_form(sympy.Max(1, sympy.ceiling(M / 64) - u))
    assert not integer_by_form(t / 2)                   # sympy: unknown
    assert not integer_by_form(sympy.Mod(t, n))         # n may be 0: sympy does not say
    assert not integer_by_form(sympy.floor(x))          # x may be complex


def test_a_causal_key_block_count_is_decided_by_its_interval():
    sq, sk = symbol("q_shape1", 16), symbol("k_shape1")
    bid = sympy.Symbol("bid_x", integer=True, nonnegative=True)
    n_end = sympy.Max(sympy.Min(sympy.ceiling(sk / 64),
                                sympy.floor((128 * bid + 127 + sk - sq + 1) / 64) + 1), 1)
    assert provably_less(-1, n_end) is True and provably_less(0, n_end) is True
    assert provably_less(1, n_end) is less(1, n_end)    # the interval's low end is 1: no answer
