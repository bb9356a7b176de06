"""upcast, downcast (re-typing a layout's elements) and the common contiguous vector of two layouts."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .coalesce import coalesce
from .composed import ComposedLayout
from .composition import composition
from .errors import LayoutError
from .inverse import right_inverse
from .layout import Layout
from .swizzle import Swizzle

__all__ = ["upcast", "downcast", "max_common_vector", "max_common_layout"]


def _check(layout, n, op):
    """The factor as a positive int; the layout a Layout or ComposedLayout."""
    if not isinstance(layout, (Layout, ComposedLayout)):
        domain.fail(op, "layout", layout, "must be a Layout or a ComposedLayout")
    n = domain.extent(n, op, "n")
    if type(n) is not int:
        domain.fail(op, "n", n, "must be an int (an element-size ratio known when tracing)")
    return n


def _upcast(shape_, stride_, n, ctx):
    if type(shape_) is tuple:
        parts = [_upcast(s, d, n, ctx) for s, d in zip(shape_, stride_)]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
    if it.is_zero(stride_):
        return shape_, stride_
    sgn = it.sign(stride_)
    ad = it.abs_(stride_)
    k = it.divides(n, ad)
    if k is not True:
        k2 = it.divides(ad, n)
        it.require(True if k2 else (None if None in (k, k2) else False),
                   f"divisibility condition: {n} divides stride {it.fmt(ad)} or stride divides {n}", ctx,
                   (it.either(lambda a: it.divides(n, a), lambda a: it.divides(a, n)), [ad]))
    return (it.ceil_div_int(shape_, it.ceil_div_int(n, ad)), it.mul(sgn, it.ceil_div_int(ad, n)))


def upcast(layout, n: int):
    """The layout in units of n elements: a stride-1 mode's size is divided by n (rounded up),
    other strides are divided by n. Each nonzero stride must divide n or be a multiple of it.

    >>> str(upcast(Layout((4, 8), (1, 4)), 2))
    '(2,8):(1,2)'
    """
    n = _check(layout, n, "upcast")
    if isinstance(layout, ComposedLayout):
        return ComposedLayout(_cast_outer(layout.outer, n, True), it.exact_div(layout.offset, n, "upcast offset"),
                              upcast(layout.inner, n))
    s, d = _upcast(layout.shape, layout.stride, n, f"upcast({layout}, {n})")
    return Layout._new(s, d)


def _downcast(shape_, stride_, n):
    if type(shape_) is tuple:
        parts = [_downcast(s, d, n) for s, d in zip(shape_, stride_)]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
    if stride_ == 1 or stride_ == -1:
        return it.mul(shape_, n), stride_
    return shape_, it.mul(stride_, n)


def downcast(layout, n: int):
    """The layout in units of 1/n element: a stride-1 mode's size is multiplied by n, other
    strides are multiplied by n. Needs a stride-1 mode (CuTe: "adjacent elements").

    >>> str(downcast(Layout((4, 8), (1, 4)), 2))
    '(8,8):(1,8)'
    """
    n = _check(layout, n, "downcast")
    if isinstance(layout, ComposedLayout):
        return ComposedLayout(_cast_outer(layout.outer, n, False), it.mul(layout.offset, n),
                              downcast(layout.inner, n))
    if not any(type(d) is int and d == 1 for d in it.flatten(layout.stride)):
        raise LayoutError(f"downcast({layout}, {n}): the layout has no stride-1 mode")
    s, d = _downcast(layout.shape, layout.stride, n)
    return Layout._new(s, d)


def _cast_outer(outer, n, up: bool):
    """A swizzle re-based to the new element size (n a power of two)."""
    if isinstance(outer, Layout):
        return upcast(outer, n) if up else downcast(outer, n)
    if n & (n - 1):
        raise LayoutError(f"{'upcast' if up else 'downcast'} of {outer}: factor {n} is not a power of two")
    k = n.bit_length() - 1
    if up:
        if outer.base < k:
            raise LayoutError(f"upcast of {outer} by {n}: the swizzle's base {outer.base} < log2({n})")
        return Swizzle(outer.bits, outer.base - k, outer.shift)
    return Swizzle(outer.bits, outer.base + k, outer.shift)


def max_common_layout(a: Layout, b: Layout) -> Layout:
    """The layout R of the most contiguous elements where a and b agree: a(R(i)) == b(R(i)) == i.

    >>> str(max_common_layout(Layout((4, 8), (1, 4)), Layout((4, 8), (1, 8))))
    '4:1'
    """
    _layouts(a, b, "max_common_layout")
    inv_b = right_inverse(b)
    first = _common_prefix(a, inv_b)
    if first is not None:
        return composition(inv_b, first)
    return Layout._new(1, 0)


def max_common_vector(a: Layout, b: Layout):
    """The number of contiguous elements a and b agree on (size of max_common_layout).

    >>> max_common_vector(Layout((4, 8), (1, 4)), Layout((4, 8), (1, 4)))
    32
    """
    _layouts(a, b, "max_common_vector")
    first = _common_prefix(a, right_inverse(b))
    return first.shape if first is not None else 1


def _layouts(a, b, op: str) -> None:
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, Layout):
            domain.fail(op, name, x, "must be a Layout")


def _common_prefix(a: Layout, inv_b: Layout):
    """The first mode of coalesce(a o inv_b) when its stride is 1, else None. Where a o inv_b is
    not admissible (CuTe's composition precondition fails: a's modes do not divide inv_b's
    size), an integer inv_b is cut to its longest prefix that is: the elements a and b agree
    on lie in such a prefix. Symbolic layouts raise LayoutError as composition does."""
    try:
        common = coalesce(composition(a, inv_b))
    except LayoutError:
        size = it.product(inv_b.shape)
        if type(size) is not int:
            raise
        breaks, prefix = {1}, 1          # admissible lengths: prefix(k modes) * m, m | mode k
        for extent in it.flatten(a.shape):
            if type(extent) is not int:
                break
            breaks |= {prefix * m for m in range(1, extent + 1) if extent % m == 0}
            prefix *= extent
        for n in sorted((x for x in breaks if x < size), reverse=True):
            try:
                common = coalesce(composition(a, composition(inv_b, Layout._new(n, 1))))
                break
            except LayoutError:
                continue
        else:
            return None
    first = common[0] if type(common.shape) is tuple else common
    return first if type(first.stride) is int and first.stride == 1 else None
