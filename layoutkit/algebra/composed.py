"""ComposedLayout: ``outer ∘ (offset + inner)``, CuTe's ``A o O o B``; a swizzled layout is one.

The domain (shape, size, rank, coordinates) is the inner layout's; the algebra's operations act
on the inner layout and keep ``outer`` and ``offset`` (as CuTe does).
"""
from __future__ import annotations

import functools

from . import domain
from . import int_tuple as it
from .errors import LayoutError
from .layout import Layout
from .swizzle import Swizzle

__all__ = ["ComposedLayout", "acts_on_inner"]

_COSIZE_LIMIT = 1 << 22  # cosize of an integer composed layout is found by enumeration


class ComposedLayout:
    """``outer(offset + inner(c))``: outer a Swizzle or a Layout, offset an int, inner a Layout.

    >>> S = ComposedLayout(Swizzle(1, 0, 2), 0, Layout((4, 2), (2, 1)))
    >>> str(S), S(2), S.shape, S.size()
    ('Sw<1,0,2> o 0 o (4,2):(2,1)', 5, (4, 2), 8)
    """

    __slots__ = ("outer", "offset", "inner", "_cosize")

    def __init__(self, outer, offset, inner):
        if not isinstance(outer, (Swizzle, Layout)):
            domain.fail("ComposedLayout", "outer", outer, "must be a Swizzle or a Layout")
        if not isinstance(inner, Layout):
            domain.fail("ComposedLayout", "inner", inner, "must be a Layout")
        offset = domain.integer(offset, "ComposedLayout", "offset")
        object.__setattr__(self, "outer", outer)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "_cosize", None)

    def __setattr__(self, name, value):
        raise AttributeError("ComposedLayout is immutable")

    def _with_inner(self, inner):
        if isinstance(inner, tuple) and len(inner) == 2 and isinstance(inner[0], Layout):
            return (ComposedLayout(self.outer, self.offset, inner[0]), inner[1])
        return ComposedLayout(self.outer, self.offset, inner)

    @property
    def shape(self):
        return self.inner.shape

    def __eq__(self, other):
        if type(other) is not ComposedLayout:
            return NotImplemented
        return (self.outer == other.outer and self.offset == other.offset
                and self.inner == other.inner)

    def __hash__(self):
        return hash((self.outer, self.offset, self.inner))

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i):
        return ComposedLayout(self.outer, self.offset, self.inner[i])

    def __call__(self, *args):
        r = self.inner(*args)
        if isinstance(r, Layout):
            return ComposedLayout(self.outer, self.offset, r)
        return self.outer(it.add(self.offset, r))

    def slice_and_offset(self, crd):
        """(sub-layout with the slice's offset folded into this layout's offset, 0), as in CuTe."""
        sub, off = self.inner.slice_and_offset(crd)
        return ComposedLayout(self.outer, it.add(self.offset, off), sub), 0

    def size(self):
        return self.inner.size()

    def cosize(self):
        """1 + the largest index this layout produces over its domain.

        CuTe's C++ returns cosize(inner) and pycute cosize(outer); both can be below the largest
        index (a swizzle can move an index up, an offset shifts all). This is the exact value
        (integer layouts only): in closed form for a swizzle over a compact inner layout
        (_swizzled_compact_cosize), else by enumerating the domain.
        """
        if self._cosize is None:
            n = self.size()
            if type(n) is not int:
                raise LayoutError(f"cosize of {self}: a symbolic ComposedLayout has no exact cosize")
            found = _swizzled_compact_cosize(self)
            if found is None:
                if n > _COSIZE_LIMIT:
                    raise LayoutError(f"cosize of {self}: domain of {n} coordinates exceeds "
                                      f"{_COSIZE_LIMIT}")
                found = 1 + max(self(i) for i in range(n))
            object.__setattr__(self, "_cosize", found)
        return self._cosize

    def subs(self, mapping) -> "ComposedLayout":
        """This layout with its symbols replaced by ints (see Layout.subs)."""
        outer = self.outer.subs(mapping) if isinstance(self.outer, Layout) else self.outer
        off = Layout(self.offset, 0).subs(mapping).shape if type(self.offset) is not int else self.offset
        return ComposedLayout(outer, off, self.inner.subs(mapping))

    def __str__(self):
        return f"{self.outer} o {it.fmt(self.offset)} o {self.inner}"

    def __repr__(self):
        return f"ComposedLayout({self.outer!r}, {it.fmt(self.offset)}, {self.inner!r})"

    def _repr_latex_(self):
        from . import render
        return render.layout_latex(self)

    def _repr_svg_(self):
        from . import render
        return render.svg_or_none(self)


def _is_compact(layout: Layout) -> bool:
    """Whether an integer `layout` is a bijection onto 0..size-1: its strides, sorted, are the
    running products of their extents (a compact layout with its modes permuted)."""
    pairs = sorted((d, s) for s, d in zip(it.flatten(layout.shape), it.flatten(layout.stride))
                   if s != 1)
    product = 1
    for d, s in pairs:
        if type(d) is not int or type(s) is not int or d != product:
            return False
        product *= s
    return True


def _swizzled_compact_cosize(layout: "ComposedLayout"):
    """cosize of Swizzle o offset o inner for a compact integer inner layout, exactly; None for
    other layouts. The swizzle keeps each aligned block of 2**(base + bits) elements
    (2**(base + |shift| + bits) for a negative shift) in place, so the largest index lies in the
    block of the largest pre-swizzle element offset + size - 1; the compact inner fills that
    block from max(offset, the block's start) on, and only those (at most one block) are
    swizzled."""
    sw, offset, inner = layout.outer, layout.offset, layout.inner
    if not isinstance(sw, Swizzle) or type(offset) is not int or not _is_compact(inner):
        return None
    high = offset + inner.size() - 1
    block = 1 << (sw.base - min(0, sw.shift) + sw.bits)
    return 1 + max(sw(x) for x in range(max(offset, high // block * block), high + 1))


def acts_on_inner(op):
    """Make ``op(layout, ...)`` accept a ComposedLayout first argument by acting on its inner layout."""
    @functools.wraps(op)
    def wrapper(layout, *args, **kwargs):
        if isinstance(layout, ComposedLayout):
            return layout._with_inner(op(layout.inner, *args, **kwargs))
        if not isinstance(layout, Layout):
            domain.fail(op.__name__, "layout", layout, "must be a Layout or a ComposedLayout")
        return op(layout, *args, **kwargs)
    return wrapper
