"""Symbolic layouts: an op run on symbols, then substituted, equals the op run on the substituted
(concrete) layout; a condition the declared facts cannot prove raises LayoutError naming it."""
from __future__ import annotations

import pytest
import sympy
from hypothesis import event, given, strategies as st

import layoutkit.algebra as la
from tests.algebra.strategies import (
    admissible_right_operands, compact_layouts, complement_admissible, congruent, flat, layouts,
    settings_for,
)

SYMBOLIC = settings_for(60)
MULTIPLIERS = (1, 2, 3)


def _assert_same(got, want, what):
    assert la.size(got) == la.size(want), f"{what}: {got} vs {want}"
    for i in range(la.size(want)):
        assert got(i) == want(i), f"{what}: at {i}: {got(i)} != {want(i)} ({got} vs {want})"


def _value(expr, values):
    """An int, or a sympy expression in the symbols, at `values` (symbol name -> int)."""
    if isinstance(expr, int):
        return expr
    expr = sympy.sympify(expr)
    return int(expr.subs({s: values[s.name] for s in expr.free_symbols}))


# ---------------------------------------------------------------- worked cases that must be provable

M, N, K = la.symbol("M", 16), la.symbol("N", 32), la.symbol("K", 8)
VALUES = [{"M": 16, "N": 32, "K": 8}, {"M": 48, "N": 64, "K": 24}, {"M": 32, "N": 96, "K": 40}]

PROVABLE = {
    "coalesce column-major": (lambda L: la.coalesce(L), la.Layout((M, N), (1, M))),
    "composition row-major o 8:1": (lambda L: la.composition(L, la.Layout(8, 1)), la.Layout((M, N), (N, 1))),
    "composition with a tuple tiler": (lambda L: la.composition(L, (la.Layout(4, 2), 8)), la.Layout((M, N), (1, M))),
    "logical_divide by (16, 32)": (lambda L: la.logical_divide(L, (16, 32)), la.Layout((M, N), (1, M))),
    "zipped_divide by (16, 32)": (lambda L: la.zipped_divide(L, (16, 32)), la.Layout((M, N), (1, M))),
    "tiled_divide by (16, 32)": (lambda L: la.tiled_divide(L, (16, 32)), la.Layout((M, N, K), (1, M, M * N))),
    "flat_divide by a layout": (lambda L: la.flat_divide(L, la.Layout((4, 2), (1, 8))), la.Layout((M, N), (1, M))),
    "logical_product by a symbolic tiler": (lambda L: la.logical_product(la.Layout((4, 8)), L), la.Layout(K, 1)),
    "tile_to_shape to (M, N)": (lambda L: la.tile_to_shape(la.Layout((8, 8)), L.shape), la.Layout((M, N), (1, M))),
    "upcast by 2": (lambda L: la.upcast(L, 2), la.Layout((M, N), (1, M))),
    "downcast by 4": (lambda L: la.downcast(L, 4), la.Layout((M, N), (N, 1))),
    "filter with a broadcast": (lambda L: la.filter(L), la.Layout((M, 4, N), (1, 0, M))),
}


@pytest.mark.parametrize("name", sorted(PROVABLE))
def test_symbolic_op_then_subs_equals_op_on_the_substituted_layout(name):
    op, layout = PROVABLE[name]
    symbolic = op(layout)
    for values in VALUES:
        _assert_same(symbolic.subs(values), op(layout.subs(values)), f"{name} at {values}")


def test_symbolic_complement_with_a_symbolic_cotarget():
    C = la.complement(la.Layout((4, 2), (1, 8)), M)
    for values in VALUES:
        _assert_same(C.subs(values), la.complement(la.Layout((4, 2), (1, 8)), values["M"]), f"at {values}")


def test_symbolic_local_tile_offset_is_the_concrete_offset():
    A = la.Layout((M, N), (1, M))
    tile, offset = la.local_tile(A, (16, 32), (1, 1))
    for values in VALUES[1:]:  # those with at least two tiles along each mode
        c_tile, c_offset = la.local_tile(A.subs(values), (16, 32), (1, 1))
        assert _value(offset, values) == c_offset
        _assert_same(tile.subs(values), c_tile, f"local_tile at {values}")


