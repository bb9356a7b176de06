"""CuTe's domain for the algebra's inputs: the one place that checks what a user passes in.

Every public entry point of layoutkit.algebra calls these helpers on its arguments; a failed
check raises ``LayoutError("op: arg = value: rule")`` naming the operation, the argument (with
the position of a nested entry, ``coord[0][1]``), the offending value and the rule. A ``Layout``
is checked once, when it is built (the algebra's own results are trusted), so using one costs
no revalidation: only a coordinate given with a call is checked, leaf by leaf.

The rules:

- **integer**: a Python ``int`` or a numpy integer, never a ``bool``, float, string or None;
  a sympy expression whose value is an integer (sympy's assumptions or the declared
  divisibility of its extents prove it).
- **extent** (a shape entry, a tiler size, a cotarget): an integer >= 1. A symbolic extent is
  made of positive-integer symbols only (``symbol(name, d)`` results, or sympy Symbols declared
  ``integer=True, positive=True``), is provably an integer (``M/3`` is one only when M is
  declared divisible by 3) and provably >= 1.
- **stride**: any integer (symbolic: an integer expression).
- **IntTuple**: an integer or a tuple (or list) of IntTuples, nested at most ``MAX_DEPTH``
  levels. Nesting is walked with an explicit stack, never by recursion.
- **coordinate** of a shape: an integer index (>= 0; past the size it is CuTe's extension, the
  last mode taking what is left), or a tuple congruent to the shape whose every entry lies in
  ``0 .. size(mode) - 1`` (an entry may be an integer index into a nested mode, or a tuple).
  A symbolic entry must be an integer expression that is not provably negative; whether it is
  below its extent is a run-time fact the algebra cannot check.
"""
from __future__ import annotations

import operator

from .errors import LayoutError
from .sympy_gate import deferred_module, is_symbolic, is_sympy_integer

symbolic = deferred_module("layoutkit.algebra.symbolic")     # reached only with sympy values

__all__ = ["MAX_DEPTH", "fail", "integer", "extent", "nonnegative", "int_tuple", "shape", "stride",
           "layout_pair", "fast_pair", "fast_shape", "coordinate", "entry", "index", "tiler",
           "profile", "show"]

MAX_DEPTH = 32
"""The deepest nesting an IntTuple may have (CuTe's layouts are a few levels deep; the algebra's
recursive functions need headroom below Python's recursion limit)."""

_SHOW_LIMIT = 120


# ---- showing values in messages (iteratively: a value may be nested deeper than allowed) ---

class _Text(str):
    """Already-rendered text on show's stack (never a user value)."""


def show(x) -> str:
    """A short text of a user value: ints and sympy by value, tuples in Python form, capped."""
    out, stack, n = [], [x], 0
    while stack and n <= _SHOW_LIMIT:
        v = stack.pop()
        if type(v) is _Text:
            text = v
        elif type(v) is tuple or type(v) is list:
            close = ")" if type(v) is tuple else "]"
            if type(v) is tuple and len(v) == 1:
                close = ",)"
            items = [_Text("(" if type(v) is tuple else "[")]
            for i, e in enumerate(v):
                if i:
                    items.append(_Text(", "))
                items.append(e)
            items.append(_Text(close))
            stack.extend(reversed(items))
            continue
        elif is_symbolic(v):
            text = symbolic.display(v)
        else:
            text = repr(v)
        out.append(text)
        n += len(text)
    text = "".join(out)
    return text if not stack and len(text) <= _SHOW_LIMIT else text[:_SHOW_LIMIT] + "..."


def _kind(x) -> str:
    if isinstance(x, bool) or _is_numpy_bool(x):
        return "a bool"
    if isinstance(x, float) or type(x).__name__.startswith("float"):
        return "a float"
    if isinstance(x, str):
        return "a string"
    if x is None:
        return "None"
    return f"a {type(x).__name__}"


def _is_numpy_bool(x) -> bool:
    t = type(x)
    return t.__module__ == "numpy" and t.__name__ in ("bool_", "bool")


def fail(op, arg: str, value, rule: str, path=(), whole=None):
    """Raise LayoutError "op: arg = value: rule"; a nested entry reads "arg[i][j] = value (in
    arg = whole)". ``op`` may be a callable, so that a costly name is built only on failure."""
    if not isinstance(op, str):
        op = op()
    name = arg + "".join(f"[{i}]" for i in path)
    where = f" (in {arg} = {show(whole)})" if path else ""
    raise LayoutError(f"{op}: {name} = {show(value)}{where}: {rule}")


# ---- scalars ----------------------------------------------------------------------------------

