"""Symbolic extents: positive-integer sympy expressions with declared divisibility, and a prover.

``symbol("M", 128)`` is a positive-integer sympy Symbol ``M`` that carries its divisor; to prove
a fact, each extent is rewritten as ``128*q`` for a hidden positive-integer ``q``, so ``M/128``
is known exact and ``ceil_div(M, 64)`` simplifies to ``M/64``. Conditions an operation needs (divides, <=, ==) are decided by
``divides``/``le``/``eq``, which answer True, False or None (unknown); ``require`` turns an
unknown into a LayoutError that says the condition could not be proven from the declared facts.

Decisions that only shape the result's form (is this extent 1? can these two modes merge?) treat
an unproven fact as false, as CuTe treats a dynamic int: substituting values into a symbolic result
gives exactly the integer result whenever no symbolic extent of it becomes 1 (and, for a merge,
two different expressions do not happen to coincide); otherwise it is the same function with an
extra size-1 mode. Decisions an operation's correctness depends on are proven or raise.

Every function here is reached only when a sympy object is present: plain ints never touch sympy.
"""
from __future__ import annotations

import sympy

from .errors import LayoutError

__all__ = ["symbol", "is_symbolic", "norm", "divides", "le", "lt", "eq", "require", "display",
           "ceil_div", "exact_div", "substitute", "hidden_symbols", "Extent"]

class Extent(sympy.Symbol):
    """A positive-integer symbol that knows its declared divisor (part of its identity)."""

    __slots__ = ("divisor",)

    def __new__(cls, name: str, divisor: int):
        # Symbol.__xnew__ bypasses sympy's symbol cache, which would share one object between
        # extents of the same name and different divisors.
        obj = sympy.Symbol.__xnew__(cls, name, integer=True, positive=True)
        obj.divisor = divisor
        return obj

    def __getnewargs_ex__(self):
        return (self.name, self.divisor), {}

    def _hashable_content(self):
        return super()._hashable_content() + (self.divisor,)


