"""Pure functions on IntTuples: an int (or symbolic extent) or a tuple of IntTuples.

Plain ``int`` takes a fast path (``type(x) is int``); ``symbolic`` (sympy) is entered only when a
leaf is a sympy expression. The scalar helpers (``mul``, ``ceil_div``, ``exact_div``, ``le``,
``eq``, ``divides``) are the only places where the two paths meet.
"""
from __future__ import annotations

import functools

from .errors import LayoutError
from .sympy_gate import deferred_module, is_symbolic

symbolic = deferred_module("layoutkit.algebra.symbolic")     # reached only with sympy leaves

__all__ = ["is_int", "is_tuple", "flatten", "product", "product_each", "inner_product",
           "prefix_product", "compact_col_major", "ceil_div", "shape_div", "congruent", "crd2idx", "idx2crd",
           "fmt", "normalize"]


def is_tuple(x) -> bool:
    return type(x) is tuple


def is_int(x) -> bool:
    """An int leaf: a Python int or a symbolic extent."""
    return type(x) is int or is_symbolic(x) if type(x) is not tuple else False


def normalize(x, what: str):
    """An IntTuple given by a user (integer leaves, lists as tuples), checked by
    layoutkit.algebra.domain; ``what`` is "op arg" as the error message names them."""
    from . import domain
    op, _, arg = what.rpartition(" ")
    return domain.int_tuple(x, op or arg, arg if op else "value")


def fmt(x) -> str:
    """CuTe text of an IntTuple: (4,(2,3)), symbolic leaves by their declared names."""
    if type(x) is int:
        return str(x)
    if type(x) is tuple:
        return "(" + ",".join(fmt(v) for v in x) + ")"
    return symbolic.display(x)


# ---- scalar helpers: fast int path, symbolic otherwise --------------------------------------

def mul(a, b):
    if type(a) is int and type(b) is int:
        return a * b
    return symbolic.norm(a * b)


def add(a, b):
    if type(a) is int and type(b) is int:
        return a + b
    return symbolic.norm(symbolic.expand(a + b))


