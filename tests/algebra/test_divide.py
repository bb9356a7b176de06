"""The divides: worked examples, tile/rest structure, short tilers, non-tiling divides."""
import pytest

from layoutkit.algebra import (Layout, LayoutError, flat_divide, logical_divide, size,
                               tiled_divide, zipped_divide)

from ._brute import values


def test_worked_examples():
    assert str(logical_divide(Layout((4, 2, 3), (2, 1, 8)), Layout(4, 2))) == "((2,2),(2,3)):((4,1),(2,8))"
    A = Layout((9, (4, 8)), (59, (13, 1)))
    tiler = (Layout(3, 3), Layout((2, 4), (1, 8)))
    assert str(logical_divide(A, tiler)) == "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
    assert str(zipped_divide(A, tiler)) == "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
    assert str(tiled_divide(A, tiler)) == "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
    assert str(flat_divide(A, tiler)) == "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"


def test_logical_divide_is_a_permutation_of_the_layout():
    A = Layout((8, 6), (6, 1))
    D = logical_divide(A, (4, 3))
    assert sorted(values(D)) == sorted(values(A))
    Z = zipped_divide(A, (4, 3))
    tile = Z[0]
    assert size(tile) == 12 and sorted(tile(i) for i in range(12)) == sorted(A(r, c) for r in range(4) for c in range(3))


def test_short_tiler_keeps_the_other_modes():
    A = Layout((8, 6, 5))
    assert logical_divide(A, (4,)) == Layout(((4, 2), 6, 5), ((1, 4), 8, 48))
    assert zipped_divide(A, (4,)) == Layout(((4,), (2, 6, 5)), ((1,), (4, 8, 48)))


def test_non_dividing_tile_extends_with_a_residue_like_cpp():
    # 100 by 32: ceil(100/32) = 4 tiles, the last partly outside (predicated in a kernel).
    assert logical_divide(Layout(100, 1), 32) == Layout((32, 4), (1, 32))


def test_divide_that_does_not_tile_raises():
    with pytest.raises(LayoutError, match="divisibility"):
        logical_divide(Layout((10, 10), (1, 20)), 32)
    with pytest.raises(LayoutError, match="None"):
        zipped_divide(Layout((8, 8)), (None, 4))
