"""layoutkit.algebra.divides / less / less_equal: a proven answer holds at every sampled value."""
import itertools
import random

import pytest
import sympy

from layoutkit.algebra import LayoutError, divides, less, less_equal, symbol

M = symbol("M", 64)
t = sympy.Symbol("t", integer=True, nonnegative=True)
u = sympy.Symbol("u", integer=True)  # no sign: order facts about it stay unknown


def _values():
    for m, tv, uv in itertools.product((64, 128, 192, 640), (0, 1, 3, 17), (-5, 0, 7)):
        yield {M: m, t: tv, u: uv}


def _random_expr(rng):
    return (rng.randint(-3, 3) * M + rng.randint(-8, 8) * t + rng.choice((0, 0, 1)) * u
            + rng.randint(-200, 200) + rng.choice((0, 1)) * M * t)


@pytest.mark.parametrize("seed", range(40))
def test_proven_answers_hold_at_every_value(seed):
    rng = random.Random(seed)
    a, b = _random_expr(rng), _random_expr(rng)
    d = rng.choice((1, 2, 4, 8, 16, 3))
    checks = [(less(a, b), lambda v: a.xreplace(v) < b.xreplace(v)),
              (less_equal(a, b), lambda v: a.xreplace(v) <= b.xreplace(v)),
              (divides(d, a), lambda v: int(a.xreplace(v)) % d == 0)]
    for answer, holds in checks:
        if answer is None:
            continue
        assert all(bool(holds(v)) == answer for v in _values())


def test_plain_ints_and_unknowns():
    assert (divides(3, 9), divides(3, 10), divides(0, 0), divides(0, 5)) == (True, False, True, False)
    assert (less(2, 3), less(3, 3), less_equal(3, 3), less_equal(4, 3)) == (True, False, True, False)
    assert less(u, 0) is None and less_equal(0, u) is None and divides(2, u) is None
    assert less(4 * t, 512) is None and divides(128, M) is None
    assert less(0, M) is True and divides(32, M + 4 * 8 * t) is True


def test_rejects_non_integers():
    with pytest.raises(LayoutError, match="less: a must be an int"):
        less(1.5, 2)
    with pytest.raises(LayoutError, match="divides: d must be an int"):
        divides("4", 8)


def _random_mod_expr(rng):
    q = rng.choice((8, M, 3))
    return (rng.randint(-3, 3) * sympy.Mod(t, q) + rng.randint(-2, 2) * M + rng.randint(-4, 4) * t
            + rng.randint(-80, 80))


@pytest.mark.parametrize("seed", range(40))
def test_proven_answers_with_mod_terms_hold_at_every_value(seed):
    rng = random.Random(1000 + seed)
    a, b = _random_mod_expr(rng), _random_mod_expr(rng)
    for answer, holds in ((less(a, b), lambda v: a.xreplace(v) < b.xreplace(v)),
                          (less_equal(a, b), lambda v: a.xreplace(v) <= b.xreplace(v))):
        if answer is not None:
            assert all(bool(holds(v)) == answer for v in _values())


def test_mod_is_bounded_by_its_divisor():
    # what a reversed tile order needs: T - (bid mod T) is at least 1
    T = symbol("T", 1)
    assert less_equal(0, T - sympy.Mod(t, T) + 3) is True
    assert less(T - sympy.Mod(t, T), 0) is False
    assert less_equal(sympy.Mod(t, 8), 7) is True and less(7, sympy.Mod(t, 8)) is False
    assert less(sympy.Mod(t, 8), 7) is None          # 7 is reached
    assert less(sympy.Mod(t, u), 5) is None          # u has no sign: no bound
