"""symbolic.mod's fast path past sympy's evaluation for the terms a ring state's phase and
causal attention's key-block counts make: floor((s_1 + ... + s_n) / d + b) of +-1 sums and Max /
Min of free sums. Each built form is exactly what sympy's evaluation returns."""
from __future__ import annotations

import sympy
from hypothesis import given, strategies as st

import layoutkit.algebra as la
from layoutkit.algebra import symbolic
from tests.algebra.strategies import settings_for

t, u, w = (sympy.Symbol(n, integer=True, nonnegative=True) for n in ("t", "u", "w"))
signed = sympy.Symbol("s", integer=True)
even = sympy.Symbol("e", integer=True, nonnegative=True, even=True)
M, N = la.symbol("M", 16), la.symbol("N", 3)
half = sympy.Rational(1, 2)


def same(a, b) -> bool:
    """Equal, of one type, with equal arguments (what the lowering and the memos see)."""
    return a == b and type(a) is type(b) and getattr(a, "args", ()) == getattr(b, "args", ())


def fast(p, q) -> bool:
    """symbolic.mod(p, q) built p's Mod without sympy's evaluation."""
    found = symbolic._free_terms(p) if isinstance(p, (sympy.Add, sympy.Mul, sympy.floor,
                                                      sympy.Symbol)) else None
    return found is not None


counters = st.sampled_from((t, u, w, M, N, signed, even))
signs = st.sampled_from((1, -1))


def _floor_of_sum(draw_terms):
    """floor(b + (+-x_1 +- x_2 ...) / d) of counters (a phase, a key-block count)"""
    return st.tuples(st.lists(st.tuples(signs, counters), min_size=2, max_size=3),
                     st.integers(-7, 7), st.sampled_from((2, 3, 4, 80, 128))).map(
        lambda sbd: sympy.floor(sum(k * x for k, x in sbd[0]) / sbd[2] +
                                sympy.Rational(sbd[1], sbd[2])))


floors = _floor_of_sum(None)
leaves = counters | floors | counters.map(lambda x: -sympy.floor(-x / 128))
sums = st.lists(st.tuples(st.sampled_from((1, -1, 2, 3, -4)), leaves), min_size=1,
                max_size=3).map(lambda kts: sum(k * x for k, x in kts)) | leaves
extrema = (st.tuples(st.integers(-2, 3), sums).map(lambda cx: sympy.Max(cx[0], cx[1])) |
           st.tuples(sums, sums).map(lambda ab: sympy.Min(*ab)) |
           st.tuples(st.integers(0, 2), sums, sums).map(
               lambda cab: sympy.Max(cab[0], sympy.Min(cab[1], cab[2]))) |
           st.tuples(st.integers(-2, 3), sums).map(lambda cx: sympy.Min(cx[0], cx[1])))
phases = (extrema | sums).map(lambda x: sympy.floor(x / 2 - half))


@settings_for(120)
@given(floors | extrema | phases, st.integers(-300, 300), st.sampled_from((2, 3, 4, 8, 128)))
def test_mod_of_floor_sums_and_extrema_is_sympys_mod(x, c, q):
    for p in (x, x + c, x - 1):
        assert same(symbolic.mod(p, q), sympy.Mod(p, q))


def test_mod_worked_examples_phases_and_key_blocks():
    """the GEMM consumer's phase (k + tile * K_TILES over 4 stages, a phase bit) and causal
    attention's ring phase over Max(1, Min(...)) key blocks: built, and sympy's own form"""
    tiles = -sympy.floor(-M / 64)
    phase = sympy.floor(t / 4 + tiles * sympy.floor(u / 66) / 4) + 1
    assert fast(phase, 2)
    assert same(symbolic.mod(phase, 2), sympy.Mod(phase, 2, evaluate=False))
    # Max(1, Min(last - bid_x, ceil(seqlen_k / 128))) as the kernel writes it (M: seqlen_q)
    blocks = sympy.Max(1, sympy.Min(-t - sympy.floor(-M / 128) - sympy.floor((M - N) / 128),
                                    -sympy.floor(-N / 128)))
    assert symbolic._counter_walk(blocks, 0) == {N: 1}
    assert fast(sympy.floor(blocks / 2 - half), 2) and fast(blocks - 1, 2)
    assert same(symbolic.mod(blocks - 1, 2), sympy.Mod(blocks + 1, 2, evaluate=False))
    assert same(symbolic.mod(sympy.floor(blocks / 2 - half), 2),
                sympy.Mod(sympy.floor(blocks / 2 - half), 2, evaluate=False))


def test_mod_leaves_to_sympy_what_it_may_decide():
    """a sum with a shared symbol, a Min with a constant, a Max of even arguments, a floor
    whose terms have different denominators, and an even coefficient: sympy's evaluation"""
    assert not fast(sympy.floor((t + t * u) / 4), 2)                 # t in two terms
    assert not fast(sympy.Min(3, t), 2)                               # bounded above
    assert not fast(sympy.Max(2, 2 * t), 2)                           # even: Mod is 0
    assert symbolic.mod(sympy.Max(2, 2 * t), 2) == 0
    assert not fast(sympy.Max(1, 2 * t + 4 * u), 2)                   # steps of 2
    assert not fast(sympy.floor(3 * t / 2 + 3 * u / 2), 2)            # steps of 3/2
    assert not fast(sympy.floor(t * u / 4), 2)                        # a product: no walk
    assert not symbolic._unbounded_term(sympy.floor((t - u) / 4))     # only inside a sum