def test_symbolic_coalesce_merges_exactly():
    C = la.coalesce(la.Layout((M, N), (1, M)))
    assert la.size(C) == la.size(la.Layout((M, N)))
    assert C.subs(VALUES[1]).shape == 48 * 64 and C.subs(VALUES[1]).stride == 1


@pytest.mark.parametrize("make, condition_symbol", [
    # K4 = 4, 8, 12, ...: "K4 and 8 divide one another" holds for 4 and 8 but not for 12.
    (lambda: la.composition(la.Layout((la.symbol("K4", 4), N), (N, 1)), la.Layout(8, 1)), "K4"),
    # P6 = 6, 12, ...: the 8x8 block divides P6 only sometimes.
    (lambda: la.tile_to_shape(la.Layout((8, 8)), (la.symbol("P6", 6), N)), "P6"),
    (lambda: la.upcast(la.Layout((8, 4), (1, la.symbol("D3", 3))), 2), "D3"),
])
def test_an_unprovable_condition_raises_layout_error_naming_it(make, condition_symbol):
    with pytest.raises(la.LayoutError) as info:
        make()
    assert condition_symbol in str(info.value), f"the error does not name the condition: {info.value}"


# ---------------------------------------------------------------- random symbolization

@st.composite
def symbolized(draw, pair):
    """`pair` with some shape leaves and positive strides replaced by symbols whose declared
    divisibility is the concrete value (so value * k, k >= 1, are the legal substitutions)."""
    shape, stride = pair
    names = {}

    def sym(v, kind, k):
        if v > 1 and draw(st.integers(0, 2)) == 0:
            name = f"{kind}{k}"
            names[name] = v
            return la.symbol(name, v)
        return v
    s_leaves = [sym(v, "S", k) for k, v in enumerate(flat(shape))]
    d_leaves = [sym(v, "D", k) for k, v in enumerate(flat(stride))]
    return la.Layout(congruent(shape, s_leaves), congruent(stride, d_leaves)), names


def _check_random(op, layout, names):
    try:
        symbolic = op(layout)
    except la.LayoutError as exc:
        # Allowed only as "not provable": the message names the op's condition.
        assert str(exc), "LayoutError without a message"
        event("symbolic op: not provable")
        return
    event("symbolic op: proved")
    for k in MULTIPLIERS:
        values = {n: v * k for n, v in names.items()}
        concrete = op(layout.subs(values))  # proven for every legal value, so it must succeed
        _assert_same(symbolic.subs(values), concrete, f"at {values}")


@SYMBOLIC
@given(layouts(max_size=64, max_depth=2), st.data())
def test_random_symbolic_coalesce_filter_composition(pair, data):
    layout, names = data.draw(symbolized(pair), label="symbolized")
    b = data.draw(admissible_right_operands(*pair, injective=True), label="B")
    _check_random(la.coalesce, layout, names)
    _check_random(la.filter, layout, names)
    _check_random(lambda L: la.composition(L, la.Layout(*b)), layout, names)
    _check_random(lambda L: la.logical_divide(L, la.Layout(*b)), layout, names)


@SYMBOLIC
@given(compact_layouts(max_size=32, max_depth=2), st.data())
def test_random_symbolic_complement_and_inverses(pair, data):
    layout, names = data.draw(symbolized(pair), label="symbolized")
    _check_random(lambda L: la.complement(L, 2 * 64), layout, names)
    # Inverses are not unique (a symbolic stride may hide a chain the concrete one has), and a
    # substitution may make the layout non-injective: check CuTe's posts (right inverse; left
    # quasi-inverse) on each substitution instead of equality.
    for inverse, holds in ((la.right_inverse, lambda L, R, i: L(R(i)) == i),
                           (la.left_inverse, lambda L, R, i: L(R(L(i))) == L(i))):
        try:
            R = inverse(layout)
        except la.LayoutError as exc:
            assert str(exc)
            continue
        for k in MULTIPLIERS:
            values = {n: v * k for n, v in names.items()}
            Lc, Rc = layout.subs(values), R.subs(values)
            if inverse is la.left_inverse and not complement_admissible(Lc.shape, Lc.stride):
                continue  # overlapping modes: CuTe's left inverse promises nothing there
            domain = la.size(Rc) if inverse is la.right_inverse else la.size(Lc)
            assert all(holds(Lc, Rc, i) for i in range(domain)), f"{inverse.__name__}: {R} at {values}"
