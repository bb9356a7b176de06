"""Every algebra entry point refuses inputs outside CuTe's domain with a LayoutError that names the
operation, the argument (and the nested entry), the value and the rule; CuTe's behaviour outside
the domain is kept where CuTe defines it."""
import numpy as np
import pytest
import sympy
from hypothesis import given, strategies as st

import layoutkit.algebra as la
from layoutkit.algebra import Layout, LayoutError, Swizzle, domain, symbol, symbolic
from tests.algebra.strategies import colex_coord, flat, layouts, settings_for, size_of, value_at

L = Layout((4, 2))
M, N, K = symbol("M", 128), symbol("N", 64), symbol("K", 64)
TID = sympy.Symbol("tid", integer=True, nonnegative=True)


def _nested(depth: int, leaf=4):
    t = leaf
    for _ in range(depth):
        t = (t,)
    return t


@pytest.mark.parametrize("call, message", [
    # complement: the cotarget is a positive extent
    (lambda: la.complement(L, 0), r"complement: cotarget = 0: must be a positive integer \(an extent is >= 1\)"),
    (lambda: la.complement(L, -1), r"complement: cotarget = -1: must be a positive integer"),
    (lambda: la.complement(L, 2.5), r"complement: cotarget = 2.5: must be an integer, not a float"),
    (lambda: la.complement(L, True), r"complement: cotarget = True: must be an integer, not a bool"),
    (lambda: la.complement(L, (4, 0)), r"complement: cotarget\[1\] = 0 \(in cotarget = \(4, 0\)\): must be a positive"),
    # local_tile / local_partition: the tile and the thread are inside the grid and the tile
    (lambda: la.local_tile(Layout((8, 6)), (4, 3), (2, 0)),
     r"local_tile: coord\[0\] = 2 \(in coord = \(2, 0\)\): must be in 0..1 \(the extent is 2\); the grid is \(2,2\)"),
    (lambda: la.local_tile(Layout((8, 6)), (4, 3), (1, 5)), r"local_tile: coord\[1\] = 5 .*must be in 0..1"),
    (lambda: la.local_tile(Layout((8, 6)), (4, 3), 4),
     r"local_tile: coord = 4: must be in 0..3 \(the size of shape \(2, 2\) is 4\); the grid is \(2,2\)"),
    (lambda: la.local_tile(Layout((8, 6)), (4, 3), (0, -1)), r"local_tile: coord\[1\] = -1 .*must be >= 0"),
    (lambda: la.local_tile(Layout((8, 6)), (4, 3), (1, 1, 1)),
     r"local_tile: coord = \(1, 1, 1\): has 3 entries but the grid \(2,2\) has 2 modes"),
    (lambda: la.local_tile(Layout((8, 6)), (4, 3), ("1", 0)), r"local_tile: coord\[0\] = '1' .*not a string"),
    (lambda: la.local_tile(Layout((8, 6)), (4, 3.0), (0, 0)), r"local_tile: tiler\[1\] = 3.0 .*not a float"),
    (lambda: la.local_tile(Layout((M, 64)), (128, 64), (-TID - 1, 0)),
     r"local_tile: coord\[0\] = -tid-1 .*must be >= 0 .*this expression is negative"),
    (lambda: la.local_tile(Layout((M, 64)), (128, 64), (TID / 2, 0)),
     r"local_tile: coord\[0\] = tid/2 .*tid/2 is not provably an integer"),
    (lambda: la.local_tile("8x6", (4, 3), (0, 0)), r"local_tile: layout = '8x6': must be a Layout or a ComposedLayout"),
    (lambda: la.local_partition(Layout((16, 64)), Layout((2, 8)), 100),
     r"local_partition: index = 100: must be in 0..15 \(the size of shape \(2, 8\) is 16\): a thread of the tile"),
    (lambda: la.local_partition(Layout((16, 64)), Layout((2, 8)), -1), r"local_partition: index = -1: must be >= 0"),
    (lambda: la.local_partition(Layout((16, 64)), Layout((2, 8)), 3.0), r"local_partition: index = 3.0: .*not a float"),
    (lambda: la.local_partition(Layout((16, 64)), (2, 8), 3), r"local_partition: tile = \(2, 8\): must be a Layout"),
    # Swizzle: integer parameters, integer offsets >= 0
    (lambda: Swizzle(3, 3, 3)(2.5), r"Sw<3,3,3>: offset = 2.5: must be an integer, not a float"),
    (lambda: Swizzle(3, 3, 3)("8"), r"Sw<3,3,3>: offset = '8': must be an integer, not a string"),
    (lambda: Swizzle(3, 3, 3)(True), r"Sw<3,3,3>: offset = True: must be an integer, not a bool"),
    (lambda: Swizzle(3, 3, 3)(None), r"Sw<3,3,3>: offset = None: must be an integer, not None"),
    (lambda: Swizzle(3, 3, 3)(-8), r"Sw<3,3,3>: offset = -8: must be >= 0"),
    (lambda: Swizzle(3, 3, 3)(M), r"Sw<3,3,3>: cannot swizzle the symbolic offset M"),
    (lambda: Swizzle(True, 3, 3), r"Swizzle: bits = True: must be an integer, not a bool"),
    (lambda: Swizzle(3, 3.0, 3), r"Swizzle: base = 3.0: must be an integer, not a float"),
    (lambda: Swizzle(3, 3, M), r"Swizzle: shift = M: must be an int"),
    # crd2idx / calling a layout: a coordinate lies inside the shape
    (lambda: la.crd2idx((5, 0), (4, 2)), r"crd2idx: coord\[0\] = 5 \(in coord = \(5, 0\)\): must be in 0..3 \(the extent is 4\)"),
    (lambda: la.crd2idx((0, 2), (4, 2)), r"crd2idx: coord\[1\] = 2 .*must be in 0..1"),
    (lambda: la.crd2idx(-1, (4, 2)), r"crd2idx: coord = -1: must be >= 0"),
    (lambda: la.crd2idx((-1, 0), (4, 2)), r"crd2idx: coord\[0\] = -1 .*must be >= 0"),
    (lambda: la.crd2idx((1, (0, 4)), (4, (2, 3))), r"crd2idx: coord\[1\]\[1\] = 4 .*must be in 0..2"),
    (lambda: la.crd2idx((1, 7), (4, (2, 3))), r"crd2idx: coord\[1\] = 7 .*must be in 0..5 \(the size of shape \(2, 3\) is 6\)"),
    (lambda: la.crd2idx((1, 2, 3), (4, 2)), r"crd2idx: coord = \(1, 2, 3\): does not match shape \(4, 2\) \(3 entries for 2 modes\)"),
    (lambda: la.crd2idx((1, (0, 1)), (4, 2)), r"crd2idx: coord\[1\] = \(0, 1\) .*a tuple where the shape has an extent"),
    (lambda: la.crd2idx(("a", 0), (4, 2)), r"crd2idx: coord\[0\] = 'a' .*must be an integer, not a string"),
    (lambda: la.crd2idx("ab", (4, 2)), r"crd2idx: coord = 'ab': must be an integer, not a string"),
    (lambda: la.crd2idx((1, None), (4, 2)), r"crd2idx: coord\[1\] = None .*not None"),
    (lambda: la.crd2idx((1, 1), (4, 0)), r"crd2idx: shape\[1\] = 0 .*must be a positive integer"),
    (lambda: la.crd2idx((1, 1), (4, 2), (1,)), r"crd2idx: shape \(4, 2\) and stride \(1,\) are not congruent"),
    (lambda: la.crd2idx((1, 1), L, (1, 4)), r"crd2idx: give a layout or \(shape, stride\)"),
    (lambda: L(5, 0), r"calling \(4,2\):\(1,4\): coord\[0\] = 5 .*must be in 0..3"),
    (lambda: L(-1), r"calling \(4,2\):\(1,4\): coord = -1: must be >= 0"),
    (lambda: L("x"), r"calling \(4,2\):\(1,4\): coord = 'x': must be an integer, not a string"),
    (lambda: L(1, True), r"calling .*: coord\[1\] = True .*must be an integer, not a bool"),
    (lambda: L.slice_and_offset((None, 2)), r"slicing \(4,2\):\(1,4\): coord\[1\] = 2 .*must be in 0..1"),
    (lambda: L[True], r"mode of \(4,2\):\(1,4\): i = True: must be an integer, not a bool"),
    (lambda: L["0"], r"i = '0': must be an integer, not a string"),
    # idx2crd: an index >= 0; with strides, strides >= 0
    (lambda: la.idx2crd(-3, (4, 2)), r"idx2crd: idx = -3: must be >= 0"),
    (lambda: la.idx2crd(2.5, (4, 2)), r"idx2crd: idx = 2.5: must be an integer, not a float"),
    (lambda: la.idx2crd(3.0, (4, 2)), r"idx2crd: idx = 3.0: must be an integer, not a float"),
    (lambda: la.idx2crd("3", (4, 2)), r"idx2crd: idx = '3': must be an integer, not a string"),
    (lambda: la.idx2crd(True, (4, 2)), r"idx2crd: idx = True: must be an integer, not a bool"),
    (lambda: la.idx2crd(-TID - 1, (4, 2)), r"idx2crd: idx = -tid-1: must be >= 0; this expression is negative"),
    (lambda: la.idx2crd(3, (4, 2), (1, -4)), r"idx2crd: stride = \(1, -4\): entry 1 = -4 is negative"),
    (lambda: la.idx2crd(3, (4, "2")), r"idx2crd: shape\[1\] = '2' .*not a string"),
    # Layout construction: extents, strides, congruence, no bools, floats, strings or None
    (lambda: Layout((4, True)), r"Layout: shape\[1\] = True \(in shape = \(4, True\)\): must be an integer, not a bool"),
    (lambda: Layout((4, 2.0)), r"Layout: shape\[1\] = 2.0 .*not a float"),
    (lambda: Layout((4, None)), r"Layout: shape\[1\] = None .*not None"),
    (lambda: Layout((4, 2), (1, "4")), r"Layout: stride\[1\] = '4' .*not a string"),
    (lambda: Layout((4, 2), (1, False)), r"Layout: stride\[1\] = False .*not a bool"),
    (lambda: Layout((4, 2), (1, 4.0)), r"Layout: stride\[1\] = 4.0 .*not a float"),
    (lambda: Layout((4, -2)), r"Layout: shape\[1\] = -2 .*must be a positive integer"),
    (lambda: Layout((4, np.bool_(True))), r"Layout: shape\[1\] = .*must be an integer, not a bool"),
    (lambda: Layout(Layout(4)), r"Layout: shape = Layout\(4, 1\): must be an integer, not a Layout"),
    # the ops that take extents and factors
    (lambda: la.logical_divide(L, "8"), r"logical_divide: tiler = '8': must be an integer, not a string"),
    (lambda: la.logical_divide(L, (2, True)), r"logical_divide: tiler\[1\] = True .*not a bool"),
    (lambda: la.zipped_divide(L, (2, None)), r"zipped_divide: tiler\[1\] = None .*not allowed in this tiler"),
    (lambda: la.composition(L, 0), r"composition: B = 0: must be a positive integer"),
    (lambda: la.composition(L, 2.0), r"composition: B = 2.0: must be an integer, not a float"),
    (lambda: la.logical_product(L, -2), r"logical_product: tiler = -2: must be a positive integer"),
    (lambda: la.blocked_product(L, (2, 2)), r"blocked_product: tiler = \(2, 2\): must be a Layout or an extent"),
    (lambda: la.tile_to_shape(Layout(2), (4, 0)), r"tile_to_shape: target\[1\] = 0 .*must be a positive integer"),
    (lambda: la.upcast(L, 2.0), r"upcast: n = 2.0: must be an integer, not a float"),
    (lambda: la.upcast(L, True), r"upcast: n = True: must be an integer, not a bool"),
    (lambda: la.downcast(L, 0), r"downcast: n = 0: must be a positive integer"),
    (lambda: la.upcast("x", 2), r"upcast: layout = 'x': must be a Layout or a ComposedLayout"),
    (lambda: la.coalesce(L, "x"), r"coalesce: profile = 'x': must be an integer, not a string"),
    (lambda: la.ComposedLayout(Swizzle(1, 0, 1), 2.0, L), r"ComposedLayout: offset = 2.0: .*not a float"),
    (lambda: la.ComposedLayout(3, 0, L), r"ComposedLayout: outer = 3: must be a Swizzle or a Layout"),
    (lambda: la.make_layout_tv(Layout(4), "x"), r"make_layout_tv: val_layout = 'x': must be a Layout"),
    (lambda: la.max_common_vector(L, (4, 2)), r"max_common_vector: b = \(4, 2\): must be a Layout"),
    (lambda: la.right_inverse("x"), r"right_inverse: layout = 'x': must be an integer, not a string"),
    (lambda: la.size("abc"), r"size: x = 'abc': must be an integer, not a string"),
    (lambda: la.cosize("abc"), r"cosize: x = 'abc': must be a Layout, a ComposedLayout or a Swizzle"),
    (lambda: la.filter("abc"), r"filter: layout = 'abc': must be a Layout or a ComposedLayout"),
    (lambda: symbol("M", True), r"symbol\('M'\): divisible_by = True: must be an integer, not a bool"),
    (lambda: symbol("M", 2.0), r"symbol\('M'\): divisible_by = 2.0: must be an integer, not a float"),
    (lambda: Layout((M, 4)).subs({"M": 256.0}), r"subs: value of M = 256.0: must be an integer, not a float"),
    (lambda: Layout((M, 4)).subs({"M": True}), r"subs: value of M = True: must be an integer, not a bool"),
])
def test_out_of_domain_inputs_name_the_argument_value_and_rule(call, message):
    with pytest.raises(LayoutError, match=message):
        call()


