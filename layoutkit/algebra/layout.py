"""The Layout value class: a pair of congruent IntTuples (shape, stride), a function from
coordinates (or a flat index, split colexicographically) to an integer index.
"""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .errors import LayoutError

__all__ = ["Layout", "make_layout", "size", "cosize", "rank", "depth", "flatten", "crd2idx",
           "idx2crd", "shape", "stride"]


def _py(x) -> str:
    if type(x) is tuple:
        inner = ", ".join(_py(v) for v in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    return it.fmt(x)


def _has_none(c) -> bool:
    if c is None:
        return True
    return type(c) is tuple and any(_has_none(v) for v in c)


def _slice(crd, trg):
    """The entries of trg paired with None in crd, concatenated (CuTe's slice)."""
    if type(crd) is tuple:
        if type(trg) is not tuple or len(trg) != len(crd):
            raise LayoutError(f"slice coordinate {crd!r} does not match {it.fmt(trg)}")
        out = ()
        for c, t in zip(crd, trg):
            out += _slice(c, t)
        return out
    return (trg,) if crd is None else ()


def _zero_none(c):
    if type(c) is tuple:
        return tuple(_zero_none(v) for v in c)
    return 0 if c is None else c


class Layout:
    """A CuTe layout ``shape:stride``; immutable, hashable, compared structurally.

    ``L(i)`` maps a flat index, ``L(i, j)`` or ``L((i, (j, k)))`` a coordinate, to an index.
    A coordinate holding ``None`` (CuTe's ``_``) slices: ``L(None, 1)`` is the layout of column 1.
    ``L[i]`` is mode i; ``len(L)`` its rank.

    Domain (checked once, here; see layoutkit.algebra.domain): the shape's entries are positive
    integer extents, the stride's entries integers, congruent to the shape, nested at most
    ``domain.MAX_DEPTH`` levels. A call's coordinate is an index >= 0 (past ``size`` it is CuTe's
    extension of the last mode) or a tuple congruent to the shape with each entry in
    ``0 .. size(mode) - 1``; anything else raises LayoutError naming the entry and the rule.

    >>> L = Layout((4, 2), (2, 1))
    >>> str(L), L(5), L(1, 1), L[1]
    ('(4,2):(2,1)', 3, 3, Layout(2, 1))
    >>> Layout(((2, 2), 4))
    Layout(((2, 2), 4), ((1, 2), 4))
    """

    __slots__ = ("shape", "stride", "_hash")

    def __init__(self, shape, stride=None):
        if stride is None:
            if not domain.fast_shape(shape):
                shape = domain.shape(shape, "Layout")
            stride = it.compact_col_major(shape)
        elif not domain.fast_pair(shape, stride):
            shape, stride = domain.layout_pair(shape, stride, "Layout")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "_hash", None)

    @classmethod
    def _new(cls, shape, stride) -> "Layout":
        """Trusted constructor for results computed by the algebra (no validation)."""
        self = object.__new__(cls)
        _SET_SHAPE(self, shape)
        _SET_STRIDE(self, stride)
        _SET_HASH(self, None)
        return self

    def __setattr__(self, name, value):
        raise AttributeError("Layout is immutable")

    def __eq__(self, other):
        if type(other) is not Layout:
            return NotImplemented
        return self.shape == other.shape and self.stride == other.stride

    def __hash__(self):
        h = self._hash
        if h is None:
            h = hash((self.shape, self.stride))
            object.__setattr__(self, "_hash", h)
        return h

    def __len__(self):
        return len(self.shape) if type(self.shape) is tuple else 1

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i):
        if type(i) is not int and not isinstance(i, slice):
            i = domain.integer(i, f"mode of {self}", "i")
        if type(self.shape) is tuple:
            if isinstance(i, slice):
                return Layout._new(self.shape[i], self.stride[i])
            try:
                return Layout._new(self.shape[i], self.stride[i])
            except IndexError:
                raise LayoutError(f"mode {i} of {self} does not exist (rank {len(self)})") from None
        if i in (0, -1):
            return self
        raise LayoutError(f"mode {i} of {self} does not exist (rank 1)")

    def __call__(self, *args):
        if not args:
            raise LayoutError(f"calling {self} needs an index or a coordinate")
        crd = args[0] if len(args) == 1 else args
        if type(crd) is not int or crd < 0:
            crd = domain.coordinate(crd, self.shape, lambda: f"calling {self}", slicing=True)
            if _has_none(crd):
                return Layout._new(_slice(crd, self.shape), _slice(crd, self.stride))
        return it.crd2idx(crd, self.shape, self.stride)

    def slice_and_offset(self, crd):
        """(the sub-layout of the None modes of crd, the index of crd with None read as 0)."""
        return slice_offset(self, domain.coordinate(crd, self.shape, lambda: f"slicing {self}",
                                                    slicing=True))

    def size(self):
        return it.product(self.shape)

    def cosize(self):
        return cosize(self)

    def subs(self, mapping) -> "Layout":
        """This layout with symbols replaced by ints, per ``mapping`` (symbol() result or name -> int).

        Raises LayoutError when a value violates a symbol's declared divisibility.
        """
        from . import symbolic
        present = set()
        for x in it.flatten(self.shape) + it.flatten(self.stride):
            present |= symbolic.hidden_symbols(x)
        values = symbolic.resolve(mapping, present)

        def sub(t):
            return tuple(sub(v) for v in t) if type(t) is tuple else symbolic.substitute(t, values)
        return Layout(sub(self.shape), sub(self.stride))

    def __str__(self):
        return f"{it.fmt(self.shape)}:{it.fmt(self.stride)}"

    def __repr__(self):
        return f"Layout({_py(self.shape)}, {_py(self.stride)})"

    def _repr_latex_(self):
        from . import render
        return render.layout_latex(self)

    def _repr_svg_(self):
        from . import render
        return render.svg_or_none(self)


