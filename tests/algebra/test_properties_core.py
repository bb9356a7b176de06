"""Defining equations of layouts themselves, coalesce and filter, checked over whole domains."""
from __future__ import annotations

from hypothesis import given, strategies as st

import layoutkit.algebra as la
from tests.algebra.strategies import (
    assert_same_function, build, colex_coord, congruent, flat, layouts, settings_for, shapes, size_of,
    value_at,
)

CORE = settings_for(150)


def _depth(t):
    return 1 + max(_depth(m) for m in t) if isinstance(t, tuple) else 0


@CORE
@given(layouts())
def test_layout_is_inner_product_of_colex_coordinate_and_stride(pair):
    L = build(la, pair)
    assert L.shape == pair[0] and L.stride == pair[1]
    for i in range(size_of(pair[0])):
        want = value_at(*pair, i)
        assert L(i) == want
        assert L(colex_coord(i, pair[0])) == want
        assert la.crd2idx(colex_coord(i, pair[0]), *pair) == want
        if isinstance(pair[0], tuple) and len(pair[0]) >= 2:  # one argument is the whole coordinate
            assert L(*colex_coord(i, pair[0])) == want


@CORE
@given(layouts())
def test_size_cosize_rank_depth(pair):
    L = build(la, pair)
    shape, stride = pair
    assert la.size(L) == size_of(shape)
    assert la.cosize(L) == max(value_at(shape, stride, i) for i in range(size_of(shape))) + 1
    assert la.rank(L) == (len(shape) if isinstance(shape, tuple) else 1)
    assert la.depth(L) == _depth(shape)


@CORE
@given(layouts())
def test_mode_i_is_the_layout_of_shape_i_stride_i(pair):
    L = build(la, pair)
    shape, stride = pair
    if not isinstance(shape, tuple):
        return
    for i in range(len(shape)):
        assert L[i].shape == shape[i] and L[i].stride == stride[i]
        # L(c) is the sum of the modes' values at their coordinates.
    for i in range(size_of(shape)):
        crd = colex_coord(i, shape)
        assert L(i) == sum(L[k](crd[k]) for k in range(len(shape)))


@CORE
@given(layouts())
def test_flatten_keeps_the_function_and_has_depth_at_most_one(pair):
    L = build(la, pair)
    F = la.flatten(L)
    assert flat(F.shape) == flat(pair[0]) and flat(F.stride) == flat(pair[1])
    assert la.depth(F) <= 1
    assert_same_function(la, F, L, "flatten")


@CORE
@given(shapes())
def test_idx2crd_inverts_crd2idx_on_the_column_major_layout(shape):
    col_major = la.make_layout(shape)
    for i in range(size_of(shape)):
        crd = la.idx2crd(i, shape)
        assert crd == colex_coord(i, shape)
        assert la.crd2idx(crd, shape) == i
        assert col_major(i) == i


@CORE
@given(layouts())
def test_coalesce_keeps_the_function_on_the_domain(pair):
    L = build(la, pair)
    C = la.coalesce(L)
    assert la.depth(C) <= 1
    assert_same_function(la, C, L, "coalesce")
    # No two adjacent modes of the result could be merged, and no size-1 mode is left (unless all).
    cs, cd = flat(C.shape), flat(C.stride)
    assert all(s != 1 for s in cs) or cs == (1,)
    assert all(cs[k] * cd[k] != cd[k + 1] for k in range(len(cs) - 1))


@CORE
@given(layouts(max_depth=2), st.data())
def test_coalesce_by_mode_keeps_the_profile_rank(pair, data):
    L = build(la, pair)
    if not isinstance(pair[0], tuple):
        return
    r = len(pair[0])
    k = data.draw(st.integers(1, r), label="profile length")
    C = la.coalesce(L, (1,) * k)
    assert la.rank(C) == r
    for i in range(r):
        if i < k:
            assert la.depth(C[i]) <= 1
            assert_same_function(la, C[i], L[i], f"coalesce by-mode, mode {i}")
        else:
            assert C[i].shape == pair[0][i] and C[i].stride == pair[1][i]
    assert_same_function(la, C, L, "coalesce by-mode")


@CORE
@given(layouts())
def test_filter_is_the_function_of_the_nonzero_stride_modes(pair):
    L = build(la, pair)
    kept = [(s, d) for s, d in zip(flat(pair[0]), flat(pair[1])) if s != 1 and d != 0]
    Fl = la.filter(L)
    if not kept:
        assert la.size(Fl) == 1 and Fl(0) == 0
        return
    shape, stride = tuple(s for s, _ in kept), tuple(d for _, d in kept)
    assert la.size(Fl) == size_of(shape)
    for i in range(size_of(shape)):
        assert Fl(i) == value_at(shape, stride, i)
    # Same image as L, without the repeats that stride-0 modes make.
    assert {Fl(i) for i in range(la.size(Fl))} == {L(i) for i in range(la.size(L))}


@CORE
@given(layouts(max_depth=2), st.data())
def test_filter_by_mode_filters_each_mode(pair, data):
    L = build(la, pair)
    if not isinstance(pair[0], tuple):
        return
    r = len(pair[0])
    Fl = la.filter(L, (1,) * r)
    assert la.rank(Fl) == r
    for i in range(r):
        assert_same_function(la, Fl[i], la.filter(L[i]), f"filter by-mode, mode {i}")


@CORE
@given(shapes(), st.data())
def test_make_layout_defaults_to_column_major(shape, data):
    L = la.make_layout(shape)
    assert L.shape == shape
    # Size-1 leaves may get stride 0 (C++ compact_major does so for static 1s) or the running one.
    run = 1
    for s, d in zip(flat(shape), flat(L.stride)):
        assert d == run or (s == 1 and d == 0), f"make_layout({shape}) = {L} is not column-major"
        run *= s
    assert congruent(shape, flat(L.stride)) == L.stride
