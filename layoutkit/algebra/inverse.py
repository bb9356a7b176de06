"""right_inverse and left_inverse of a layout (CuTe's C++ definitions)."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .coalesce import _flat_coalesce, coalesce
from .complement import sorted_by_stride
from .errors import LayoutError
from .layout import Layout

__all__ = ["right_inverse", "left_inverse"]


def _modes(layout, op):
    if not isinstance(layout, Layout):
        if layout is None:
            return None
        layout = Layout(domain.shape(layout, op, "layout"))
    c = coalesce(layout)
    shapes = c.shape if type(c.shape) is tuple else (c.shape,)
    strides = c.stride if type(c.stride) is tuple else (c.stride,)
    pre = it.prefix_product(shapes)
    return list(zip(shapes, strides, pre))


def right_inverse(layout) -> Layout:
    """The largest compact ``R`` with ``layout(R(i)) == i`` for all i < size(R).

    Built from the modes of coalesce(layout) whose strides chain 1, s0*d0, ... in sorted order;
    modes that do not chain are skipped (CuTe's C++; pycute stops at the first one, which differs
    for layouts with a stride-0 mode).

    >>> str(right_inverse(Layout((4, 2), (2, 1))))
    '(2,4):(4,1)'
    """
    if isinstance(layout, Layout):
        c = _flat_coalesce(it.flatten(layout.shape), it.flatten(layout.stride))
        if type(c.shape) is int:
            if type(c.stride) is int:
                return _flat_coalesce((1, c.shape), (0, 1)) if c.stride == 1 else Layout._new(1, 0)
        elif type(c.shape) is tuple and all(type(d) is int for d in c.stride) and all(type(x) is int for x in c.shape):
            pre, p = [], 1
            for x in c.shape:
                pre.append(p)
                p *= x
            cur = 1
            res_s, res_d = [1], [0]
            for d, s, p in sorted(zip(c.stride, c.shape, pre)):
                if d == cur:
                    res_s.append(s)
                    res_d.append(p)
                    cur = s * d
            return _flat_coalesce(res_s, res_d)
    modes = _modes(layout, "right_inverse")
    if modes is None:
        return None
    cur = 1
    res_s, res_d = [1], [0]
    for s, d, p in sorted_by_stride(modes, lambda: f"right_inverse({layout})"):
        k = it.eq(d, cur)
        if k is None:
            it.require(None, lambda: f"whether stride {it.fmt(d)} equals {it.fmt(cur)}",
                       lambda: f"right_inverse({layout})",
                       (it.either(it.eq, lambda a, b: it.eq(a, b) is False or None), [d, cur]))
        if k:
            res_s.append(s)
            res_d.append(p)
            cur = it.mul(s, d)
    return _flat_coalesce(res_s, res_d)


def left_inverse(layout) -> Layout:
    """A layout ``L'`` with ``L'(layout(i)) == i`` for all i < size(layout) when layout is
    injective (in general, CuTe's quasi-inverse: ``layout(L'(layout(i))) == layout(i)``).

    CuTe's C++ algorithm (pycute computes right_inverse(make_layout(L, complement(L))) instead;
    both are left inverses of an injective layout, but they may differ outside its image).

    >>> str(left_inverse(Layout((4, 2), (2, 16))))
    '(2,8,2):(0,1,4)'
    """
    modes = _modes(layout, "left_inverse")
    if modes is None:
        return None
    sorted_modes = sorted_by_stride(modes, lambda: f"left_inverse({layout})")
    res_s, res_d = [], [0]
    span = 1
    for s, d, p in sorted_modes:
        if it.is_zero(d):
            continue
        if it.lt(d, 0) is not False:
            raise LayoutError(f"left_inverse({layout}): stride {it.fmt(d)} is not provably positive")
        q = it.exact_div(d, span, lambda: f"left_inverse({layout}): divisibility condition")
        res_s.append(q)
        res_d.append(p)
        span = it.mul(span, q)
    res_s.append(sorted_modes[-1][0])
    return _flat_coalesce(res_s, res_d)
