"""The products and tile_to_shape."""
import pytest

from layoutkit.algebra import (Layout, LayoutError, blocked_product, flat_product, logical_product,
                               raked_product, size, tile_to_shape, tiled_product, zipped_product)

from ._brute import values


def test_worked_examples():
    assert str(logical_product(Layout((2, 2), (4, 1)), Layout(6, 1))) == "((2,2),(2,3)):((4,1),(2,8))"
    block, tiler = Layout((2, 5), (5, 1)), Layout((3, 4), (1, 3))
    assert str(blocked_product(block, tiler)) == "((2,3),(5,4)):((5,10),(1,30))"
    assert str(raked_product(block, tiler)) == "((3,2),(4,5)):((10,5),(30,1))"
    assert str(logical_product(block, tiler)) == "((2,5),(3,4)):((5,1),(10,30))"


def test_product_of_compact_layouts_is_a_bijection():
    for block, tiler in [(Layout((2, 2), (1, 2)), Layout((2, 3))), (Layout(4, 2), Layout(2))]:
        P = logical_product(block, tiler)
        assert size(P) == size(block) * size(tiler)
        assert len(set(values(P))) == size(P)


def test_int_tiler_is_a_product_not_a_divide():
    # pycute's logical_product(A, int) calls logical_divide; C++ (and we) multiply.
    assert logical_product(Layout(4, 1), 3) == Layout((4, 3), (1, 4))


def test_zipped_tiled_flat_product():
    block, tiler = Layout((2, 2)), (Layout(3), Layout(2))
    # by mode: each mode of the block is reproduced in its own codomain (2:1 x3, 2:2 x2)
    assert str(zipped_product(block, tiler)) == "((2,2),(3,2)):((1,2),(2,1))"
    assert str(tiled_product(block, tiler)) == "((2,2),3,2):((1,2),2,1)"
    assert str(flat_product(block, tiler)) == "(2,2,3,2):(1,2,2,1)"


def test_rank_mismatch_pads_with_size1_modes():
    assert str(blocked_product(Layout((2,), (1,)), Layout(3, 1))) == "((2,3)):((1,2))"
    assert str(blocked_product(Layout(4, 1), Layout((2, 3)))) == "((4,2),(1,3)):((1,4),(0,8))"


def test_tile_to_shape():
    assert str(tile_to_shape(Layout((2, 2), (1, 2)), (4, 6))) == "((2,2),(2,3)):((1,4),(2,8))"
    assert str(tile_to_shape(Layout((2, 2), (1, 2)), (4, 6), (1, 0))) == "((2,2),(2,3)):((1,12),(2,4))"
    with pytest.raises(LayoutError, match="divides target extent"):
        tile_to_shape(Layout((4, 4)), (6, 8))
    with pytest.raises(LayoutError, match="rank"):
        tile_to_shape(Layout((2, 2, 2)), (4, 4))