def integer(x, op: str, arg: str, path=(), whole=None):
    """x as an int or an integer sympy expression; anything else raises (no coercion)."""
    if type(x) is int:
        return x
    if is_symbolic(x):
        known = symbolic.integer(x)
        if known is True:
            return x
        if known is False:
            fail(op, arg, x, "must be an integer; this expression is not one", path, whole)
        fail(op, arg, x, "must be an integer; " + symbolic.integer_hint(x), path, whole)
    if isinstance(x, bool) or _is_numpy_bool(x) or x is None or isinstance(x, (str, bytes)):
        fail(op, arg, x, f"must be an integer, not {_kind(x)}", path, whole)
    if is_sympy_integer(x):
        return int(x)
    try:
        return operator.index(x)
    except TypeError:
        fail(op, arg, x, f"must be an integer, not {_kind(x)}", path, whole)


def extent(x, op: str, arg: str, path=(), whole=None):
    """x as a positive integer extent (int >= 1, or a positive-integer symbolic extent)."""
    if type(x) is int:
        if x >= 1:
            return x
        fail(op, arg, x, "must be a positive integer (an extent is >= 1)", path, whole)
    if is_symbolic(x):
        problem = symbolic.extent_problem(x)
        if problem:
            fail(op, arg, x, problem, path, whole)
        return x
    return extent(integer(x, op, arg, path, whole), op, arg, path, whole)


def nonnegative(x, op: str, arg: str, path=(), whole=None):
    """x as an integer >= 0 (symbolic: an integer expression not provably negative)."""
    if type(x) is int:
        if x >= 0:
            return x
        fail(op, arg, x, "must be >= 0", path, whole)
    x = integer(x, op, arg, path, whole)
    if type(x) is int:
        return nonnegative(x, op, arg, path, whole)
    if x.is_negative:
        fail(op, arg, x, "must be >= 0; this expression is negative", path, whole)
    return x


# ---- IntTuples --------------------------------------------------------------------------------

def int_tuple(x, op: str, arg: str, leaf=integer):
    """x as an IntTuple (lists become tuples), each leaf checked by ``leaf``, depth <= MAX_DEPTH.

    Walked with an explicit stack, so any nesting is refused by rule, never by RecursionError."""
    if type(x) is not tuple and type(x) is not list:
        return leaf(x, op, arg, (), x)
    root: list = []
    stack = [(x, 0, root)]           # (sequence, next position, converted entries so far)
    path: list = []
    while stack:
        seq, i, out = stack[-1]
        if i == len(seq):
            stack.pop()
            if path:
                path.pop()
            if stack:
                stack[-1][2].append(tuple(out))
            continue
        stack[-1] = (seq, i + 1, out)
        v = seq[i]
        if type(v) is tuple or type(v) is list:
            if len(stack) >= MAX_DEPTH:
                fail(op, arg, x, f"is nested more than {MAX_DEPTH} levels deep (the algebra's "
                     f"limit; CuTe's layouts nest a few levels)")
            path.append(i)
            stack.append((v, 0, []))
        else:
            out.append(leaf(v, op, arg, (*path, i), x))
    return tuple(root)


def shape(x, op: str, arg: str = "shape"):
    """x as a shape: an IntTuple of extents."""
    if type(x) is int and x >= 1:
        return x
    return int_tuple(x, op, arg, extent)


def stride(x, op: str, arg: str = "stride"):
    """x as a stride: an IntTuple of integers."""
    if type(x) is int:
        return x
    return int_tuple(x, op, arg, integer)


def fast_shape(s) -> bool:
    """s is already an all-int shape (positive leaves, depth <= MAX_DEPTH): no copy needed."""
    if type(s) is int:
        return s >= 1
    stack = [(s, 1)]
    while stack:
        t, k = stack.pop()
        if type(t) is not tuple or k > MAX_DEPTH:
            return False
        for a in t:
            if type(a) is int:
                if a < 1:
                    return False
            else:
                stack.append((a, k + 1))
    return True


def fast_pair(s, d) -> bool:
    """(s, d) are already a valid all-int congruent (shape, stride) pair: no copy needed."""
    if type(s) is int:
        return type(d) is int and s >= 1
    stack = [(s, d, 1)]
    while stack:
        t, u, k = stack.pop()
        if type(t) is not tuple or type(u) is not tuple or len(t) != len(u) or k > MAX_DEPTH:
            return False
        for a, b in zip(t, u):
            if type(a) is int:
                if type(b) is not int or a < 1:
                    return False
            else:
                stack.append((a, b, k + 1))
    return True


def congruent(s, d) -> bool:
    """s and d have the same nesting profile (both already IntTuples of depth <= MAX_DEPTH)."""
    stack = [(s, d)]
    while stack:
        t, u = stack.pop()
        if type(t) is tuple:
            if type(u) is not tuple or len(t) != len(u):
                return False
            stack.extend(zip(t, u))
        elif type(u) is tuple:
            return False
    return True


def layout_pair(s, d, op: str = "Layout"):
    """(shape, stride) checked and normalized; stride None means 'to be computed'."""
    s = shape(s, op)
    if d is None:
        return s, None
    d = stride(d, op)
    if not congruent(s, d):
        raise LayoutError(f"{op}: shape {show(s)} and stride {show(d)} are not congruent "
                          "(a stride needs the shape's nesting: one integer per shape entry)")
    return s, d


