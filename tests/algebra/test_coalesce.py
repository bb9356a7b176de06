"""coalesce and filter."""
from layoutkit.algebra import Layout, coalesce, filter

from ._brute import some_layouts, values


def test_worked_examples():
    A = Layout((2, (1, 6)), (1, (6, 2)))
    assert str(coalesce(A)) == "12:1"
    assert str(coalesce(A, (1, 1))) == "(2,6):(1,2)"
    assert str(coalesce(Layout((4, 1), (1, 0)))) == "4:1"
    assert str(coalesce(Layout((1, 1), (3, 5)))) == "1:0"
    assert str(filter(Layout((4, 2, 3), (1, 0, 4)))) == "12:1"
    assert str(filter(Layout((4, 2), (0, 0)))) == "1:0"


def test_profile_keeps_modes_beyond_it():
    A = Layout(((2, 2), (2, 2), 3), ((1, 2), (4, 8), 16))
    assert coalesce(A, (1,)) == Layout((4, (2, 2), 3), (1, (4, 8), 16))
    assert filter(Layout((4, (2, 2)), (0, (1, 2))), (1,)) == Layout((1, (2, 2)), (0, (1, 2)))


def test_same_function_over_a_family():
    for A in some_layouts():
        assert values(coalesce(A)) == values(A)
        assert sorted(set(values(filter(A)))) == sorted(set(values(A)))
