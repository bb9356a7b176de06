"""Defining equations of composition, complement and the inverses, checked over whole domains.

Admissibility follows CuTe's divisibility conditions (see strategies.composition_admissible and
complement_admissible): an admissible input must give the defining equation, an inadmissible one
must raise LayoutError -- never a layout.
"""
from __future__ import annotations

import pytest
from hypothesis import assume, given, strategies as st

import layoutkit.algebra as la
from tests.algebra.strategies import (
    admissible_right_operands, assert_same_function, build, by_mode_tilers, colex_coord,
    compact_layouts, complement_admissible, congruent, complement_end, complement_exact, composition_admissible,
    composition_cases, concat, flat, is_injective, layouts, refines, settings_for, size_of, value_at,
)

PROPS = settings_for(200)


def _check_composition(a_pair, b_pair):
    A, B = build(la, a_pair), build(la, b_pair)
    R = la.composition(A, B)
    assert refines(R.shape, b_pair[0]), f"{R} does not have the shape of B={B}"
    for i in range(size_of(b_pair[0])):
        want = value_at(*a_pair, B(i))
        assert R(i) == want, f"({A}) o ({B}) = {R}: at {i} got {R(i)}, A(B(i)) = {want}"
        assert R(colex_coord(i, b_pair[0])) == want


@PROPS
@given(composition_cases(admissible=True))
def test_composition_is_function_composition_inside_the_domain(case):
    a_pair, b_pair = case
    B = build(la, b_pair)
    assume(max(B(i) for i in range(size_of(b_pair[0]))) < size_of(a_pair[0]))
    _check_composition(a_pair, b_pair)


@PROPS
@given(composition_cases(admissible=True))
def test_composition_extends_the_last_mode_of_a_past_its_domain(case):
    # CuTe's layout function extends A's last mode past size(A); logical_divide relies on it.
    _check_composition(*case)


def _leaves_add_without_carry(a_pair, b_pair) -> bool:
    """CuTe composes B leaf by leaf; that is A o B only if A(B(c)) == sum_k A(c_k * d_k) for every
    coordinate c of B, i.e. B's leaves never carry into each other inside A."""
    leaves = list(zip(flat(b_pair[0]), flat(b_pair[1])))
    for i in range(size_of(b_pair[0])):
        crd = flat(colex_coord(i, b_pair[0]))
        total = sum(c * d for c, (_, d) in zip(crd, leaves))
        if value_at(*a_pair, total) != sum(value_at(*a_pair, c * d) for c, (_, d) in zip(crd, leaves)):
            return False
    return True


@PROPS
@given(composition_cases(admissible=None))
def test_composition_succeeds_when_admissible_and_is_never_wrong(case):
    # Admissible (CuTe's divisibility conditions, B's leaves adding without carry): A o B is
    # function composition. Otherwise LayoutError -- or, where a stricter rule than CuTe's still
    # yields the exact composition, that composition; never a different function.
    a_pair, b_pair = case
    A, B = build(la, a_pair), build(la, b_pair)
    if composition_admissible(*a_pair, *b_pair) and _leaves_add_without_carry(a_pair, b_pair):
        _check_composition(a_pair, b_pair)
        return
    try:
        R = la.composition(A, B)
    except la.LayoutError:
        return
    assert refines(R.shape, b_pair[0]), f"{R} does not have the shape of B={B}"
    for i in range(size_of(b_pair[0])):
        assert R(i) == value_at(*a_pair, B(i)), (
            f"inadmissible ({A}) o ({B}) returned {R}, which differs from A(B(i)) at {i}")


def test_composition_rejects_a_stride_that_cute_cpp_lets_through():
    # C++'s weak check (rest_stride < curr_shape) accepts (6,2):(1,100) o 4:4 and returns
    # (2,2):(4,100), which is not A o B (A(8) = 102): this must be an error, not a layout.
    with pytest.raises(la.LayoutError):
        la.composition(la.Layout((6, 2), (1, 100)), la.Layout(4, 4))


