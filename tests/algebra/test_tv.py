"""make_layout_tv."""
import pytest

from layoutkit.algebra import Layout, LayoutError, make_layout_tv, size


def test_cute_dsl_example():
    tiler, tv = make_layout_tv(Layout((2, 3), (3, 1)), Layout((2, 2), (2, 1)))
    assert tiler == (4, 6) and str(tv) == "((3,2),(2,2)):((8,2),(4,1))"


def test_tv_layout_is_a_bijection_onto_the_tile():
    thr, val = Layout((32, 4), (4, 1)), Layout((1, 8))
    tiler, tv = make_layout_tv(thr, val)
    assert tiler == (32, 32)
    assert sorted(tv(t, v) for t in range(128) for v in range(8)) == list(range(32 * 32))
    assert size(tv) == 1024


def test_non_layout_raises():
    with pytest.raises(LayoutError, match="thr_layout"):
        make_layout_tv((2, 2), Layout((2, 1)))