def test_cute_behaviour_outside_the_domain_is_kept_where_cute_defines_it():
    # an index past the size: the last mode takes what is left (crd2idx, idx2crd, calling)
    assert la.idx2crd(13, (4, 3)) == (1, 3) and la.idx2crd(100, (4, 2)) == (0, 25)
    assert la.crd2idx(13, (4, 3)) == 13 and Layout((4, 3), (3, 1))(13) == 1 * 3 + 3 * 1
    assert la.idx2crd(17, (2, 16), (16, 1)) == (1, 1)           # strided: (idx // d) % s wraps
    # a cotarget below cosize: the gaps below A's span and one copy of it
    assert la.complement(Layout(4, 2), 3) == Layout(2, 1)
    assert la.complement(Layout((2, 2), (1, 6)), 4) == Layout(3, 2)


def test_numpy_integers_are_integers():
    i64, i32 = np.int64, np.int32
    assert Layout((i64(4), i32(2)), (i64(1), 4)) == L
    assert la.crd2idx((i64(1), i32(1)), (4, 2)) == 5 and L(i64(5)) == 5 and L[i64(1)] == Layout(2, 4)
    assert la.idx2crd(i64(5), (4, 2)) == (1, 1)
    assert Swizzle(i64(3), i32(3), 3)(i64(8)) == 8 and la.upcast(L, i64(2)) == la.upcast(L, 2)
    assert la.complement(Layout(4, 2), i64(24)) == la.complement(Layout(4, 2), 24)
    assert la.local_partition(Layout((16, 64)), Layout((2, 8)), i64(3)) == \
        la.local_partition(Layout((16, 64)), Layout((2, 8)), 3)
    assert symbol("M", i64(128)) == M
    assert Layout((M, 4)).subs({"M": i64(256)}) == Layout((256, 4))