@PROPS
@given(layouts(max_size=64, max_depth=2), st.data())
def test_composition_with_a_tuple_tiler_is_by_mode_and_drops_untiled_modes(a_pair, data):
    A = build(la, a_pair)
    tiler = data.draw(by_mode_tilers(*a_pair, injective=False), label="tiler")
    tiles = [la.Layout(t, 1) if isinstance(t, int) else build(la, t) for t in tiler]
    R = la.composition(A, tuple(la.Layout(t, 1) if isinstance(t, int) else build(la, t) for t in tiler))
    # C++ (layout.hpp, composition with a tuple Tiler): "Drop any modes of lhs that aren't hit".
    assert la.rank(R) == len(tiler)
    modes_r = [R[i] for i in range(len(tiler))] if isinstance(R.shape, tuple) else [R]
    for i, (T, Ri) in enumerate(zip(tiles, modes_r)):
        Ai = A[i] if isinstance(a_pair[0], tuple) else A
        assert_same_function(la, Ri, la.composition(Ai, T), f"mode {i}")


@PROPS
@given(compact_layouts(extras=True, max_size=64), st.integers(1, 160))
def test_complement_is_ordered_disjoint_and_covers_the_cotarget(a_pair, cotarget):
    A = build(la, a_pair)
    C = la.complement(A, cotarget)
    n = la.size(C)
    image_a = {A(i) for i in range(la.size(A))}
    for i in range(1, n):
        assert C(i - 1) < C(i), f"complement({A}, {cotarget}) = {C} is not ordered"
        assert C(i) not in image_a, f"complement({A}, {cotarget}) = {C} hits A at {C(i)}"
    assert C(0) == 0
    if complement_exact(*a_pair):
        # A filtered and its complement tile [0, end * ceil(cotarget / end)) exactly.
        end = complement_end(*a_pair)
        Fa = la.filter(A)
        joint = concat(la, Fa, C)
        image = sorted(joint(i) for i in range(la.size(joint)))
        total = end * -(-cotarget // end)
        assert image == list(range(total)), f"(filter({A}), {C}) is not a bijection onto [0,{total})"
        assert total >= cotarget


@PROPS
@given(layouts(max_size=64, max_stride=8), st.integers(1, 64))
def test_complement_raises_exactly_when_it_cannot_cover_the_cotarget(a_pair, cotarget):
    # Stricter than C++: a layout that overlaps itself (complement_admissible fails), or whose
    # sorted strides do not divide each other, such as (2,2):(1,3), has no complement that
    # covers the cotarget; C++ returns one that breaks its own cosize postcondition, we raise.
    A = build(la, a_pair)
    if complement_exact(*a_pair):
        C = la.complement(A, cotarget)
        joint = concat(la, la.filter(A), C)
        assert len({joint(i) for i in range(la.size(joint))}) == la.size(joint)
    else:
        with pytest.raises(la.LayoutError):
            la.complement(A, cotarget)


@PROPS
@given(layouts(max_size=64))
def test_right_inverse(a_pair):
    A = build(la, a_pair)
    R = la.right_inverse(A)
    for i in range(la.size(R)):
        assert A(R(i)) == i, f"right_inverse({A}) = {R}: A(R({i})) = {A(R(i))}"


@PROPS
@given(compact_layouts(gaps=False))
def test_right_inverse_of_a_bijection_is_its_inverse(a_pair):
    A = build(la, a_pair)
    R = la.right_inverse(A)
    assert la.size(R) == la.size(A)
    for i in range(la.size(A)):
        assert R(A(i)) == i and A(R(i)) == i


@PROPS
@given(compact_layouts(extras=True))
def test_left_inverse(a_pair):
    A = build(la, a_pair)
    L = la.left_inverse(A)
    injective = is_injective(*a_pair)
    for i in range(la.size(A)):
        if injective:
            assert L(A(i)) == i, f"left_inverse({A}) = {L}: L(A({i})) = {L(A(i))}"
        else:
            assert A(L(A(i))) == A(i), f"left_inverse({A}) = {L} is no quasi-inverse at {i}"