def test_counter_walks():
    """which counters step a term through every integer of a ray, and which way"""
    walk = symbolic._counter_walk
    assert walk(t, 0) == {t: 1} and walk(-t, 0) == {t: -1} and walk(2 * t, 0) == {}
    assert walk(t - u + 3, 0) == {t: 1, u: -1}
    assert walk(t + t * u, 0) == {}               # t in two terms, u in a product
    assert walk(sympy.floor(t / 4 + 3 * u / 4), 0) == {t: 1, u: 1}
    assert walk(sympy.floor(t / 4 + 5 * u / 4), 0) == {t: 1}          # u's steps exceed 1
    blocks = sympy.Max(1, sympy.Min(w - t - sympy.floor((u - M) / 128), -sympy.floor(-M / 128)))
    assert walk(blocks, 0) == {M: 1}     # Min's arguments all grow with M; t, u: Max(1, .)
    assert walk(sympy.Min(t, u), 0) == {}         # one argument each: bounded by the other
    assert walk(sympy.Max(t, u), 0) == {t: 1, u: 1}
    assert walk(sympy.Min(t, N - u), 0) == {u: -1}    # falls with u whatever t holds
    assert walk(sympy.Mod(t, 4), 0) == {}


indices = st.sampled_from((t, u, M, signed, even)) | \
    st.tuples(st.sampled_from((t, u, signed, even)), st.sampled_from((1, 2, 4, 32, 128))).map(
        lambda sd: sympy.floor(sd[0] / sd[1])) | \
    st.tuples(st.sampled_from((t, u, signed, even, 3 * t)), st.sampled_from((2, 4, 128))).map(
        lambda sq: sympy.Mod(sq[0], sq[1]))


@settings_for(100)
@given(indices, st.integers(-3, 130))
def test_attained_values_leave_eq_as_sympy_does(x, c):
    """a thread / lane / warp index against an int: where attains says so, sympy's Eq and Ne
    are the unevaluated relation"""
    if symbolic.attains(x, c):
        assert same(sympy.Eq(x, c), sympy.Eq(x, c, evaluate=False))
        assert same(sympy.Ne(x, c), sympy.Ne(x, c, evaluate=False))


def test_attains_examples():
    assert symbolic.attains(t, 0) and symbolic.attains(sympy.floor(t / 32), 0)
    assert symbolic.attains(sympy.Mod(t, 128), 127) and not symbolic.attains(sympy.Mod(t, 128), 128)
    assert not symbolic.attains(t, -1)                         # a counter is never negative
    assert not symbolic.attains(signed, 0) and not symbolic.attains(even, 0)   # no such fact
    assert not symbolic.attains(sympy.floor(3 * t / 32), 0)    # values with gaps


DIVISORS = (t, M, sympy.floor(-M / 256), sympy.ceiling(M / 64), sympy.Mod(t, 8),
            sympy.floor(t / 4) + 1, t ** 2, 2 * t)
quotient_leaves = st.sampled_from((t, u, M, sympy.Integer(3), sympy.Mod(u, 8))) | \
    st.tuples(st.sampled_from((t, u, -u)), st.sampled_from(DIVISORS), st.integers(1, 8)).map(
        lambda x_d_k: x_d_k[0] / (x_d_k[2] * x_d_k[1]))


def _grow_quotients(children):
    pairs = st.tuples(children, children)
    return (pairs.map(lambda ab: ab[0] + ab[1]) | pairs.map(lambda ab: ab[0] * ab[1])
            | children.map(lambda a: sympy.floor(a)) | children.map(lambda a: sympy.Mod(a, 8)))


@settings_for(100)
@given(st.recursive(quotient_leaves, _grow_quotients, max_leaves=6))
def test_expand_of_divisions_by_tile_counts_is_sympys(x):
    """1/y of a symbol or a floor (floor(-i / (8 * ceil(N / 256))), a GEMM's grouped tile
    row) is left as it is, as sympy.expand leaves it; 1/(a sum), 1/t**2 are expanded"""
    assert symbolic.expand(x) == sympy.expand(x)
    if symbolic._multiplied_out(x):
        assert same(sympy.expand(x), x)


def test_expand_division_examples():
    tiles = sympy.floor(-M / 256)
    assert symbolic._multiplied_out(128 * t + 2048 * sympy.floor(-u / (8 * tiles)))
    assert not symbolic._multiplied_out(t / (sympy.floor(t / 4) + 1))   # 1/(a sum)
    assert not symbolic._multiplied_out(u / t ** 2)
    assert not symbolic.attains(M, 0) and symbolic.attains(M, 1)   # an extent is positive