@pytest.mark.parametrize("call", [
    lambda d: Layout(d), lambda d: Layout(d, d), lambda d: la.size(d), lambda d: la.depth(d),
    lambda d: la.rank(d), lambda d: la.flatten(d), lambda d: la.make_layout(d),
    lambda d: la.crd2idx(0, d), lambda d: la.idx2crd(0, d), lambda d: la.composition(L, d),
    lambda d: la.logical_divide(L, d), lambda d: la.zipped_divide(L, d), lambda d: la.complement(L, d),
    lambda d: la.tile_to_shape(Layout(4), d), lambda d: la.coalesce(L, d),
])
def test_deep_nesting_is_a_layout_error_not_a_recursion_error(call):
    with pytest.raises(LayoutError, match=r"is nested more than 32 levels deep"):
        call(_nested(1000))


def test_the_deepest_allowed_layout_works():
    deep = Layout(_nested(domain.MAX_DEPTH))
    assert la.depth(deep) == domain.MAX_DEPTH and la.size(deep) == 4
    assert deep(3) == 3 and str(la.coalesce(deep)) == "4:1"
    assert la.crd2idx(_nested(domain.MAX_DEPTH, 3), deep.shape) == 3
    assert la.composition(Layout(8, 2), deep)(3) == 6 and str(deep).startswith("(" * 32 + "4")