# ---- coordinates ------------------------------------------------------------------------------

def _size(s):
    if type(s) is int:
        return s
    from .int_tuple import product
    return product(s)


def entry(c, s, op, arg: str, path=(), whole=None, top: bool = False, note: str = ""):
    """One coordinate entry c of the (sub-)shape s, checked and normalized: an integer in
    0 .. size(s) - 1 (``top``: any index >= 0, CuTe's extension past the size). ``note`` (text,
    or a function making it, called only for the message) is added to a range error."""
    if type(c) is not int:
        c = integer(c, op, arg, path, whole)
        if type(c) is not int:
            if c.is_negative:
                fail(op, arg, c, "must be >= 0 (a coordinate counts from 0); this expression "
                     "is negative", path, whole)
            return c
    if c < 0:
        fail(op, arg, c, "must be >= 0 (a coordinate counts from 0)", path, whole)
    if not top:
        n = _size(s)
        if type(n) is int and c >= n:
            what = "the extent" if type(s) is int else f"the size of shape {show(s)}"
            note = note() if callable(note) else note
            fail(op, arg, c, f"must be in 0..{n - 1} ({what} is {n}){note}", path, whole)
    return c


def coordinate(crd, shp, op: str, arg: str = "coord", slicing: bool = False, note: str = "",
               bounded: bool = True):
    """crd checked as a coordinate of the shape shp (see the module's rules); returns it with
    lists as tuples and numpy integers as ints. ``slicing``: None entries (CuTe's ``_``) allowed;
    ``note`` (as for ``entry``) is added to a range error (``; the grid is (2,2)``);
    ``bounded=False`` lets every entry go past its mode (>= 0 still), CuTe's linear extension of
    the layout function.
    """
    if type(crd) is int:
        if crd >= 0:
            return crd
        fail(op, arg, crd, "must be >= 0 (an index counts from 0)")
    if type(crd) is not tuple and type(crd) is not list:
        if crd is None:
            if slicing:
                return crd
            fail(op, arg, crd, "must be an integer or a tuple of integers (None slices only "
                 "where a slice is allowed)")
        return entry(crd, shp, op, arg, (), crd, True)
    root: list = []
    stack = [(crd, shp, 0, root)]
    path: list = []
    while stack:
        seq, sub, i, out = stack[-1]
        if i == 0 and (type(sub) is not tuple or len(sub) != len(seq)):
            found = (f"{len(seq)} entries for {len(sub)} modes" if type(sub) is tuple
                     else "a tuple where the shape has an extent")
            fail(op, arg, seq, f"does not match shape {show(sub)} ({found})", tuple(path), crd)
        if i == len(seq):
            stack.pop()
            if path:
                path.pop()
            if stack:
                stack[-1][3].append(tuple(out))
            continue
        stack[-1] = (seq, sub, i + 1, out)
        v, s = seq[i], sub[i]
        if type(v) is tuple or type(v) is list:
            if len(stack) >= MAX_DEPTH:
                fail(op, arg, crd, f"is nested more than {MAX_DEPTH} levels deep")
            path.append(i)
            stack.append((v, s, 0, []))
        elif v is None and slicing:
            out.append(None)
        else:
            out.append(entry(v, s, op, arg, (*path, i), crd, not bounded, note))
    return tuple(root)


def index(idx, op: str, arg: str = "index"):
    """A flat index: an integer >= 0 (symbolic: not provably negative)."""
    if type(idx) is int and idx >= 0:
        return idx
    return nonnegative(idx, op, arg, (), idx)


# ---- tilers and profiles ----------------------------------------------------------------------

def tiler(t, op: str, arg: str = "tiler", allow_none: bool = True):
    """A tiler: a Layout, an extent n (the layout n:1), None (keep the mode; CuTe's ``_``) or a
    tuple of tilers (one per mode), nested at most MAX_DEPTH levels."""
    from .composed import ComposedLayout
    from .layout import Layout

    def leaf(v, op_, arg_, path, whole):
        if isinstance(v, Layout):
            return v
        if v is None:
            if allow_none:
                return v
            fail(op_, arg_, v, "None (CuTe's _) is not allowed in this tiler", path, whole)
        if isinstance(v, ComposedLayout):
            fail(op_, arg_, v, "a tiler is a Layout, an extent or a tuple of them; a "
                 "ComposedLayout is not a tiler", path, whole)
        return extent(v, op_, arg_, path, whole)
    if isinstance(t, Layout) or type(t) is int and t >= 1:
        return t
    return int_tuple(t, op, arg, leaf)


def profile(p, op: str, arg: str = "profile"):
    """A target profile (coalesce/filter): None or an IntTuple whose structure is what counts."""
    if p is None or type(p) is int:
        return p
    return int_tuple(p, op, arg, integer)
