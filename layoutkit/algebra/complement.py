"""complement(A, cotarget): the layout of the indices A does not reach, up to cotarget."""
from __future__ import annotations

import functools

from . import domain
from . import int_tuple as it
from .coalesce import _flat_coalesce, filter
from .composed import ComposedLayout
from .errors import LayoutError
from .layout import Layout, cosize

__all__ = ["complement", "sorted_by_stride"]


def sorted_by_stride(modes: list, what: str) -> list:
    """(shape, stride, ...) tuples sorted by stride; symbolic strides need a proven order."""
    if all(type(m[1]) is int for m in modes):
        return sorted(modes, key=lambda m: m[1])

    def cmp(x, y):
        if it.eq(x[1], y[1]) is True:
            return 0
        k = it.le(x[1], y[1])
        if k is None:
            it.require(None, lambda: f"the order of strides {it.fmt(x[1])} and {it.fmt(y[1])}", what,
                       (it.either(it.le, lambda a, b: it.le(b, a)), [x[1], y[1]]))
        return -1 if k else 1
    return sorted(modes, key=functools.cmp_to_key(cmp))


def complement(layout, cotarget=None) -> Layout:
    """The layout ``C`` of the indices in [0, cotarget) that ``layout`` does not reach: sorted
    by stride, ``C`` fills the gaps between A's modes and repeats A's span up to cotarget.

    Defining equations: C is ordered (C(i-1) < C(i)), ``C(i) != A(j)`` for i >= 1, and
    ``size(A) * size(C) >= cotarget`` (``make_layout(A, C)`` is a bijection onto
    [0, size(A)*size(C)) when A is compact up to holes). cotarget is an int or a shape (then, as
    in CuTe, the rest is ceil_div'd mode by mode); it defaults to cosize(filter(A)).

    Domain: A is a Layout (a ComposedLayout's inner layout is used) or a shape; cotarget is a
    positive extent, a shape of them, or a Layout (its shape); ``complement(A, 0)`` raises. A
    cotarget below cosize(A) is not an error, as in CuTe: C then covers the gaps below A's span
    and one copy of it, ``complement(Layout(4, 2), 3) == Layout(2, 1)``.

    Raises LayoutError when A is not injective (two modes overlap) or when a stride is not a
    multiple of the extent (shape * stride) of the modes below it (the gaps are not a layout).

    >>> str(complement(Layout(4, 2), 24))
    '(2,3):(1,8)'
    >>> str(complement(Layout((2, 2), (1, 6)), 24))
    '(3,2):(2,12)'
    """
    if isinstance(layout, ComposedLayout):
        layout = layout.inner
    if not isinstance(layout, Layout):
        layout = Layout(domain.shape(layout, "complement", "layout"))
    if cotarget is not None:
        cotarget = _cotarget(cotarget)
    if cotarget is not None and _int_cotarget(cotarget):
        shape_, stride_ = layout.shape, layout.stride
        if type(shape_) is int:
            if type(stride_) is int and shape_ != 1 and stride_ > 0:
                fast = _complement_int((shape_,), (stride_,), cotarget)
                if fast is not None:
                    return fast
        else:
            shapes, strides = it.flatten(shape_), it.flatten(stride_)
            if all(type(x) is int for x in shapes) and all(type(d) is int for d in strides):
                kept = [(s, d) for s, d in zip(shapes, strides) if s != 1 and d != 0]
                if kept and all(d > 0 for _, d in kept):
                    fast = _complement_int([s for s, _ in kept], [d for _, d in kept], cotarget)
                    if fast is not None:
                        return fast
    flt = filter(layout)
    if cotarget is None:
        cotarget = cosize(flt)
    shapes, strides = it.flatten(flt.shape), it.flatten(flt.stride)
    if it.is_zero(strides[0]):
        return Layout(it.product(cotarget))
    if all(type(d) is int for d in strides) and all(type(x) is int for x in shapes):
        fast = _complement_int(shapes, strides, cotarget)
        if fast is not None:
            return fast
    for d in strides:
        if it.lt(d, 0) is not False:
            raise LayoutError(f"complement({layout}): stride {it.fmt(d)} is not provably "
                              "positive; complement needs nonnegative strides")
    cur = 1
    res_s, res_d = [], []
    for s, d in sorted_by_stride(list(zip(shapes, strides)), lambda: f"complement({layout})"):
        if it.lt(d, cur) is True:
            raise LayoutError(f"complement({layout}): the layout is not injective (stride "
                              f"{it.fmt(d)} lies inside the extent {it.fmt(cur)} of smaller modes)")
        it.require(it.divides(cur, d), lambda: f"stride {it.fmt(d)} is a multiple of the extent "
                   f"{it.fmt(cur)} of the smaller modes", lambda: f"complement({layout})",
                   (it.divides, [cur, d]))
        res_s.append(it.exact_div(d, cur, "complement"))
        res_d.append(cur)
        cur = it.mul(s, d)
    res_s.append(it.product(it.ceil_div(cotarget, cur)))
    res_d.append(cur)
    return _flat_coalesce(res_s, res_d)


def _cotarget(cotarget):
    if isinstance(cotarget, (Layout, ComposedLayout)):
        return cotarget.shape
    if domain.fast_shape(cotarget):
        return cotarget
    return domain.shape(cotarget, "complement", "cotarget")


def _int_cotarget(cotarget) -> bool:
    """An int, or a flat tuple of ints (logical_divide passes a coalesced shape)."""
    if type(cotarget) is int:
        return True
    return type(cotarget) is tuple and all(type(c) is int for c in cotarget)


def _complement_int(shapes, strides, cotarget):
    """The all-int path of complement; None when a check fails (the general path raises)."""
    cur = 1
    res_s, res_d = [], []
    for d, s in sorted(zip(strides, shapes)):
        if d < cur or d % cur:
            return None
        res_s.append(d // cur)
        res_d.append(cur)
        cur = s * d
    if type(cotarget) is int:
        res_s.append(-(-cotarget // cur))
    else:
        res_s.append(it.product(it.ceil_div(cotarget, cur)))
    res_d.append(cur)
    return _flat_coalesce(res_s, res_d)
