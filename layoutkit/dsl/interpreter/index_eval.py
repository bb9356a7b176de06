"""Evaluation of `index` ops exactly as their lowering computes them (layoutkit.dsl.lower.index):
sums and products wrap at the register width; floor(p/q), ceiling(p/q) and Mod(p, q) by a
positive constant q have floor semantics for any sign of p (the lowering's shift/mask, or its
div/rem with the sign fix-up), and by a positive kernel integer q truncate (the lowering proves
p >= 0 there, where the two agree); Min and Max are min/max; a bound symbol of another width is
converted (sign-extended or truncated) first.

Each expression compiles once into a Python function of the bound values.

>>> import sympy
>>> t = sympy.Symbol("t", integer=True, nonnegative=True)
>>> f = compile_index(sympy.floor(t / 32) + 4 * t + 2 ** 31, (t,), 32)
>>> f(33)
-2147483515
"""
from __future__ import annotations

from layoutkit.algebra.sympy_gate import sympy

from ..core.errors import TraceError
from ..core.facts import positive_division
from .errors import ExecutionError


class _Source:
    """Python source text of an expression, with wrapping at `bits`.

    Wrapping is a ring homomorphism (wrap(wrap(a) + wrap(b)) == wrap(a + b), the same for *), so
    `ring_text` leaves sums, products, constants and symbols unwrapped and `text` wraps once
    where a value leaves the ring: the operands of divisions, Min and Max, and the result.
    The wrap is inline arithmetic, ((v + 2**(bits-1)) & (2**bits - 1)) - 2**(bits-1)."""

    def __init__(self, names: dict, bits: int):
        self.names, self.bits = names, bits

    def wrap(self, text: str) -> str:
        half = 1 << (self.bits - 1)
        return f"((({text}) + {half}) & {2 * half - 1}) - {half}"

    def text(self, expr) -> str:
        """The value wrapped to `bits`."""
        if isinstance(expr, (sympy.Min, sympy.Max)):
            fn = "min" if isinstance(expr, sympy.Min) else "max"
            return f"{fn}({', '.join(self.text(a) for a in expr.args)})"
        if isinstance(expr, (sympy.floor, sympy.ceiling, sympy.Mod)):
            return self.ring_text(expr)                 # already in range: no wrap needed
        if expr.is_Integer:
            return str(_wrap(int(expr), self.bits))
        return self.wrap(self.ring_text(expr))

    def ring_text(self, expr) -> str:
        """The value up to a multiple of 2**bits (wrap the text to get the register's)."""
        if expr.is_Integer:
            return str(int(expr))
        if isinstance(expr, sympy.Symbol):
            if expr not in self.names:
                raise TraceError(f"index symbol {expr} has no runtime value in this kernel")
            return self.names[expr]
        if isinstance(expr, sympy.Add):
            return " + ".join(f"({self.ring_text(a)})" for a in sympy.Add.make_args(expr))
        if isinstance(expr, sympy.Mul):
            coeff, rest = expr.as_coeff_Mul()
            if not coeff.is_Integer:
                raise TraceError(f"the index expression {expr} has a fractional coefficient; "
                                 "use floor division")
            factors = [f"({self.ring_text(f)})" for f in sympy.Mul.make_args(rest)]
            return " * ".join([str(int(coeff))] + factors)
        if isinstance(expr, (sympy.Min, sympy.Max)):
            return self.text(expr)
        if isinstance(expr, sympy.floor):
            num, den = sympy.fraction(sympy.together(expr.args[0]))
            return self._divide(expr, num, den, "floor")
        if isinstance(expr, sympy.ceiling):
            num, den = sympy.fraction(sympy.together(expr.args[0]))
            return self._divide(expr, num + den - 1, den, "floor")
        if isinstance(expr, sympy.Mod):
            return self._divide(expr, *expr.args, "mod")
        raise TraceError(f"the index expression {expr} ({type(expr).__name__}) cannot be "
                         "evaluated as integer arithmetic")

    def _divide(self, expr, num, den, kind: str) -> str:
        found = None if den.is_Integer else positive_division(num, den, negate=kind == "floor")
        if found is not None:
            num, den = found                            # a run-time divisor: div/rem
            q, p = self.text(den), self.text(num)
            return f"_tdiv({p}, {q})" if kind == "floor" else f"_trem({p}, {q})"
        if not (den.is_Integer and int(den) > 0):
            raise TraceError(f"{expr}: the divisor {den} is not a positive integer constant or "
                             "a provably positive kernel integer")
        d, p = int(den), self.text(num)
        return f"(({p}) // {d})" if kind == "floor" else f"(({p}) % {d})"


def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _tdiv(a: int, b: int) -> int:
    if b <= 0:
        raise ExecutionError(f"an index expression divides by {b}, a kernel integer the "
                             "kernel's facts declare positive: pass a positive value", None)
    q = abs(a) // b
    return q if a >= 0 else -q


def _trem(a: int, b: int) -> int:
    return a - b * _tdiv(a, b)


def compile_index(expr, symbols, bits: int):
    """A function of the symbols' values (in the order of `symbols`) giving `expr` as the
    lowering computes it in a `bits`-wide signed register."""
    expr = sympy.sympify(expr)
    names = {s: f"v{i}" for i, s in enumerate(symbols)}
    body = _Source(names, bits).text(expr)
    args = ", ".join(names[s] for s in symbols)
    scope = {"_tdiv": _tdiv, "_trem": _trem}
    return eval(f"lambda {args}: {body}", scope)   # noqa: S307 - text built from the IR above


__all__ = ["compile_index"]