def test_the_deep_error_message_is_short():
    with pytest.raises(LayoutError) as info:
        Layout(_nested(100000))
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("extent, message", [
    (sympy.Symbol("n", negative=True), r"shape = n: must be a positive integer \(an extent\); n is declared "
                                       r"negative, not a positive integer \(use symbol\('n'\)"),
    (sympy.Symbol("r", real=True), r"shape = r: .*r is declared real, not a positive integer"),
    (sympy.Symbol("q", integer=False), r"shape = q: .*q is declared non-integer"),
    (sympy.Symbol("x"), r"shape = x: .*x has no declared facts, not a positive integer"),
    (sympy.Symbol("z", integer=True, nonpositive=True), r"shape = z: .*z is declared integer and nonpositive, not a"),
    (sympy.Symbol("e", zero=True), r"shape = e: .*e is declared zero, not a positive integer"),
    (-M, r"shape = -M: .*it is < 1 for every value of its symbols"),
    (M / 3, r"shape = M/3: must be a positive integer \(an extent\); M/3 is not provably an integer from the "
            r"declared facts \(M is a positive multiple of 128\); declare M divisible by 384 "
            r"\(symbol\('M', 384\)\) to make it one"),
    (M - 128, r"shape = M-128: .*could not be proven >= 1 from the declared facts \(M is a positive multiple "
              r"of 128\); declare M divisible by 256 \(symbol\('M', 256\)\) to decide it"),
    (sympy.Rational(5, 2), r"shape = 5/2: .*this expression is never an integer"),
    (sympy.Float(2.0), r"shape = 2.00*: .*never an integer"),
])
def test_only_positive_integer_symbolic_extents(extent, message):
    with pytest.raises(LayoutError, match=message):
        Layout(extent)


