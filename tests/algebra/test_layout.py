"""Layout: construction, calling, modes, printing, value semantics, errors."""
import pytest

from layoutkit.algebra import (Layout, LayoutError, cosize, crd2idx, depth, flatten, idx2crd,
                               make_layout, rank, size)


def test_make_layout_column_major_and_cute_size1_stride0():
    assert make_layout((4, 3)) == Layout((4, 3), (1, 4))
    assert make_layout(((2, 2), 3)).stride == ((1, 2), 4)
    assert make_layout((4, 1, 2)).stride == (1, 0, 4)  # C++ compact_major; pycute gives (1,4,4)
    assert make_layout(1) == Layout(1, 0)


def test_make_layout_concatenates_layouts():
    L = make_layout(Layout(4, 2), Layout((2, 2), (1, 8)))
    assert str(L) == "(4,(2,2)):(2,(1,8))"
    assert make_layout(Layout(4, 1)) == Layout((4,), (1,))


def test_call_by_index_coordinates_and_tuple():
    L = Layout((4, (2, 3)), (2, (1, 8)))
    assert L(0) == 0 and L(1) == 2 and L(4) == 1
    assert L(1, (1, 2)) == 2 + 1 + 16
    assert L((1, (1, 2))) == L(1, (1, 2))
    assert L(1, 5) == L(1, (1, 2))  # int coordinate into a nested mode
    assert [L(i) for i in range(size(L))] == [L(idx2crd(i, L.shape)) for i in range(24)]


def test_slicing_with_none():
    L = Layout((4, 2), (2, 1))
    assert L(None, 1) == Layout((4,), (2,))
    sub, off = L.slice_and_offset((None, 1))
    assert sub == Layout((4,), (2,)) and off == 1


def test_modes_len_rank_depth_size_cosize():
    L = Layout(((2, 2), 4), ((1, 4), 2))
    assert len(L) == rank(L) == 2 and depth(L) == 2
    assert L[0] == Layout((2, 2), (1, 4)) and L[1] == Layout(4, 2)
    assert list(L) == [L[0], L[1]]
    assert size(L) == 16 and cosize(L) == 1 + 1 + 4 + 6
    assert flatten(L) == Layout((2, 2, 4), (1, 4, 2))
    assert rank(Layout(5)) == 1 and depth(Layout(5)) == 0
    assert cosize(Layout(4, -2)) == 7  # C++: span of |stride|


def test_str_repr_hash_eq():
    L = Layout(((2, 2), 4), ((1, 4), 2))
    assert str(L) == "((2,2),4):((1,4),2)"
    assert repr(Layout((4, 2), (2, 1))) == "Layout((4, 2), (2, 1))"
    assert str(Layout((8,), (1,))) == "(8):(1)"
    assert Layout((4, 2), (2, 1)) == Layout([4, 2], [2, 1])
    assert len({Layout((4, 2), (2, 1)), Layout((4, 2), (2, 1)), Layout(4, 2)}) == 2
    assert Layout(4, 1) != Layout((4,), (1,))
    with pytest.raises(AttributeError):
        L.shape = 3


def test_crd2idx_with_layout():
    L = Layout((4, 3), (3, 1))
    assert crd2idx((1, 2), L) == 5 == crd2idx((1, 2), (4, 3), (3, 1))
    assert idx2crd(5, L) == (1, 1)


@pytest.mark.parametrize("shape, stride, match", [
    ((4, 0), None, r"Layout: shape\[1\] = 0 \(in shape = \(4, 0\)\): must be a positive integer"),
    ((4, 2), (1,), "not congruent"),
    ((4, 2), (1, (2, 3)), "not congruent"),
    ((4, "a"), None, r"shape\[1\] = 'a' .*: must be an integer, not a string"),
    ((4, True), None, r"shape\[1\] = True .*: must be an integer, not a bool"),
])
def test_bad_layouts_raise(shape, stride, match):
    with pytest.raises(LayoutError, match=match):
        Layout(shape, stride)


def test_bad_calls_raise():
    L = Layout((4, 2))
    with pytest.raises(LayoutError, match=r"calling \(4,2\):\(1,4\): coord = -1: must be >= 0"):
        L(-1)
    with pytest.raises(LayoutError, match="does not match"):
        L((1, 2, 3))
    with pytest.raises(LayoutError, match="does not exist"):
        L[2]
    with pytest.raises(LayoutError, match="needs an index"):
        L()
