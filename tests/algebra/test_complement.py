"""complement: worked examples, its defining properties, and the undefined cases."""
import pytest

from layoutkit.algebra import Layout, LayoutError, complement, filter, size

from ._brute import some_layouts, values


@pytest.mark.parametrize("A, cotarget, expected", [
    (Layout(4, 1), 24, "6:4"),
    (Layout(6, 4), 24, "4:1"),
    (Layout((4, 6), (1, 4)), 24, "1:0"),
    (Layout(4, 2), 24, "(2,3):(1,8)"),
    (Layout((2, 4), (1, 6)), 48, "(3,2):(2,24)"),
    (Layout((2, 2), (1, 6)), 24, "(3,2):(2,12)"),
])
def test_worked_examples(A, cotarget, expected):
    assert str(complement(A, cotarget)) == expected


def test_defining_properties_over_a_family():
    checked = 0
    for A in some_layouts():
        for cot in (size(A), 2 * size(A) + 1):
            try:
                C = complement(A, cot)
            except LayoutError:
                continue
            image = set(values(A))
            cs = values(C)
            assert all(a < b for a, b in zip(cs, cs[1:]))
            assert not image & set(cs[1:])
            assert size(filter(A)) * size(C) >= cot
            checked += 1
    assert checked > 30


def test_default_cotarget_is_cosize_of_filter():
    assert complement(Layout((2, 2), (1, 4))) == Layout(2, 2)
    assert complement(Layout(4, 0), 8) == Layout(8, 1)


def test_tuple_cotarget_is_divided_mode_by_mode_like_cpp():
    # ceil_div((3,4), 2) = (2,4): 8 elements, where the int cotarget 12 would give 6.
    assert complement(Layout(2, 1), (3, 4)) == Layout(8, 2)
    assert complement(Layout(2, 1), 12) == Layout(6, 2)


@pytest.mark.parametrize("A, match", [
    (Layout((2, 2), (1, 1)), "not injective"),
    (Layout((4, 2), (1, 2)), "not injective"),
    (Layout((2, 2), (1, 3)), "multiple of the extent"),
    (Layout(4, -1), "nonnegative"),
])
def test_undefined_raises(A, match):
    with pytest.raises(LayoutError, match=match):
        complement(A, 16)
