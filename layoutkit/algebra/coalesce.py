"""coalesce and filter: simplify a layout without changing it as a function on its domain."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .composed import acts_on_inner
from .errors import LayoutError
from .layout import Layout, make_layout, rank

__all__ = ["coalesce", "filter", "by_mode"]


def by_mode(op, layout: Layout, tiler: tuple, keep_rest: bool, name: str) -> Layout:
    """``op(layout[i], tiler[i])`` for each mode of the tuple ``tiler`` (None: mode unchanged);
    layout's modes beyond the tiler are kept (keep_rest) or dropped."""
    r = rank(layout)
    if len(tiler) > r:
        raise LayoutError(f"{name}: tiler {_fmt_tiler(tiler)} has {len(tiler)} modes but "
                          f"{layout} has rank {r}")
    modes = [layout[i] if t is None else op(layout[i], t) for i, t in enumerate(tiler)]
    if keep_rest:
        modes += [layout[i] for i in range(len(tiler), r)]
    if not modes:
        return Layout._new((), ())
    return make_layout(*modes)


def _fmt_tiler(t) -> str:
    if type(t) is tuple:
        return "<" + ",".join(_fmt_tiler(v) for v in t) + ">"
    return "_" if t is None else str(t)


def _flat_coalesce(shapes, strides) -> Layout:
    for x in shapes:
        if type(x) is not int:
            break
    else:
        for x in strides:
            if type(x) is not int:
                break
        else:
            return _flat_coalesce_int(shapes, strides)
    rs, rd = [], []
    for s, d in zip(shapes, strides):
        if it.is_one(s):
            continue
        if rs:
            ps, pd = rs[-1], rd[-1]
            if (ps * pd == d) if (type(ps) is int and type(pd) is int and type(d) is int) \
                    else it.eq(it.mul(ps, pd), d) is True:
                rs[-1] = it.mul(ps, s)
                continue
        rs.append(s)
        rd.append(d)
    if not rs:
        return Layout._new(1, 0)
    if len(rs) == 1:
        return Layout._new(rs[0], rd[0])
    return Layout._new(tuple(rs), tuple(rd))


def _flat_coalesce_int(shapes, strides) -> Layout:
    rs, rd = [], []
    ps = pd = 0
    for s, d in zip(shapes, strides):
        if s == 1:
            continue
        if rs and ps * pd == d:
            ps *= s
            rs[-1] = ps
            continue
        rs.append(s)
        rd.append(d)
        ps, pd = s, d
    if not rs:
        return Layout._new(1, 0)
    if len(rs) == 1:
        return Layout._new(rs[0], rd[0])
    return Layout._new(tuple(rs), tuple(rd))


def coalesce_x(layout: Layout) -> Layout:
    """coalesce that also keeps the function beyond the domain (CuTe's detail::coalesce_x): a
    trailing size-1 mode keeps its stride, since the last mode absorbs indices past the size."""
    shapes, strides = it.flatten(layout.shape), it.flatten(layout.stride)
    if shapes and it.is_one(shapes[-1]):
        shapes = shapes[:-1] + (2,)
        c = _flat_coalesce(shapes, strides)
        return c
    return _flat_coalesce(shapes, strides)


@acts_on_inner
def coalesce(layout: Layout, profile=None) -> Layout:
    """The flattest layout equal to ``layout`` as a function on [0, size): merge modes with
    ``s0:d0 ++ s1:s0*d0 -> s0*s1:d0``, drop size-1 modes. With a tuple ``profile``, coalesce
    each mode i separately at the leaves of profile[i] (modes beyond the profile are kept).

    Defining equation: ``coalesce(L)(i) == L(i)`` for ``0 <= i < size(L)``, depth <= 1.

    >>> str(coalesce(Layout((2, (1, 6)), (1, (6, 2)))))
    '12:1'
    >>> str(coalesce(Layout((2, (1, 6)), (1, (6, 2))), (1, 1)))
    '(2,6):(1,2)'
    """
    profile = domain.profile(profile, "coalesce")
    if type(profile) is tuple:
        return by_mode(coalesce, layout, profile, True, "coalesce")
    return _flat_coalesce(it.flatten(layout.shape), it.flatten(layout.stride))


@acts_on_inner
def filter(layout: Layout, profile=None) -> Layout:  # noqa: A001 - CuTe's name
    """coalesce after dropping stride-0 and size-1 modes: the layout of the distinct indices.
    With a tuple ``profile``, filter each mode i separately (modes beyond it are kept).

    >>> str(filter(Layout((4, 2, 3), (1, 0, 4))))
    '12:1'
    """
    profile = domain.profile(profile, "filter")
    if type(profile) is tuple:
        return by_mode(filter, layout, profile, True, "filter")
    shapes, strides = [], []
    for s, d in zip(it.flatten(layout.shape), it.flatten(layout.stride)):
        if not it.is_zero(d):
            shapes.append(s)
            strides.append(d)
    return _flat_coalesce(shapes, strides)
