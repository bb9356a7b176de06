"""Defining equations of the divides, the products, tile_to_shape, local_tile and local_partition.

Each op is checked against its CuTe definition in terms of composition and complement (as
functions over the whole domain), and the regrouping variants against the logical op's modes.
"""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, strategies as st

import layoutkit.algebra as la
from tests.algebra.strategies import (
    admissible_right_operands, assert_same_function, build, by_mode_tilers, compact_layouts, concat,
    layouts, settings_for, shapes, size_of, top_modes,
)

PROPS = settings_for(120)


def _outcome(fn):
    try:
        return fn()
    except la.LayoutError:
        return None


def _tiler_layout(t):
    return la.Layout(t, 1) if isinstance(t, int) else build(la, t)


@PROPS
@given(layouts(max_size=128), st.data())
def test_logical_divide_is_composition_with_tiler_and_its_complement(a_pair, data):
    A = build(la, a_pair)
    B = build(la, data.draw(admissible_right_operands(*a_pair, injective=True), label="B"))
    D = la.logical_divide(A, B)
    want = la.composition(A, concat(la, B, la.complement(B, la.size(A))))
    assert la.rank(D) == 2
    assert_same_function(la, D, want, f"logical_divide({A}, {B})")
    assert_same_function(la, D[0], la.composition(A, B), "the tile mode")


@PROPS
@given(layouts(max_size=128, max_depth=2), st.data())
def test_logical_divide_by_a_tuple_tiler_divides_each_mode_and_keeps_the_rest(a_pair, data):
    A = build(la, a_pair)
    tiler = data.draw(by_mode_tilers(*a_pair), label="tiler")
    D = la.logical_divide(A, tuple(_tiler_layout(t) for t in tiler))
    a_modes = top_modes(la, A)
    assert la.rank(D) == len(a_modes)
    for i, Ai in enumerate(a_modes):
        want = la.logical_divide(Ai, _tiler_layout(tiler[i])) if i < len(tiler) else Ai
        assert_same_function(la, top_modes(la, D)[i], want, f"mode {i}")


def _check_regroupings(op, logical, A, tiler):
    """zipped/tiled/flat variants of `logical`: ((tiles),(rests, extra modes)) and unpackings."""
    L = logical(A, tiler)
    zipped = getattr(la, f"zipped_{op}")(A, tiler)
    tiled = getattr(la, f"tiled_{op}")(A, tiler)
    if not isinstance(tiler, tuple):
        assert_same_function(la, zipped, L, f"zipped_{op}")
        tiles, rests = [L[0]], top_modes(la, L[1])
    else:
        k = len(tiler)
        l_modes = top_modes(la, L)
        tiles = [l_modes[i][0] for i in range(k)]
        rests = [l_modes[i][1] for i in range(k)] + l_modes[k:]
        assert la.rank(zipped) == 2
        for i, T in enumerate(tiles):
            assert_same_function(la, top_modes(la, zipped[0])[i], T, f"zipped_{op} tile {i}")
        for i, Rm in enumerate(rests):
            assert_same_function(la, top_modes(la, zipped[1])[i], Rm, f"zipped_{op} rest {i}")
    t_modes = top_modes(la, tiled)
    assert len(t_modes) == 1 + len(rests)
    for i, Rm in enumerate(rests):
        assert_same_function(la, t_modes[1 + i], Rm, f"tiled_{op} rest {i}")
    return tiles, rests


@PROPS
@given(layouts(max_size=128, max_depth=2), st.data())
def test_zipped_tiled_flat_divide_regroup_logical_divide(a_pair, data):
    A = build(la, a_pair)
    if data.draw(st.booleans(), label="tuple tiler"):
        tiler = tuple(_tiler_layout(t) for t in data.draw(by_mode_tilers(*a_pair), label="tiler"))
    else:
        tiler = build(la, data.draw(admissible_right_operands(*a_pair, injective=True), label="B"))
    tiles, rests = _check_regroupings("divide", la.logical_divide, A, tiler)
    flat_d = top_modes(la, la.flat_divide(A, tiler))
    expect = ([m for T in tiles for m in top_modes(la, T)] if not isinstance(tiler, tuple) else tiles) + rests
    assert len(flat_d) == len(expect)
    for i, (got, want) in enumerate(zip(flat_d, expect)):
        assert_same_function(la, got, want, f"flat_divide mode {i}")


def _product_case(data):
    block = build(la, data.draw(compact_layouts(max_size=16, max_depth=2), label="block"))
    tiler = build(la, data.draw(compact_layouts(gaps=False, max_size=12, max_depth=2), label="tiler"))
    return block, tiler


@PROPS
@given(st.data())
def test_logical_product_is_block_and_complement_composed_with_tiler(data):
    A, B = _product_case(data)
    got = _outcome(lambda: la.logical_product(A, B))
    want = _outcome(lambda: concat(la, A, la.composition(la.complement(A, la.size(A) * la.cosize(B)), B)))
    assert (got is None) == (want is None), f"logical_product({A}, {B}): {got} vs definition {want}"
    if got is not None:
        assert_same_function(la, got, want, f"logical_product({A}, {B})")
        assert_same_function(la, got[0], A, "block mode")
    # A compact block (no gaps) has a one-mode complement: every tiler is admissible.
    if la.cosize(A) == la.size(A):
        assert got is not None


