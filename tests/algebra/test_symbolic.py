"""Symbolic extents: printing, proofs from declared divisibility, subs, and that substituting into a
symbolic result gives exactly the integer computation's result."""
import time

import pytest
import sympy
from hypothesis import given, settings, strategies as st

import layoutkit.algebra as la
from layoutkit.algebra import Layout, LayoutError, symbol, symbolic


M, N, K = symbol("M", 128), symbol("N", 64), symbol("K", 64)


def test_symbol_prints_its_name_and_knows_its_divisor():
    assert str(M) == "M" and str(M / 64) == "M/64"
    assert str(symbolic.ceil_div(M, 64)) == "M/64"
    assert str(symbolic.ceil_div(M, 256)) == "ceiling(M/256)"
    assert symbolic.ceil_div(8, K) == 1
    assert str(Layout((M, K), (K, 1))) == "(M,K):(K,1)"
    assert symbol("M", 128) == M and symbol("M", 64) != M


def test_prover_answers_true_false_or_unknown():
    assert symbolic.divides(64, M) is True
    assert symbolic.divides(256, M) is None
    assert symbolic.divides(3, 6 * M) is True
    assert symbolic.le(128, M) is True and symbolic.lt(128, M) is None
    assert symbolic.eq(M, 64) is False and symbolic.eq(M, 128) is None
    assert symbolic.le(M, N) is None


def test_bad_symbols():
    with pytest.raises(LayoutError, match="identifier"):
        symbol("1M")
    with pytest.raises(LayoutError, match="positive int"):
        symbol("M", 0)


def test_subs_by_object_and_name_and_divisibility_violation():
    L = Layout((M, K), (K, 1))
    assert L.subs({M: 256, "K": 64}) == Layout((256, 64), (64, 1))
    assert type(L.subs({M: 256, K: 64}).stride[0]) is int
    with pytest.raises(LayoutError, match=r"M=100 violates .* multiple of 128"):
        L.subs({M: 100, K: 64})
    with pytest.raises(LayoutError, match="positive"):
        L.subs({"M": -128, K: 64})
    with pytest.raises(LayoutError, match="neither a symbol"):
        L.subs({3: 4})


def test_unprovable_condition_raises_saying_so():
    L = Layout((N, K), (1, 2 * N))
    with pytest.raises(LayoutError, match="could not be proven from the declared facts"):
        la.composition(L, 128)  # N is only known to be a multiple of 64: N < 128 is possible
    with pytest.raises(LayoutError, match="could not be proven"):
        la.complement(Layout((M, N), (1, K)))  # order / divisibility of K vs M unknown


def test_symbolic_results_are_simplified():
    Cm = Layout((M, N), (1, M))
    assert str(la.zipped_divide(Cm, (128, 64))) == "((128,64),(M/128,N/64)):((1,M),(128,64*M))"
    assert str(la.coalesce(Cm)) == "M*N:1"
    assert str(la.cosize(Layout((M, K), (K, 1)))) == "K*M"
    assert str(la.upcast(Layout((M, K), (K, 1)), 8)) == "(M,K/8):(K/8,1)"


def _ops():
    Cm = Layout((M, N), (1, M))
    Rm = Layout((M, K), (K, 1))
    return [
        lambda: la.composition(Cm, (128, 64)),
        lambda: la.logical_divide(Cm, (128, 64)),
        lambda: la.zipped_divide(Rm, (Layout(64, 2), 32)),
        lambda: la.tiled_divide(Rm, (128, 64)),
        lambda: la.complement(Layout((128, 64), (1, M)), M * N),
        lambda: la.right_inverse(Rm),
        lambda: la.left_inverse(Cm),
        lambda: la.logical_product(Layout((M, K), (1, M)), Layout(4)),
        lambda: la.blocked_product(Cm, Layout((2, 2))),
        lambda: la.raked_product(Cm, Layout((2, 2))),
        lambda: la.tile_to_shape(Layout((64, 8), (8, 1)), (M, K)),
        lambda: la.coalesce(Layout(((M, 2), K), ((1, M), 2 * M))),
        lambda: la.upcast(Rm, 8),
    ]


def test_each_symbolic_op_runs_under_50ms():
    for op in _ops():
        op()  # warm sympy's caches as a notebook session would be
        t = time.perf_counter()
        op()
        assert time.perf_counter() - t < 0.05, op


def _subs_layout(x, values):
    if isinstance(x, tuple):
        return tuple(_subs_layout(v, values) for v in x)
    return x.subs(values) if hasattr(x, "subs") and not isinstance(x, (int, sympy.Basic)) else \
        symbolic.substitute(x, values) if isinstance(x, sympy.Basic) else x


@settings(max_examples=25, deadline=None)
@given(m=st.integers(2, 6), n=st.integers(2, 6), k=st.integers(2, 6), which=st.integers(0, 12))
def test_substituting_into_a_symbolic_result_equals_the_integer_result(m, n, k, which):
    # Values where no symbolic extent of the result becomes 1: an extent that is not provably 1
    # is kept as a mode (CuTe treats a dynamic int the same way); see test_value_1_gives_same_function.
    values = {M: 128 * m, N: 64 * n, K: 64 * k}
    symbolic_result = _ops()[which]()
    # the same op on the concrete layouts: substitute the symbols into the op's inputs
    concrete = _concrete_ops(values)[which]()
    assert _subs_layout(symbolic_result, values) == concrete


def _concrete_ops(values):
    m, n, k = values[M], values[N], values[K]
    Cm = Layout((m, n), (1, m))
    Rm = Layout((m, k), (k, 1))
    return [
        lambda: la.composition(Cm, (128, 64)),
        lambda: la.logical_divide(Cm, (128, 64)),
        lambda: la.zipped_divide(Rm, (Layout(64, 2), 32)),
        lambda: la.tiled_divide(Rm, (128, 64)),
        lambda: la.complement(Layout((128, 64), (1, m)), m * n),
        lambda: la.right_inverse(Rm),
        lambda: la.left_inverse(Cm),
        lambda: la.logical_product(Layout((m, k), (1, m)), Layout(4)),
        lambda: la.blocked_product(Cm, Layout((2, 2))),
        lambda: la.raked_product(Cm, Layout((2, 2))),
        lambda: la.tile_to_shape(Layout((64, 8), (8, 1)), (m, k)),
        lambda: la.coalesce(Layout(((m, 2), k), ((1, m), 2 * m))),
        lambda: la.upcast(Rm, 8),
    ]


def test_value_1_gives_the_same_function():
    # M/128 == 1 when M = 128: the symbolic result keeps that size-1 mode (with its stride).
    sym = la.logical_divide(Layout((M, N), (1, M)), (128, 64)).subs({M: 128, N: 128})
    concrete = la.logical_divide(Layout((128, 128), (1, 128)), (128, 64))
    assert [sym(i) for i in range(la.size(sym))] == [concrete(i) for i in range(la.size(concrete))]