def slice_offset(layout: Layout, crd):
    """Layout.slice_and_offset for a coordinate the caller has checked (no validation)."""
    return (Layout._new(_slice(crd, layout.shape), _slice(crd, layout.stride)),
            it.crd2idx(_zero_none(crd), layout.shape, layout.stride))


# the slots' setters, bound once: the algebra builds many small results
_SET_SHAPE, _SET_STRIDE, _SET_HASH = Layout.shape.__set__, Layout.stride.__set__, Layout._hash.__set__


def make_layout(*args, stride=None):
    """``make_layout(shape, stride=None)``: a layout, column-major (CuTe's LayoutLeft) by default,
    where, as in CuTe's C++, a size-1 mode gets stride 0 (pycute gives it the running product);
    ``make_layout(L0, L1, ...)``: the layouts as the modes of one layout.

    >>> make_layout((4, 3))
    Layout((4, 3), (1, 4))
    >>> make_layout((4, 1, 2))
    Layout((4, 1, 2), (1, 0, 4))
    >>> str(make_layout(Layout(4, 2), Layout((2, 2), (1, 8))))
    '(4,(2,2)):(2,(1,8))'
    """
    if args and all(isinstance(a, Layout) for a in args):
        if stride is not None:
            raise LayoutError("make_layout(L0, L1, ...) takes no stride")
        return Layout._new(tuple(a.shape for a in args), tuple(a.stride for a in args))
    if any(isinstance(a, Layout) for a in args):
        raise LayoutError(f"make_layout: mix of layouts and non-layouts {args!r}")
    if len(args) == 2 and stride is None:
        return Layout(args[0], args[1])
    if len(args) == 1:
        return Layout(args[0], stride)
    raise LayoutError(f"make_layout takes (shape, stride=None) or layouts, got {args!r}")


def _layout_of(x, op: str) -> Layout:
    if isinstance(x, Layout):
        return x
    inner = getattr(x, "inner", None)
    if isinstance(inner, Layout):
        return inner
    raise LayoutError(f"{op}: expected a Layout, got {x!r}")


def shape(x):
    """The shape of a layout (of its domain, for a ComposedLayout)."""
    return _layout_of(x, "shape").shape


def stride(x):
    return _layout_of(x, "stride").stride if isinstance(x, Layout) else _no_stride(x)


def _no_stride(x):
    raise LayoutError(f"stride: {x} is a ComposedLayout, which has no stride (CuTe deletes it)")


def size(x):
    """The number of coordinates: product of the shape (of an IntTuple, too).

    >>> size(Layout((4, (2, 3)))), size((4, 5))
    (24, 20)
    """
    if isinstance(x, Layout):
        return it.product(x.shape)
    if type(x) is not tuple and type(x) is not list and hasattr(x, "shape"):
        return it.product(x.shape)
    return it.product(domain.int_tuple(x, "size", "x"))