@PROPS
@given(st.data())
def test_zipped_and_tiled_product_regroup_logical_product(data):
    A, B = _product_case(data)
    if isinstance(A.shape, tuple) and isinstance(B.shape, tuple) and data.draw(st.booleans()):
        k = min(la.rank(A), la.rank(B))
        tiler = tuple(B[i] for i in range(k))
    else:
        tiler = B
    if _outcome(lambda: la.logical_product(A, tiler)) is None:
        return
    _check_regroupings("product", la.logical_product, A, tiler)


def _padded(layout, r):
    ms = top_modes(la, layout)
    return concat(la, *(ms + [la.Layout(1, 0)] * (r - len(ms))))


@PROPS
@given(st.data(), st.sampled_from(["blocked", "raked"]))
def test_blocked_and_raked_products_zip_the_logical_product(data, kind):
    A, B = _product_case(data)
    r = max(la.rank(A), la.rank(B))
    lp = _outcome(lambda: la.logical_product(_padded(A, r), _padded(B, r)))
    got = _outcome(lambda: getattr(la, f"{kind}_product")(A, B))
    assert (got is None) == (lp is None)
    if got is None:
        return
    assert la.rank(got) == r
    blocks, reps = top_modes(la, lp[0]), top_modes(la, lp[1])
    for i, Gi in enumerate(top_modes(la, got)):
        inner, outer = (blocks[i], reps[i]) if kind == "blocked" else (reps[i], blocks[i])
        assert_same_function(la, Gi[0], inner, f"{kind}_product mode {i} inner")
        assert_same_function(la, Gi[1], outer, f"{kind}_product mode {i} outer")
    assert Counter(values_of(got)) == Counter(values_of(lp))


def values_of(L):
    return [L(i) for i in range(la.size(L))]


@PROPS
@given(compact_layouts(gaps=False, max_size=16, max_depth=2), st.data())
def test_tile_to_shape_is_a_blocked_product_reaching_the_target(b_pair, data):
    block = build(la, b_pair)
    bm = top_modes(la, block)
    r = data.draw(st.integers(len(bm), 3), label="target rank")
    blk = [la.size(m) for m in bm] + [1] * (r - len(bm))
    reps = data.draw(st.lists(st.integers(1, 3), min_size=r, max_size=r), label="repeats")
    target = tuple(b * k for b, k in zip(blk, reps))
    order = data.draw(st.one_of(st.none(), st.permutations(range(r)).map(tuple)), label="order")
    T = la.tile_to_shape(block, target, order) if order is not None else la.tile_to_shape(block, target)
    assert tuple(la.size(m) for m in top_modes(la, T)) == target
    strides, run = [0] * r, 1
    for k in sorted(range(r), key=lambda k: (order[k] if order else k, k)):
        strides[k], run = run, run * reps[k]
    want = la.blocked_product(_padded(block, r), la.Layout(tuple(reps), tuple(strides)))
    assert_same_function(la, T, want, f"tile_to_shape({block}, {target}, {order})")


def test_tile_to_shape_rejects_a_target_the_block_does_not_divide():
    with pytest.raises(la.LayoutError):
        la.tile_to_shape(la.Layout((2, 3)), (4, 8))


@st.composite
def tiled_2d(draw):
    """A rank-2 layout whose extents are multiples of a drawn tile (t0, t1)."""
    t = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    shape = (t[0] * k[0], t[1] * k[1])
    order = draw(st.sampled_from([(0, 1), (1, 0)]))
    stride = (1, shape[0]) if order == (0, 1) else (shape[1], 1)
    return shape, stride, t


@PROPS
@given(tiled_2d(), st.data())
def test_local_tile_is_the_tile_at_coord_of_zipped_divide(case, data):
    shape, stride, t = case
    L = la.Layout(shape, stride)
    Z = la.zipped_divide(L, t)
    rest = (shape[0] // t[0], shape[1] // t[1])
    seen = Counter()
    for c1 in range(rest[1]):
        for c0 in range(rest[0]):
            tile, offset = la.local_tile(L, t, (c0, c1))
            assert la.size(tile) == t[0] * t[1]
            for j in range(la.size(tile)):
                assert tile(j) + offset == Z[0](j) + Z[1]((c0, c1))
                seen[tile(j) + offset] += 1
    assert seen == Counter(values_of(L))


@PROPS
@given(tiled_2d(), st.data())
def test_local_partition_is_each_threads_slice_of_zipped_divide(case, data):
    shape, stride, t = case
    L = la.Layout(shape, stride)
    thr = la.Layout(t, data.draw(st.sampled_from([(1, t[0]), (t[1], 1)]), label="thread order"))
    Z = la.zipped_divide(L, t)
    seen = Counter()
    for index in range(la.size(thr)):
        part, offset = la.local_partition(L, thr, index)
        # CuTe's get_flat_coord: the thread's coordinate in thr, by thr's strides.
        crd = tuple((index // d) % s for s, d in zip(thr.shape, thr.stride))
        assert thr(crd) == index
        for j in range(la.size(part)):
            assert part(j) + offset == Z[0](crd) + Z[1](j)
            seen[part(j) + offset] += 1
    assert seen == Counter(values_of(L))