def test_an_integer_symbol_of_undeclared_sign_is_an_extent_by_premise_only():
    # the DSL's int parameters whose value was <= 0 at specialization are such symbols
    n = sympy.Symbol("n", integer=True)
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    assert str(Layout((n, t), (1, n))) == "(n,t):(1,n)"
    assert str(la.zipped_divide(Layout(n), (128,))) == "((128),(ceiling(n/128))):((1),(128))"
    assert symbolic.le(1, n) is None and symbolic.lt(0, t) is None      # never assumed >= 1
    with pytest.raises(LayoutError, match=r"shape = 1-M: .*it is < 1 for every value of its symbols"):
        Layout(1 - M)


def test_positive_integer_symbolic_extents_and_integer_strides_are_accepted():
    p = sympy.Symbol("p", integer=True, positive=True)
    ld = sympy.Symbol("ld", integer=True)         # a stride of unknown sign is a stride
    assert str(Layout((M / 64, p), (ld, 1))) == "(M/64,p):(ld,1)"
    assert str(Layout((M, N * K), (1, M))) == "(M,K*N):(1,M)"
    with pytest.raises(LayoutError, match=r"stride\[0\] = x .*x is not declared an integer"):
        Layout((M, 4), (sympy.Symbol("x"), 1))
    with pytest.raises(LayoutError, match=r"stride\[0\] = M/3 .*declare M divisible by 384"):
        Layout((M, 4), (M / 3, 1))


