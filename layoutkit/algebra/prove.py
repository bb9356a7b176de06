"""The public prover: divisibility and order of integer expressions from declared facts.

Each answer is True (holds for every value of the symbols), False (fails for every value) or
None (not proven either way; unknown never means false). The facts used: an extent
``symbol(name, d)`` is a positive multiple of d; any other sympy symbol carries only its own
assumptions (``integer``, ``nonnegative``, ``positive``). Plain ints never touch sympy.
"""
from __future__ import annotations

from . import int_tuple
from .errors import LayoutError
from .sympy_gate import deferred_module, is_sympy, memoized

sympy = deferred_module("sympy")
symbolic = deferred_module("layoutkit.algebra.symbolic")

__all__ = ["divides", "less", "less_equal"]


def _operand(x, op: str, name: str):
    if type(x) is int or is_sympy(x):
        return x
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise LayoutError(f"{op}: {name} must be an int or a sympy integer expression, got {x!r}")
    return int(x)


def divides(d, n) -> bool | None:
    """Whether ``d`` divides ``n`` for every value of the symbols (None: not proven either way).

    >>> from layoutkit.algebra import symbol
    >>> M = symbol("M", 128)
    >>> divides(4, 12), divides(64, M), divides(256, M), divides(3, 128)
    (True, True, None, False)
    >>> t = sympy.Symbol("t", integer=True, nonnegative=True)
    >>> divides(4, 4 * t + M), divides(8, 4 * t + M)
    (True, None)
    """
    return int_tuple.divides(_operand(d, "divides", "d"), _operand(n, "divides", "n"))


def less(a, b) -> bool | None:
    """Whether ``a < b`` for every value of the symbols (None: not proven either way).

    >>> from layoutkit.algebra import symbol
    >>> M = symbol("M", 128)
    >>> t = sympy.Symbol("t", integer=True, nonnegative=True)
    >>> less(3, 5), less(127, M), less(128, M), less(M, 0), less(4 * t, 512)
    (True, True, None, False, None)
    >>> less(-1, t), less(t, M + t), less(M + 4 * t, 100), less(M + 4 * t, 200)
    (True, True, False, None)
    """
    a, b = _operand(a, "less", "a"), _operand(b, "less", "b")
    if type(a) is int and type(b) is int:
        return a < b
    lower, upper = _sign(sympy.sympify(b) - a)
    if lower == ">0":
        return True
    if upper is not None:
        return False
    return None


def less_equal(a, b) -> bool | None:
    """Whether ``a <= b`` for every value of the symbols (None: not proven either way).

    >>> from layoutkit.algebra import symbol
    >>> M = symbol("M", 128)
    >>> less_equal(128, M), less_equal(M, 2 * M), less_equal(M, 127), less_equal(256, M)
    (True, True, False, None)
    """
    a, b = _operand(a, "less_equal", "a"), _operand(b, "less_equal", "b")
    if type(a) is int and type(b) is int:
        return a <= b
    lower, upper = _sign(sympy.sympify(b) - a)
    if lower is not None:
        return True
    if upper == "<0":
        return False
    return None


@memoized
def _sign(expr):
    """(lower, upper) sign facts on expr over all symbol values: lower ">0", ">=0" or None,
    upper "<0", "<=0" or None. A term c * Mod(x, q) with q provably positive is bounded by
    Mod's range 0..q-1 (sympy's Mod takes the divisor's sign): the lower bound puts 0 where
    c > 0 and q - 1 where c < 0, the upper bound the other way round."""
    expr = symbolic._hidden(sympy.sympify(expr))
    mods = [m for m in expr.atoms(sympy.Mod) if _sign_of_polynomial(m.args[1] - 1)[0]]
    if mods:
        low, high = sympy.expand(expr), sympy.expand(expr)
        for mod in mods:
            coeff = sympy.expand(expr).coeff(mod)
            if not coeff.is_Number or sympy.expand(expr - coeff * mod).has(mod):
                break
            top = mod.args[1] - 1
            low = low.xreplace({mod: 0 if coeff >= 0 else top})
            high = high.xreplace({mod: top if coeff >= 0 else 0})
        else:
            return _sign_of_polynomial(low)[0], _sign_of_polynomial(high)[1]
    return _sign_of_polynomial(expr)


def _sign_of_polynomial(expr):
    """_sign without the Mod bounds.

    Each extent becomes d*q with q >= 1, and every other symbol must be nonnegative (an integer
    positive one is shifted to 1 + v, v >= 0); a polynomial in variables >= 0 whose non-constant
    coefficients are all >= 0 (<= 0) is bounded below (above) by its constant term. Otherwise
    sympy's own assumptions decide the sign."""
    expr = symbolic._hidden(expr)
    shift = {}
    for s in expr.free_symbols:
        if s.is_integer and s.is_positive:
            shift[s] = s + 1
        elif s.is_nonnegative:
            shift[s] = s
        else:
            shift = None
            break
    if shift is not None and expr.is_polynomial(*expr.free_symbols):
        shifted = sympy.expand(expr.xreplace(shift))
        variables = sorted(shifted.free_symbols, key=str)
        poly = sympy.Poly(shifted, *variables) if variables else None
        const = poly.coeff_monomial(1) if poly else shifted
        others = [c for m, c in poly.terms() if any(m)] if poly else []
        if const.is_Number and all(c.is_Number for c in others):
            lower = upper = None
            if all(c >= 0 for c in others):
                lower = ">0" if const > 0 else ">=0" if const >= 0 else None
            if all(c <= 0 for c in others):
                upper = "<0" if const < 0 else "<=0" if const <= 0 else None
            if lower or upper:
                return lower, upper
    lower = ">0" if expr.is_positive else ">=0" if expr.is_nonnegative else None
    upper = "<0" if expr.is_negative else "<=0" if expr.is_nonpositive else None
    return lower, upper
