"""Swizzle and ComposedLayout."""
import pytest
from hypothesis import assume, given, settings, strategies as st

from layoutkit.algebra import (ComposedLayout, Layout, LayoutError, Swizzle, composition, cosize,
                               logical_divide, size, zipped_divide)

from .strategies import compact_layouts


def test_swizzle_function_and_value_semantics():
    sw = Swizzle(3, 4, 3)
    assert str(sw) == "Sw<3,4,3>" and repr(sw) == "Swizzle(3, 4, 3)"
    assert sw(0b1000_0000) == 0b1001_0000 and sw(0b1001_0000) == 0b1000_0000
    assert all(sw(sw(i)) == i for i in range(1024))
    assert sorted(sw(i) for i in range(1024)) == list(range(1024))
    assert hash(sw) == hash(Swizzle(3, 4, 3)) and sw != Swizzle(3, 4, 4)
    assert Swizzle(2, 0, -3)(0b1100000) == 0b1100000 ^ 0b0000 and Swizzle(1, 0, -2)(1) == 0b101


@pytest.mark.parametrize("args, match", [((-1, 0, 3), ">= 0"), ((3, 4, 2), "shift"), ((1.5, 0, 2), "int")])
def test_bad_swizzles(args, match):
    with pytest.raises(LayoutError, match=match):
        Swizzle(*args)


def test_composed_layout_is_a_layout():
    S = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1)))
    assert str(S) == "Sw<3,3,3> o 0 o (8,64):(64,1)"
    assert S.shape == (8, 64) and size(S) == 512 and len(S) == 2
    assert S(1, 8) == Swizzle(3, 3, 3)(72)
    assert cosize(S) == 512
    T = composition(S, (4, 16))
    assert isinstance(T, ComposedLayout) and [T(i, j) for i in range(4) for j in range(16)] == \
        [S(i, j) for i in range(4) for j in range(16)]
    Z = zipped_divide(S, (4, 16))
    assert Z(5, 3) == S(logical_divide(Layout((8, 64), (64, 1)), (4, 16))((5 % 4, 5 // 4), (3 % 2, 3 // 2)) // 64,
                        logical_divide(Layout((8, 64), (64, 1)), (4, 16))((5 % 4, 5 // 4), (3 % 2, 3 // 2)) % 64)
    assert hash(S) == hash(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1))))


def test_composed_cosize_counts_offset_and_swizzle():
    assert cosize(ComposedLayout(Swizzle(1, 0, 3), 0, Layout(9, 1))) == 10
    assert cosize(ComposedLayout(Layout(8, 2), 3, Layout(4, 1))) == 2 * 6 + 1


@settings(max_examples=300, deadline=None)
@given(compact_layouts(gaps=False, extras=False, max_size=512), compact_layouts(max_size=256),
       st.integers(0, 3), st.integers(0, 4), st.integers(-6, 6), st.integers(0, 300),
       st.booleans())
def test_composed_cosize_closed_form_is_the_enumerated_value(compact, gapped, bits, base,
                                                             shift, offset, use_compact):
    # a compact inner takes the closed form (at most one swizzle block enumerated), a layout
    # with gaps the enumeration: both must equal 1 + the largest index over the domain
    assume(abs(shift) >= bits)
    shape, stride = compact if use_compact else gapped
    S = ComposedLayout(Swizzle(bits, base, shift), offset, Layout(shape, stride))
    assert cosize(S) == 1 + max(S(i) for i in range(size(S)))


def test_composed_cosize_of_a_large_swizzled_tile_needs_no_enumeration():
    # 64 rows x 128 bf16 x 8 stages: 65536 elements; the closed form swizzles one block (1024)
    S = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((64, (64, 2), 8), (64, (1, 4096), 8192)))
    assert cosize(S) == 65536
    # offset 8: the last block holds 4096..4103 alone, whose swizzle bits (6-8) are 0
    assert cosize(ComposedLayout(Swizzle(3, 3, 3), 8, Layout((64, 64), (64, 1)))) == 4104


def test_composed_errors():
    S = ComposedLayout(Swizzle(1, 0, 2), 0, Layout(8))
    with pytest.raises(LayoutError, match="ComposedLayout"):
        composition(Layout(8), S)
    with pytest.raises(LayoutError, match="outer"):
        ComposedLayout(3, 0, Layout(8))
