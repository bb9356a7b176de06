"""composition: CuTe's worked examples, the defining equation, tilers, and the inadmissible cases."""
import pytest

from layoutkit.algebra import Layout, LayoutError, composition, logical_divide, size

from ._brute import some_layouts, values


@pytest.mark.parametrize("A, B, expected", [
    (Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1)), "((2,2),3):((24,2),8)"),  # 02_layout_algebra.md
    (Layout(20, 2), Layout((5, 4), (4, 1)), "(5,4):(8,2)"),
    (Layout((10, 2), (16, 4)), Layout((5, 4), (1, 5)), "(5,(2,2)):(16,(80,4))"),
    (Layout((3, 6, 2, 8), (2, 7, 50, 300)), Layout(16, 9), "(2,2,4):(21,50,300)"),
])
def test_worked_examples(A, B, expected):
    R = composition(A, B)
    assert str(R) == expected
    assert values(R) == [A(B(i)) for i in range(size(B))]


def test_defining_equation_over_a_family():
    checked = 0
    for A in some_layouts():
        for B in (Layout(4, 1), Layout((2, 2), (1, 2)), Layout(2, 2), Layout((2, 3), (3, 1))):
            try:
                R = composition(A, B)
            except LayoutError:
                continue
            assert [R(i) for i in range(size(B))] == [A(B(i)) for i in range(size(B))], (A, B, R)
            checked += 1
    assert checked > 50


def test_tiler_by_mode_and_shape_tiler():
    A = Layout((12, (4, 8)), (59, (13, 1)))
    assert str(composition(A, (Layout(3, 4), Layout(8, 2)))) == "(3,(2,4)):(236,(26,1))"
    assert str(composition(A, (3, 8))) == "(3,(4,2)):(59,(13,1))"
    assert composition(A, (None, 8)) == Layout((12, (4, 2)), (59, (13, 1)))


def test_short_tiler_drops_untouched_modes_like_cpp():
    # C++ layout.hpp: "Drop any modes of lhs that aren't hit by rhs" (pycute keeps them).
    A = Layout((4, 6, 8), (1, 4, 24))
    assert composition(A, (2,)) == Layout((2,), (1,))


def test_int_and_none():
    A = Layout((4, 8), (8, 1))
    assert composition(A, 4) == Layout(4, 8)
    assert composition(A, None) is A


def test_beyond_domain_uses_the_last_mode_like_cpp_coalesce_x():
    # A's trailing size-1 mode keeps its stride-0 extension: A(4..7) == 0, so A∘8:1 is (4,2):(1,0).
    A = Layout((4, 1), (1, 0))
    assert composition(A, Layout(8, 1)) == Layout((4, 2), (1, 0))


@pytest.mark.parametrize("A, B, match", [
    (Layout((6, 8), (1, 7)), Layout(4, 4), "stride divisibility"),  # C++ accepts and is wrong at 2
    (Layout((6, 8), (1, 7)), Layout(3, 5), "stride divisibility"),
    (Layout((4, 8), (1, 5)), Layout(6, 1), "shape divisibility"),
    (Layout((3, 4, 6, 3), (1, 54, 9, 3)), Layout((2, 2), (1, 2)), "overlap"),
    (Layout((4, 8), (1, 5)), Layout((4, 4), (1, 1)), "overlap"),
])
def test_inadmissible_raises_naming_the_condition(A, B, match):
    with pytest.raises(LayoutError, match=match) as e:
        composition(A, B)
    assert str(A) in str(e.value) and str(B) in str(e.value)


def test_stride_fitting_in_one_mode_is_allowed():
    # 2:4 into (6,8): 0 and 4 lie in the first mode, no divisibility needed (C++'s weak condition).
    assert composition(Layout((6, 8), (1, 7)), Layout(2, 4)) == Layout(2, 4)


def test_tiler_with_too_many_modes():
    with pytest.raises(LayoutError, match="rank"):
        composition(Layout((4, 4)), (2, 2, 2))


def test_a_right_layout_past_size_A_follows_As_extension_as_cute_cpp_does():
    # A coalesced keeping its function past size(A) (C++'s detail::coalesce_x). Checked against
    # CUTLASS 4.x compiled with g++: logical_divide prints (((_2,_2)),_6):(((_5,_2)),_8), R(2) == 2;
    # on 200 random A with trailing extent-1 modes, every value of C++ and ours agreed.
    import pycute

    A = Layout((6, 1, 2, 1), (8, 0, 5, 2))
    R = logical_divide(A, Layout((4,), (6,)))
    assert str(R) == "(((2,2)),6):(((5,2)),8)" and R(2) == 2 == A(12)
    assert values(composition(A, Layout(4, 6))) == [A(6 * i) for i in range(4)] == [0, 5, 2, 7]
    # pycute coalesces A plainly ((6,2):(8,5), the trailing 1:2 dropped): its R(2) is 10
    P = pycute.logical_divide(pycute.Layout((6, 1, 2, 1), (8, 0, 5, 2)), pycute.Layout((4,), (6,)))
    assert P(2) == 10