def cosize(x):
    """The codomain extent: 1 + sum((s-1)*|d|) over the leaves (CuTe's size(coshape)).

    >>> cosize(Layout((4, 2), (2, 1)))
    8
    """
    if not isinstance(x, Layout):
        if not callable(getattr(x, "cosize", None)):
            domain.fail("cosize", "x", x, "must be a Layout, a ComposedLayout or a Swizzle")
        return x.cosize()
    r = 1
    for s, d in zip(it.flatten(x.shape), it.flatten(x.stride)):
        if type(s) is int and type(d) is int:
            r += (s - 1) * abs(d)
        else:
            r = it.add(r, it.mul(it.add(s, -1), it.abs_(d)))
    return r


def rank(x) -> int:
    """Number of top-level modes (1 for an int shape)."""
    s = x.shape if hasattr(x, "shape") else domain.int_tuple(x, "rank", "x")
    return len(s) if type(s) is tuple else 1


def depth(x) -> int:
    """Nesting depth of the shape: 0 for an int, 1 for a flat tuple (counted iteratively)."""
    t = x.shape if isinstance(x, Layout) or hasattr(x, "inner") else domain.int_tuple(x, "depth", "x")
    deepest, stack = 0, [(t, 0)]
    while stack:
        v, k = stack.pop()
        if type(v) is tuple:
            deepest = max(deepest, k + 1)
            stack.extend((e, k + 1) for e in v)
    return deepest


def flatten(x):
    """The layout (or IntTuple) with its modes flattened to depth <= 1."""
    if isinstance(x, Layout):
        if type(x.shape) is not tuple:
            return x
        return Layout._new(it.flatten(x.shape), it.flatten(x.stride))
    if hasattr(x, "inner"):
        return x._with_inner(flatten(x.inner))
    return it.flatten(domain.int_tuple(x, "flatten", "x"))


def _shape_stride(shape_or_layout, stride_, op: str):
    if isinstance(shape_or_layout, Layout):
        if stride_ is not None:
            raise LayoutError(f"{op}: give a layout or (shape, stride), not a layout and a stride")
        return shape_or_layout.shape, shape_or_layout.stride
    if hasattr(shape_or_layout, "inner"):
        domain.fail(op, "shape", shape_or_layout, "must be a Layout or a shape; a ComposedLayout "
                    "maps coordinates through its outer function: call it instead")
    return domain.layout_pair(shape_or_layout, stride_, op)


def crd2idx(crd, shape_or_layout, stride_=None):
    """The index of a coordinate: crd2idx(crd, layout) or crd2idx(crd, shape, stride=None)
    (stride defaults to column-major).

    Domain: the coordinate is an index >= 0 or a tuple congruent to the shape whose entries
    lie in 0 .. size(mode) - 1 (see Layout); an index past the size is CuTe's extension (the last
    mode takes what is left), kept as in CuTe.

    >>> crd2idx((1, 2), (4, 3), (3, 1)), crd2idx(13, (4, 3))
    (5, 13)
    """
    shp, std = _shape_stride(shape_or_layout, stride_, "crd2idx")
    crd = domain.coordinate(crd, shp, "crd2idx")
    return it.crd2idx(crd, shp, std)


def idx2crd(idx, shape_or_layout, stride_=None):
    """The natural coordinate of a flat index in a shape (or in a layout's shape).

    Without a stride: the colexicographic split. As in CuTe, an index past the size is not an
    error: the last mode takes what is left (``idx2crd(13, (4, 3)) == (1, 3)``). With a stride
    (CuTe's idx2crd(idx, shape, stride)): each leaf is ``(idx // stride) % extent``, strides >= 0
    (0 only on an extent-1 mode). The index is an integer >= 0.

    >>> idx2crd(5, (4, 3)), idx2crd(13, (4, 3)), idx2crd(17, (2, 16), (16, 1))
    ((1, 1), (1, 3), (1, 1))
    """
    idx = domain.index(idx, "idx2crd", "idx")
    if isinstance(shape_or_layout, Layout) and stride_ is None:
        return it.idx2crd(idx, shape_or_layout.shape)
    shp, std = _shape_stride(shape_or_layout, stride_, "idx2crd")
    if std is not None:
        for i, d in enumerate(it.flatten(std)):
            if (d < 0) if type(d) is int else it.lt(d, 0) is True:
                domain.fail("idx2crd", "stride", std, f"entry {i} = {it.fmt(d)} is negative; "
                            "recovering a coordinate needs strides >= 0")
    return it.idx2crd(idx, shp, std)