def symbol(name: str, divisible_by: int = 1) -> Extent:
    """A positive-integer extent named ``name``, known to be a multiple of ``divisible_by``.

    >>> M = symbol("M", 128)
    >>> str(M), str(M / 64), str(ceil_div(M, 64)), str(ceil_div(M, 256))
    ('M', 'M/64', 'M/64', 'ceiling(M/256)')
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise LayoutError(f"symbol name must be a Python identifier, got {name!r}")
    if type(divisible_by) is not int or divisible_by < 1:
        raise LayoutError(f"symbol {name!r}: divisible_by must be a positive int, got {divisible_by!r}")
    return Extent(name, divisible_by)


def _hidden(x):
    """x with each extent E (a multiple of d) written as d*q for a positive-integer symbol q."""
    x = sympy.sympify(x)
    return x.xreplace({e: e.divisor * sympy.Symbol(f"{e.name}__q{e.divisor}", integer=True, positive=True)
                       for e in x.free_symbols if isinstance(e, Extent)})


def hidden_symbols(x) -> set:
    """The extents (symbol() results) in x."""
    return {e for e in x.free_symbols if isinstance(e, Extent)} if isinstance(x, sympy.Basic) else set()


def is_symbolic(x) -> bool:
    return isinstance(x, sympy.Basic) and not isinstance(x, sympy.Integer)


def norm(x):
    """A sympy result that is a plain integer becomes a Python int; anything else is kept."""
    if isinstance(x, sympy.Integer):
        return int(x)
    if isinstance(x, sympy.Basic) and not x.free_symbols:
        if x.is_integer:
            return int(x)
        raise LayoutError(f"value {x} is not an integer")
    return x


def expand(x):
    """x multiplied out, so that sums of products stay in one canonical form."""
    return sympy.expand(x)


def display(x) -> str:
    """The user-facing text of an extent expression."""
    return str(x).replace(" ", "")


def _shifted(expr):
    """expr with every hidden symbol h replaced by 1 + h (h >= 1 becomes h' >= 0), expanded."""
    return sympy.expand(expr.xreplace({h: h + 1 for h in expr.free_symbols}))


def _bounds(expr):
    """(lower, upper) facts on expr over all symbol values: each is ">0", ">=0", "<0", "<=0" or None."""
    expr = sympy.sympify(expr)
    if expr.is_Rational:
        return expr
    if expr.is_polynomial(*expr.free_symbols):
        shifted = _shifted(expr)
        if not shifted.free_symbols:
            return shifted
        poly = sympy.Poly(shifted, *shifted.free_symbols)
        coeffs = poly.coeffs()
        const = poly.as_expr().xreplace({h: 0 for h in shifted.free_symbols})
        if all(c >= 0 for c in coeffs):
            return ">0" if const > 0 else ">=0"
        if all(c <= 0 for c in coeffs):
            return "<0" if const < 0 else "<=0"
        return None
    if expr.is_positive:
        return ">0"
    if expr.is_nonnegative:
        return ">=0"
    if expr.is_negative:
        return "<0"
    if expr.is_nonpositive:
        return "<=0"
    return None


def le(a, b):
    """True/False when a <= b is provable/refutable for all symbol values, else None."""
    f = _bounds(_hidden(sympy.sympify(b) - a))
    if isinstance(f, sympy.Basic):
        return bool(f >= 0)
    return True if f in (">0", ">=0") else False if f == "<0" else None


def lt(a, b):
    """True/False when a < b is provable/refutable for all symbol values, else None."""
    f = _bounds(_hidden(sympy.sympify(b) - a))
    if isinstance(f, sympy.Basic):
        return bool(f > 0)
    return True if f == ">0" else False if f in ("<0", "<=0") else None


def eq(a, b):
    """True/False when a == b is provable/refutable for all symbol values, else None."""
    d = sympy.expand(_hidden(sympy.sympify(a) - b))
    if d == 0:
        return True
    f = _bounds(d)
    if isinstance(f, sympy.Basic):
        return bool(f == 0)
    return False if f in (">0", "<0") else None


def divides(d, n):
    """True/False when d | n is provable/refutable for all symbol values, else None."""
    if d == 0:
        return True if n == 0 else None
    q = sympy.cancel(_hidden(sympy.sympify(n) / d))
    if q.is_integer:
        return True
    if q.is_Rational:
        return False
    return None


def require(known, what: str, context: str):
    """Pass when ``known`` is True; raise LayoutError saying ``what`` failed or was unprovable."""
    if known is True:
        return
    if known is False:
        raise LayoutError(f"{context}: {what} does not hold")
    raise LayoutError(f"{context}: {what} could not be proven from the declared facts "
                      f"(declare divisibility with symbol(name, divisible_by=...))")


def exact_div(n, d, context: str):
    """n / d, proven exact."""
    require(divides(d, n), f"{display(d)} divides {display(n)}", context)
    return norm(sympy.cancel(sympy.sympify(n) / d))


def ceil_div(a, b):
    """ceiling(a / b) for positive b, simplified."""
    q = sympy.cancel(sympy.sympify(a) / b)
    if divides(b, a):
        return norm(q)
    if lt(0, a) and le(a, b):
        return 1
    return norm(sympy.ceiling(q))


def substitute(x, values: dict):
    """x with extents replaced per ``values`` (Extent -> int), as an int when closed."""
    if not isinstance(x, sympy.Basic):
        return x
    return norm(x.xreplace({e: v for e, v in values.items() if e in x.free_symbols}))


def resolve(mapping: dict, present: set) -> dict:
    """Turn a user mapping {symbol() result or its name: int} into {Extent: int}.

    Raises LayoutError when a value violates the declared divisibility or is not positive.
    """
    out = {}
    for key, value in mapping.items():
        if isinstance(key, str):
            targets = [e for e in present if e.name == key]
        elif isinstance(key, Extent):
            targets = [key]
        else:
            raise LayoutError(f"subs: key {key!r} is neither a symbol() result nor a symbol name")
        if type(value) is not int:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise LayoutError(f"subs: value for {key} must be an int, got {value!r}") from None
        for e in targets:
            if value < 1 or value % e.divisor:
                raise LayoutError(f"subs: {e.name}={value} violates the declared facts "
                                  f"({e.name} is a positive multiple of {e.divisor})")
            out[e] = value
    return out
