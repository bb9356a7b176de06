"""upcast, downcast, max_common_vector, max_common_layout."""
import pytest

from layoutkit.algebra import (Layout, LayoutError, downcast, max_common_layout,
                               max_common_vector, upcast)


def test_upcast_downcast():
    assert str(upcast(Layout((4, 8), (1, 4)), 2)) == "(2,8):(1,2)"
    assert str(downcast(Layout((4, 8), (1, 4)), 2)) == "(8,8):(1,8)"
    assert downcast(upcast(Layout((8, 8), (1, 16)), 4), 4) == Layout((8, 8), (1, 16))
    assert str(upcast(Layout((8, 4), (0, 1)), 2)) == "(8,2):(0,1)"


def test_cast_errors():
    with pytest.raises(LayoutError, match="divisibility"):
        upcast(Layout((4, 2), (1, 6)), 4)
    with pytest.raises(LayoutError, match="stride-1"):
        downcast(Layout((4, 2), (2, 8)), 2)
    with pytest.raises(LayoutError, match="positive int"):
        upcast(Layout(4), 0)


def test_max_common_vector_and_layout():
    a, b = Layout((4, 8), (1, 4)), Layout((4, 8), (1, 8))
    assert max_common_vector(a, b) == 4 and str(max_common_layout(a, b)) == "4:1"
    assert max_common_vector(a, a) == 32
    assert max_common_vector(Layout((4, 8), (8, 1)), a) == 1
    assert max_common_layout(Layout((4, 8), (8, 1)), a) == Layout(1, 0)
