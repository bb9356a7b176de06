"""Facts about the kernel's integer expressions: divisibility and sign, proven from the declared
facts of the symbols (an extent `symbol(name, d)` is a positive multiple of d; thread, block and
loop indices are non-negative integers), by layoutkit.algebra's prover. Unknown means "not
proven", never "false"."""
from __future__ import annotations

import sympy

from layoutkit.algebra import divides, less


def provably_divisible(expr, d: int) -> bool:
    """True when every value of the integer expression `expr` is a multiple of `d`.

    >>> from layoutkit.algebra import symbol
    >>> n, t = symbol("n", 16), sympy.Symbol("t", integer=True, nonnegative=True)
    >>> provably_divisible(4 * t + n, 4), provably_divisible(4 * t + n, 8)
    (True, False)
    """
    return d == 1 or divides(d, expr) is True


def provably_less(a, b) -> bool | None:
    """True / False when a < b holds / fails for every value of the symbols, None when unknown."""
    return less(a, b)


def within_block(expr, tid, threads: int):
    """expr with floor(tid/q) -> 0 and Mod(tid, q) -> tid for q >= threads (0 <= tid < threads):
    the thread index's bound, which the symbol's assumptions cannot carry.

    >>> t = sympy.Symbol("tid", integer=True, nonnegative=True)
    >>> within_block(8 * sympy.Mod(t, 256) + sympy.floor(t / 256) + sympy.floor(t / 32), t, 256)
    8*tid + floor(tid/32)
    """
    def floor_(arg):
        num, den = sympy.fraction(sympy.together(arg))
        if num == tid and den.is_Integer and den >= threads:
            return sympy.Integer(0)
        return sympy.floor(arg)

    def mod_(a, q):
        if a == tid and q.is_Integer and q >= threads:
            return tid
        return sympy.Mod(a, q)
    expr = sympy.sympify(expr)
    return expr.replace(sympy.floor, floor_).replace(sympy.Mod, mod_)
