"""right_inverse and left_inverse."""
import pytest

from layoutkit.algebra import Layout, LayoutError, left_inverse, right_inverse, size

from ._brute import some_layouts, values


def test_worked_examples():
    assert str(right_inverse(Layout((4, 2), (2, 1)))) == "(2,4):(4,1)"
    assert str(right_inverse(Layout(4, 2))) == "1:0"
    assert str(left_inverse(Layout((4, 2), (2, 16)))) == "(2,8,2):(0,1,4)"


def test_right_inverse_skips_a_stride0_mode_like_cpp():
    # pycute stops at the first stride that does not chain (here 0) and returns 1:0.
    assert right_inverse(Layout((2, 4), (0, 1))) == Layout(4, 2)


def test_defining_equations_over_a_family():
    for A in some_layouts():
        R = right_inverse(A)
        assert [A(R(i)) for i in range(size(R))] == list(range(size(R)))
        img = values(A)
        if len(set(img)) == len(img):
            try:
                L = left_inverse(A)
            except LayoutError:
                continue
            assert [L(v) for v in img] == list(range(size(A)))


def test_compact_layouts_have_full_inverses():
    A = Layout(((2, 4), 8), ((4, 1), 8))
    R = right_inverse(A)
    assert size(R) == size(A)
    assert [R(A(i)) for i in range(size(A))] == list(range(size(A)))


def test_left_inverse_divisibility_condition():
    with pytest.raises(LayoutError, match="divisibility"):
        left_inverse(Layout((6, 2), (12, 8)))
