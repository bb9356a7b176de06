"""composition(A, B): the layout R with R(c) == A(B(c)) for every coordinate c of B."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .coalesce import by_mode, coalesce_x
from .composed import ComposedLayout
from .errors import LayoutError
from .layout import Layout

__all__ = ["composition", "compose_flat"]


def composition(A, B):
    """The layout ``R = A ∘ B``: ``R(c) == A(B(c))`` for all c in B's domain; shape(R) is
    congruent to shape(B) (after coalescing each of B's modes' images).

    B is a Layout, an int n (``n:1``), None (A unchanged, CuTe's ``_``), or a tuple tiler
    ``<B0, B1, ...>`` applied to A's modes: ``(A[0]∘B0, A[1]∘B1, ...)``. A's modes beyond the
    tiler are DROPPED, as in CuTe's C++ (layout.hpp: "Drop any modes of lhs that aren't hit by
    rhs"); pycute keeps them. A may be a ComposedLayout (B composes its inner layout). An int
    is an extent (>= 1); anything else (a float, a string, a bool) raises LayoutError.

    A is first coalesced keeping its function past its domain (C++'s ``detail::coalesce_x``: a
    trailing extent-1 mode keeps its stride, as the last mode absorbs indices past the size).
    This differs from pycute, which coalesces with the plain coalesce, only where B reaches
    past size(A) and A ends in extent-1 modes: ``logical_divide((6,1,2,1):(8,0,5,2), (4,):(6,))``
    is ``(((2,2)),6):(((5,2)),8)`` in CuTe C++ (CUTLASS 4.x, compiled and run) and here, so
    R(2) = A(12) = 2; pycute gives ``((4,),6):((5,),8)``, R(2) = 10, the value of the coalesced
    ``(6,2):(8,5)`` at 12, not of A.

    Raises LayoutError when A∘B is not a layout: the stride divisibility condition (for each mode
    s of coalesce(A) that B's stride r reaches: s | r, or r | s, or all of B's remaining elements
    fit in that mode) or the shape divisibility condition (B's size divides evenly into A's modes).
    C++ checks these only for static values and weakly: it accepts ``(6,N):(1,D) ∘ 4:4`` and
    returns a layout that differs from A∘B at index 2; we raise.

    >>> str(composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))))
    '((2,2),3):((24,2),8)'
    >>> str(composition(Layout((12, (4, 8)), (59, (13, 1))), (Layout(3, 4), Layout(8, 2))))
    '(3,(2,4)):(236,(26,1))'
    """
    if isinstance(A, ComposedLayout):
        return A._with_inner(composition(A.inner, B))
    if not isinstance(A, Layout):
        raise LayoutError(f"composition: A must be a Layout or ComposedLayout, got {A!r}")
    if B is None:
        return A
    if isinstance(B, ComposedLayout):
        raise LayoutError(f"composition({A}, {B}): a Layout composed with a ComposedLayout is not "
                          "a layout; compose the ComposedLayout with the Layout instead")
    if not isinstance(B, Layout):
        B = domain.tiler(B, "composition", "B")
        if type(B) is tuple:
            return by_mode(composition, A, B, False, "composition")
        B = Layout._new(B, 1)
    return compose_flat(coalesce_x(A), A, B)


def compose_flat(flat: Layout, A: Layout, B: Layout):
    """A ∘ B for a Layout B, given ``flat = coalesce_x(A)`` (callers that have it skip a coalesce)."""
    shapes, strides = flat.shape, flat.stride
    if type(shapes) is not tuple:
        shapes, strides = (shapes,), (strides,)
    if type(B.shape) is not tuple:
        return _compose_leaf(shapes, strides, B.shape, B.stride, A, B, None)
    digits = {}
    result = _compose(shapes, strides, B.shape, B.stride, A, B, digits)
    _check_no_carry(shapes, digits, A, B)
    return result


def _compose(shapes, strides, b_shape, b_stride, A, B, digits):
    if type(b_shape) is tuple:
        parts = [_compose(shapes, strides, s, d, A, B, digits) for s, d in zip(b_shape, b_stride)]
        return Layout._new(tuple(p.shape for p in parts), tuple(p.stride for p in parts))
    return _compose_leaf(shapes, strides, b_shape, b_stride, A, B, digits)


def _check_no_carry(shapes, digits, A, B):
    """B's modes are composed one by one; their sum is A∘B only if, in every mode of coalesced A
    (but the last, which is unbounded), the largest digits of B's modes add up without a carry
    (after coalescing, a carry always changes A's value). CuTe assumes this; we check it."""
    for k, terms in digits.items():
        if len(terms) < 2:
            continue
        total = terms[0]
        for t in terms[1:]:
            total = it.add(total, t)
        it.require(it.lt(total, shapes[k]), lambda: f"B's modes overlap in A's mode {k} of shape "
                   f"{it.fmt(shapes[k])} (their largest offsets there sum to {it.fmt(total)}, so "
                   "A∘B is not the concatenation of A∘B_i; B is not injective into A's modes)",
                   lambda: _ctx(A, B), (it.lt, [total, shapes[k]]))


def _compose_leaf(shapes, strides, n, r, A, B, digits) -> Layout:
    """coalesced A (flat) ∘ n:r; records in ``digits`` the largest digit it uses in each mode."""
    if it.is_zero(r):
        return Layout._new(n, r)
    last = len(shapes) - 1
    if last == 0:
        return Layout._new(n, it.mul(r, strides[0]))
    sgn = 1 if type(r) is int and r > 0 else it.sign(r)
    ar = r if sgn > 0 else it.abs_(r)
    res_s, res_d = [], []
    for i in range(last):
        s, d = shapes[i], strides[i]
        if it.is_one(n):
            ar = it.ceil_div_int(ar, s)
            continue
        skip = it.divides(s, ar)
        if skip is True:                      # B's stride steps over this whole mode
            ar = it.exact_div(ar, s, "composition")
            continue
        inside = it.divides(ar, s)
        if inside is True:                    # s/ar elements of this mode, stride ar*d
            m = it.min_(it.exact_div(s, ar, "composition"), n, lambda: _ctx(A, B))
            it.require(it.divides(m, n), lambda: f"shape divisibility condition: {it.fmt(m)} divides "
                       f"{it.fmt(n)} (B's remaining size vs. A's mode {i} of shape {it.fmt(s)})",
                       lambda: _ctx(A, B), (it.divides, [m, n]))
            res_s.append(m)
            res_d.append(it.mul(it.mul(sgn, ar), d))
            if digits is not None:
                digits.setdefault(i, []).append(it.mul(it.add(m, -1), ar))
            n = it.exact_div(n, m, "composition")
            ar = 1
            continue
        fits = it.lt(ar, s)
        if fits is True:
            fits = it.le(n, it.ceil_div_int(s, ar))
        if fits is True:                      # the remaining n elements all lie inside this mode
            res_s.append(n)
            res_d.append(it.mul(it.mul(sgn, ar), d))
            if digits is not None:
                digits.setdefault(i, []).append(it.mul(it.add(n, -1), ar))
            n, ar = 1, 1
            continue
        known = None if None in (skip, inside, fits) else False
        it.require(known, lambda: f"stride divisibility condition: B's stride {it.fmt(ar)} and A's mode "
                   f"{i} of shape {it.fmt(s)} (neither divides the other, and B's remaining "
                   f"{it.fmt(n)} elements do not fit in the mode)", lambda: _ctx(A, B),
                   (_stride_condition, [s, ar, n]))
    if not res_s:
        return Layout._new(n, it.mul(it.mul(sgn, ar), strides[last]))
    if not it.is_one(n):
        res_s.append(n)
        res_d.append(it.mul(it.mul(sgn, ar), strides[last]))
    if len(res_s) == 1:
        return Layout._new(res_s[0], res_d[0])
    return Layout._new(tuple(res_s), tuple(res_d))


def _stride_condition(s, ar, n):
    """CuTe's stride divisibility condition for B's stride ar (with n elements left) at A's mode
    of shape s: s | ar, ar | s, or the n elements fit inside the mode."""
    fits = it.lt(ar, s)
    if fits is True:
        fits = it.le(n, it.ceil_div_int(s, ar))
    return it.either(lambda: it.divides(s, ar), lambda: it.divides(ar, s), lambda: fits)()


def _ctx(A, B) -> str:
    return f"composition({A}, {B})"