def test_the_prover_uses_only_declared_signs():
    t = sympy.Symbol("t", integer=True)                        # sign unknown
    n = sympy.Symbol("n", integer=True, negative=True)
    assert symbolic.lt(0, t) is None and symbolic.le(0, t) is None and symbolic.lt(n, 0) is True
    assert symbolic.le(0, TID) is True and symbolic.lt(0, TID) is None   # a thread id may be 0
    assert symbolic.lt(0, M) is True and symbolic.le(128, M) is True
    with pytest.raises(LayoutError, match=r"the sign of t could not be proven from the declared facts "
                                          r"\(t is declared integer\)"):
        la.composition(Layout((4, 8), (1, 5)), Layout(2, t))


@pytest.mark.parametrize("call, message", [
    (lambda: la.composition(Layout((N, K), (1, 2 * N)), 128),
     r"composition\(\(N,K\):\(1,2\*N\), 128:1\): which of N and 128 is smaller could not be proven from the "
     r"declared facts \(N is a positive multiple of 64\); declare N divisible by 128 \(symbol\('N', 128\)\) to decide it"),
    (lambda: la.upcast(Layout((4, M), (1, N)), 128),
     r"upcast.*: divisibility condition: 128 divides stride N or stride divides 128 could not be proven "
     r"from the declared facts \(N is a positive multiple of 64\); declare N divisible by 128"),
    (lambda: la.tile_to_shape(Layout((128, 2)), (N, 6)),
     r"tile_to_shape\(\(128,2\):\(1,128\), \(N,6\)\): block extent 128 divides target extent N could not be "
     r"proven from the declared facts \(N is a positive multiple of 64\); declare N divisible by 128"),
    (lambda: la.complement(Layout((M, N), (1, K))),
     r"complement\(\(M,N\):\(1,K\)\): stride K is a multiple of the extent M of the smaller modes could not be "
     r"proven from the declared facts \(K is a positive multiple of 64; M is a positive multiple of 128\); it "
     r"depends on the value of K, M, which no stronger divisibility decides"),
])
def test_symbolic_errors_name_the_fact_that_would_decide_them(call, message):
    with pytest.raises(LayoutError, match=message):
        call()


def test_the_named_fact_does_decide_the_condition():
    N128 = symbol("N", 128)
    assert la.composition(Layout((N128, K), (1, 2 * N128)), 128) == Layout(128, 1)
    assert la.upcast(Layout((4, M), (1, N128)), 128) == Layout((1, M), (1, N128 / 128))
    M384 = symbol("M", 384)
    assert str(Layout(M384 / 3)) == "M/3:1"


def test_a_built_layout_is_not_validated_again(monkeypatch):
    A = Layout((4, (2, 3)), (1, (8, 16)))

    def boom(*args, **kwargs):
        raise AssertionError("revalidated a built layout")
    for name in ("shape", "stride", "layout_pair", "int_tuple"):
        monkeypatch.setattr(domain, name, boom)
    assert A(5) == A(1, 1) == 9 and A[1] == Layout((2, 3), (8, 16))
    assert la.coalesce(A) is not None and la.composition(A, Layout(4, 2))(1) == 2
    assert la.logical_divide(A, Layout(2, 1)) is not None and la.size(A) == 24


