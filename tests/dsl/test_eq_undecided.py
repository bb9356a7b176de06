"""lk.eq / lk.ne of a thread, lane or warp index against an int it takes: the relation sympy's
evaluation returns, built without its assumption queries (layoutkit.algebra.symbolic.attains);
anything else through sympy as before."""
from __future__ import annotations

import sympy

import layoutkit as lk

tid = sympy.Symbol("tid", integer=True, nonnegative=True)


def test_eq_and_ne_of_indices_are_sympys_relations():
    for a, c in ((tid, 0), (sympy.floor(tid / 32), 0), (sympy.Mod(tid, 128), 0),
                 (sympy.Mod(sympy.floor(tid / 4), 8), 7)):
        for built, sympys in ((lk.eq(a, c), sympy.Eq(a, c)), (lk.ne(a, c), sympy.Ne(a, c))):
            assert built == sympys and type(built) is type(sympys)


def test_values_not_taken_go_through_sympy():
    """sympy decides what it can (a counter is never -1) and keeps the rest as it builds it"""
    assert lk.ne(tid, -1) is sympy.true and lk.eq(tid, -1) is sympy.false
    assert lk.eq(3, 3) is sympy.true
    out = sympy.Mod(tid, 4)
    assert lk.eq(out, 4) == sympy.Eq(out, 4)          # 4 is past its values: not attains