def ceil_div_int(a, b):
    """ceil(a / b) for b > 0."""
    if type(a) is int and type(b) is int:
        return -(-a // b)
    return symbolic.ceil_div(a, b)


def exact_div(n, d, context: str):
    """n / d where d must divide n."""
    if type(n) is int and type(d) is int:
        if n % d:
            raise LayoutError(f"{_text(context)}: {d} does not divide {n}")
        return n // d
    return symbolic.exact_div(n, d, _text(context))


def either(*tests):
    """A predicate: True when one of ``tests`` (predicates on the same operands) is True."""
    def run(*args):
        answers = [t(*args) for t in tests]
        return True if True in answers else (False if all(a is False for a in answers) else None)
    return run


def divides(d, n):
    """True/False/None (unknown): d divides n."""
    if type(n) is int and type(d) is int:
        return n % d == 0 if d else n == 0
    return symbolic.divides(d, n)


def le(a, b):
    """True/False/None (unknown): a <= b."""
    if type(a) is int and type(b) is int:
        return a <= b
    return symbolic.le(a, b)


def lt(a, b):
    """True/False/None (unknown): a < b."""
    if type(a) is int and type(b) is int:
        return a < b
    return symbolic.lt(a, b)


def eq(a, b):
    """True/False/None (unknown): a == b."""
    if type(a) is int and type(b) is int:
        return a == b
    return symbolic.eq(a, b)


def is_one(x) -> bool:
    """x is provably 1 (an unknown extent counts as not 1, like a dynamic int in CuTe)."""
    return x == 1 if type(x) is int else symbolic.eq(x, 1) is True


def is_zero(x) -> bool:
    return x == 0 if type(x) is int else symbolic.eq(x, 0) is True


def abs_(x):
    if type(x) is int:
        return abs(x)
    return x if sign(x) >= 0 else symbolic.norm(-x)


def sign(x) -> int:
    """1 for x >= 0 (0 included: only the direction matters), -1 for x < 0; raises when the
    declared facts decide neither."""
    if type(x) is int:
        return (x > 0) - (x < 0)
    if symbolic.le(0, x):
        return 1
    if symbolic.lt(x, 0):
        return -1
    decided = either(lambda v: symbolic.le(0, v), lambda v: symbolic.lt(v, 0))
    raise LayoutError(f"the sign of {symbolic.display(x)} could not be proven from the declared "
                      f"facts{symbolic.undecided((decided, [x]))}")


def _text(x) -> str:
    return x() if callable(x) else x


def require(known, what, context, cond=None):
    """Raise LayoutError unless ``known`` is True (False: failed; None: not provable).
    ``what`` and ``context`` are strings or zero-argument callables, evaluated only on failure;
    ``cond`` = (predicate, operands) lets an unprovable message name the deciding fact."""
    if known is not True:
        what, context = _text(what), _text(context)
        if known is False:
            raise LayoutError(f"{context}: {what} does not hold")
        symbolic.require(known, what, context, cond)


def min_(a, b, context: str):
    """min(a, b), the order proven."""
    k = le(a, b)
    if k is None:
        k = le(b, a)
        require(k, lambda: f"which of {fmt(a)} and {fmt(b)} is smaller", context,
                (either(le, lambda x, y: le(y, x)), [a, b]))
        return b
    return a if k else b


# ---- IntTuple functions ----------------------------------------------------------------------

def flatten(t) -> tuple:
    """The leaves of t, in order, as a flat tuple (an int becomes a 1-tuple)."""
    if type(t) is not tuple:
        return (t,)
    for v in t:
        if type(v) is tuple:
            break
    else:
        return t
    return _flatten_nested(t)


@functools.lru_cache(maxsize=4096)
def _flatten_nested(t) -> tuple:
    out = []
    for v in t:
        if type(v) is tuple:
            out.extend(flatten(v))
        else:
            out.append(v)
    return tuple(out)


def product(t):
    """The product of the leaves of t (1 for ())."""
    if type(t) is not tuple:
        return t
    r = 1
    for v in t:
        r = mul(r, product(v))
    return r


def product_each(t) -> tuple:
    """The product of each top-level mode of t (t wrapped to a tuple when it is an int)."""
    return tuple(product(v) for v in t) if type(t) is tuple else (t,)


def inner_product(a, b):
    """sum of a_i * b_i over the leaves of congruent a, b."""
    if type(a) is tuple:
        r = 0
        for x, y in zip(a, b):
            r = add(r, inner_product(x, y))
        return r
    return mul(a, b)


def prefix_product(a, init=1):
    """Exclusive prefix product of a, congruent to a: the compact column-major strides."""
    if type(a) is tuple:
        out = []
        for v in a:
            out.append(prefix_product(v, init))
            init = mul(init, product(v))
        return tuple(out)
    return init


def compact_col_major(shape, current=1):
    """Column-major strides for shape starting at current; a size-1 mode gets stride 0 (CuTe's
    compact_major<LayoutLeft> for static 1s; pycute's prefix_product gives it the running product)."""
    if type(shape) is tuple:
        out = []
        for v in shape:
            out.append(compact_col_major(v, current))
            current = mul(current, product(v))
        return tuple(out)
    return 0 if type(shape) is int and shape == 1 else current


def ceil_div(a, b):
    """CuTe's ceil_div on IntTuples: int/int rounds up; tuple/int folds b through a's modes;
    tuple/tuple is by mode (missing modes of b are 1); int/tuple divides by product(b)."""
    if type(a) is tuple:
        if type(b) is tuple:
            if len(b) > len(a):
                raise LayoutError(f"ceil_div: divisor {fmt(b)} has more modes than {fmt(a)}")
            return tuple(ceil_div(x, y) for x, y in zip(a, b + (1,) * (len(a) - len(b))))
        out = []
        for v in a:
            out.append(ceil_div(v, b))
            b = ceil_div(b, product(v))
        return tuple(out)
    if type(b) is tuple:
        return ceil_div_int(a, product(b))
    return ceil_div_int(a, b)


def shape_div(a, b):
    """CuTe's shape_div: like ceil_div, but each int/int step needs a | b or b | a."""
    if type(a) is tuple:
        if type(b) is tuple:
            if len(a) != len(b):
                raise LayoutError(f"shape_div: {fmt(a)} and {fmt(b)} have different ranks")
            return tuple(shape_div(x, y) for x, y in zip(a, b))
        out = []
        for v in a:
            out.append(shape_div(v, b))
            b = shape_div(b, product(v))
        return tuple(out)
    if type(b) is tuple:
        return shape_div(a, product(b))
    ok = divides(b, a)
    if ok is not True:
        ok = divides(a, b) if ok is False else (divides(a, b) or None)
    require(ok, lambda: f"{fmt(b)} divides {fmt(a)} or {fmt(a)} divides {fmt(b)}", "shape_div",
            (either(lambda x, y: divides(y, x), divides), [a, b]))
    return ceil_div_int(a, b)


def congruent(a, b) -> bool:
    """a and b have the same nesting profile."""
    if type(a) is tuple:
        return type(b) is tuple and len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return type(b) is not tuple


def _idx_mod_div(idx, s):
    if type(idx) is int and type(s) is int:
        return idx % s, idx // s
    rem = symbolic.mod(idx, s) if type(s) is int else idx % s
    return symbolic.norm(rem), symbolic.norm(idx // s)


def crd2idx(crd, shape, stride=None):
    """The index of coordinate crd in (shape, stride); stride defaults to column-major.

    An int coordinate against a tuple shape is split colexicographically, the last mode taking
    what is left (CuTe's extension of a layout beyond its size).

    >>> crd2idx((1, 2), (4, 3), (3, 1))
    5
    >>> crd2idx(5, (4, 3))
    5
    """
    if stride is None:
        stride = prefix_product(shape)
    if type(crd) is tuple:
        if type(shape) is not tuple or len(crd) != len(shape):
            raise LayoutError(f"coordinate {fmt(crd)} does not match shape {fmt(shape)}")
        r = 0
        for c, s, d in zip(crd, shape, stride):
            r = add(r, crd2idx(c, s, d))
        return r
    if type(shape) is tuple:
        r = 0
        last = len(shape) - 1
        for i, (s, d) in enumerate(zip(shape, stride)):
            if i == last:
                return add(r, crd2idx(crd, s, d))
            c, crd = _idx_mod_div(crd, product(s))
            r = add(r, crd2idx(c, s, d))
        return r
    return mul(crd, stride)


def idx2crd(idx, shape, stride=None):
    """The natural (hierarchical) coordinate of idx in shape.

    Without stride: colexicographic split, the last mode taking what is left. With stride (CuTe's
    idx2crd(idx, shape, stride)): each leaf is (idx // stride) % shape.

    >>> idx2crd(5, (4, 3))
    (1, 1)
    >>> idx2crd(17, (2, 16), (16, 1))
    (1, 1)
    """
    if stride is not None:
        if type(shape) is tuple:
            return tuple(idx2crd(idx, s, d) for s, d in zip(shape, stride))
        if is_one(shape):
            return 0
        if is_zero(stride):
            raise LayoutError(f"idx2crd: a mode of shape {fmt(shape)} has stride 0, so its "
                              "coordinate cannot be recovered from an index")
        q = idx // stride if type(idx) is int and type(stride) is int else symbolic.norm(idx // stride)
        return _idx_mod_div(q, shape)[0]
    if type(shape) is tuple:
        out = []
        last = len(shape) - 1
        for i, s in enumerate(shape):
            if i == last:
                out.append(idx2crd(idx, s))
            else:
                c, idx = _idx_mod_div(idx, product(s))
                out.append(idx2crd(c, s))
        return tuple(out)
    return idx