# ---- random coordinates against random layouts --------------------------------------------------

@st.composite
def _bad_coordinate(draw, shape):
    """A coordinate congruent to shape with exactly one leaf out of its range: (coord, path, leaf)."""
    leaves = flat(shape)
    k = draw(st.integers(0, len(leaves) - 1), label="bad leaf")
    extent = leaves[k]
    bad = draw(st.one_of(st.integers(extent, extent + 50), st.integers(-50, -1)), label="value")
    it = iter(range(len(leaves)))
    path_of = {}

    def build(s, path):
        if isinstance(s, tuple):
            return tuple(build(m, path + (i,)) for i, m in enumerate(s))
        j = next(it)
        path_of[j] = path
        return bad if j == k else draw(st.integers(0, s - 1))
    crd = build(shape, ())
    return crd, path_of[k], bad


@settings_for(150)
@given(layouts(), st.data())
def test_a_random_out_of_range_entry_is_named_by_its_position(pair, data):
    shape, stride = pair
    if not isinstance(shape, tuple):
        shape, stride = (shape,), (stride,)
    crd, path, bad = data.draw(_bad_coordinate(shape), label="coord")
    position = "".join(rf"\[{i}\]" for i in path)
    rule = "must be >= 0" if bad < 0 else "must be in 0.."
    with pytest.raises(LayoutError, match=rf"crd2idx: coord{position} = {bad} .*{rule}"):
        la.crd2idx(crd, shape, stride)
    with pytest.raises(LayoutError, match=rf"coord{position} = {bad} .*{rule}"):
        Layout(shape, stride)(crd)


@settings_for(150)
@given(layouts(), st.data())
def test_every_in_range_coordinate_and_index_is_accepted(pair, data):
    shape, stride = pair
    i = data.draw(st.integers(0, 2 * size_of(shape)), label="index")
    assert la.crd2idx(i, shape, stride) == value_at(shape, stride, i)
    if i < size_of(shape):
        crd = colex_coord(i, shape)
        assert la.crd2idx(crd, shape, stride) == Layout(shape, stride)(crd) == value_at(shape, stride, i)
        assert la.idx2crd(i, shape) == crd


_JUNK = st.one_of(st.floats(allow_nan=False), st.text(max_size=3), st.booleans(), st.none(),
                  st.just(np.float64(2.0)), st.just(np.bool_(False)), st.just(sympy.Rational(1, 2)))


def _with_leaf(shape, k, value, others):
    """shape with its k-th leaf replaced by value and every other leaf by others(extent)."""
    count = iter(range(len(flat(shape))))

    def build(s):
        if isinstance(s, tuple):
            return tuple(build(m) for m in s)
        return value if next(count) == k else others(s)
    return build(shape)


@settings_for(150)
@given(layouts(), _JUNK, st.data())
def test_a_non_integer_entry_anywhere_is_refused(pair, junk, data):
    shape, stride = pair
    k = data.draw(st.integers(0, len(flat(shape)) - 1), label="leaf")
    with pytest.raises(LayoutError, match=r"crd2idx: coord.* = .*: must be an integer"):
        la.crd2idx(_with_leaf(shape, k, junk, lambda s: 0), shape, stride)
    with pytest.raises(LayoutError, match=r"Layout: shape.* = .*: must be (an|a positive) integer"):
        Layout(_with_leaf(shape, k, junk, lambda s: s))
    if junk is not None or isinstance(stride, tuple):      # Layout(s, None) is column-major
        with pytest.raises(LayoutError, match=r"Layout: stride.* = .*: must be an integer"):
            Layout(shape, _with_leaf(stride, k, junk, lambda d: d))
