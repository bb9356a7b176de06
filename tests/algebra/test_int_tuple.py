"""int_tuple: the nested-tuple arithmetic, and that plain ints never reach sympy."""
import pytest

from layoutkit.algebra import LayoutError, symbolic
from layoutkit.algebra import int_tuple as it


def test_flatten_product_prefix():
    assert it.flatten(((2, 3), 4, (5, (6,)))) == (2, 3, 4, 5, 6)
    assert it.flatten(7) == (7,)
    assert it.product(((2, 3), 4)) == 24
    assert it.product(()) == 1
    assert it.prefix_product(((2, 3), 4)) == ((1, 2), 6)
    assert it.compact_col_major((4, 1, (2, 1))) == (1, 0, (4, 0))


def test_ceil_div_and_shape_div_follow_cute():
    assert it.ceil_div((4, 5, 6), 40) == (1, 1, 3)
    assert it.ceil_div((3, 4), 2) == (2, 4)
    assert it.ceil_div((8, 6), (4,)) == (2, 6)
    assert it.shape_div((4, 5, 6), 40) == (1, 1, 3)
    with pytest.raises(LayoutError, match="divides"):
        it.shape_div(6, 4)


def test_crd2idx_idx2crd_roundtrip():
    shape = ((2, 3), 4)
    for i in range(24):
        assert it.crd2idx(it.idx2crd(i, shape), shape) == i
    assert it.crd2idx((1, 2), (4, 3), (3, 1)) == 5
    assert it.idx2crd(17, (2, 16), (16, 1)) == (1, 1)
    with pytest.raises(LayoutError, match="does not match"):
        it.crd2idx((1, 2, 3), (4, 3))
    with pytest.raises(LayoutError, match="stride 0"):
        it.idx2crd(3, (4, 2), (0, 1))


def test_congruent():
    assert it.congruent((1, (2, 3)), (4, (5, 6)))
    assert not it.congruent((1, (2, 3)), (4, 5))
    assert not it.congruent(1, (1,))


def test_integer_ops_never_touch_sympy(monkeypatch):
    """The integer fast path: every sympy-facing entry point raises, the algebra still works."""
    import layoutkit.algebra as alg

    def boom(*a, **k):
        raise AssertionError("sympy path entered for plain ints")
    for name in ("norm", "divides", "le", "lt", "eq", "require", "display", "ceil_div",
                 "exact_div", "substitute", "is_symbolic", "hidden_symbols", "expand"):
        monkeypatch.setattr(symbolic, name, boom)
    A = alg.Layout(((4, 2), (2, 8)), ((1, 64), (4, 512)))
    alg.composition(A, alg.Layout((16, 8), (2, 64)))
    alg.complement(A, 65536)
    alg.logical_divide(alg.Layout((128, 64), (64, 1)), (16, 8))
    alg.logical_product(alg.Layout((4, 8), (8, 1)), alg.Layout((2, 4)))
    alg.right_inverse(A), alg.left_inverse(A), alg.coalesce(A), alg.filter(A)
    alg.blocked_product(alg.Layout((2, 2)), alg.Layout((2, 3))), alg.tile_to_shape(alg.Layout(4), (16,))
    alg.make_layout_tv(alg.Layout((32, 4), (4, 1)), alg.Layout((1, 8)))
    alg.upcast(A, 2), alg.downcast(A, 2), alg.max_common_vector(A, A)
    str(A), repr(A), hash(A), A(5), A((1, 1), (1, 3))
