"""Facts about the kernel's integer expressions: divisibility and sign, proven from the declared
facts of the symbols (an extent `symbol(name, d)` is a positive multiple of d; thread, block and
loop indices are non-negative integers), by layoutkit.algebra's prover. Unknown means "not
proven", never "false"."""
from __future__ import annotations

from fractions import Fraction

from layoutkit.algebra import divides, less
from layoutkit.algebra.sympy_gate import deferred_module, memoized
from layoutkit.algebra.sympy_gate import sympy

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)


def provably_divisible(expr, d: int) -> bool:
    """True when every value of the integer expression `expr` is a multiple of `d`.

    >>> from layoutkit.algebra import symbol
    >>> n, t = symbol("n", 16), sympy.Symbol("t", integer=True, nonnegative=True)
    >>> provably_divisible(4 * t + n, 4), provably_divisible(4 * t + n, 8)
    (True, False)
    """
    return d == 1 or divides(d, expr) is True


def integer_by_form(expr) -> bool:
    """True when the sympy expression is an integer by its form alone: integers and integer
    symbols combined by +, integer multiples and products, non-negative integer powers, Mod (by
    a known nonzero divisor), Min and Max, and floor/ceiling of rational combinations of those
    (sympy's assumptions then say the same: each rule is one of theirs, without the assumption
    system's search, which takes |x| of every factor of a product). False means "not seen this
    way", not "not an integer".

    >>> t = sympy.Symbol("t", integer=True, nonnegative=True)
    >>> integer_by_form(4 * sympy.Mod(t, 8) + sympy.floor(t / 3) - 1), integer_by_form(t / 2)
    (True, False)
    """
    if expr.is_Integer:
        return True
    if expr.is_Symbol:
        return expr.is_integer is True
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        return _rational_by_form(expr.args[0])
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Min, sympy.Max)):
        return all(integer_by_form(a) for a in expr.args)
    if isinstance(expr, sympy.Mod):         # sympy's rule: p, q integers, q known nonzero
        p, q = expr.args
        return integer_by_form(p) and integer_by_form(q) and q.is_zero is False
    if isinstance(expr, sympy.Pow):
        return expr.exp.is_Integer and expr.exp >= 0 and integer_by_form(expr.base)
    return False


def _rational_by_form(expr) -> bool:
    """expr is a rational combination (sums, products, rational coefficients) of integers by
    form: a real number, so floor/ceiling of it is an integer."""
    if expr.is_Rational:
        return True
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        return all(_rational_by_form(a) for a in expr.args)
    return integer_by_form(expr)


@memoized
def fraction_of(arg) -> tuple:
    """(numerator, denominator) of a floor's or ceiling's argument over one denominator
    (sympy.fraction of sympy.together), remembered per argument: the trace, its bounds and the
    lowering ask it of the same few dozen arguments hundreds of times."""
    return sympy.fraction(sympy.together(arg))


def provably_less(a, b) -> bool | None:
    """True / False when a < b holds / fails for every value of the symbols, None when unknown.
    A constant a below the low end of b's interval under the symbols' declared signs
    (`interval`) is decided at once (a loop start or ring counter Max(1, ...) > -1): the
    prover's rewriting of each extent as a multiple of its divisor re-evaluates every Max, Min
    and floor of b (~70 ms for a causal attention tile's key-block count)."""
    if type(a) is int and isinstance(b, sympy.Basic):
        low = interval(b, sign_range)[0]
        if low is not None and a < low:
            return True
    if _both_ways(a, b):
        return None
    return less(a, b)


_LARGE = 1 << 20


def _both_ways(a, b) -> bool:
    """Whether two values of the symbols that their declared facts allow (an extent any multiple
    of its divisor, a positive or non-negative integer any such) give a < b at one and a >= b at
    the other: then neither a < b nor a >= b holds for every value, and the prover's answer is
    None (a bounds check of a coordinate against a tensor's extent, asked per chunk of every
    view; the prover's rewriting takes ms where two evaluations take us)."""
    symbols = set()
    for x in (a, b):
        if isinstance(x, sympy.Basic):
            symbols |= x.free_symbols
        elif type(x) is not int:
            return False
    if not symbols:
        return False
    low, high = {}, {}
    for s in symbols:
        divisor = getattr(s, "divisor", None)
        if divisor is not None:
            low[s], high[s] = divisor, divisor * _LARGE
        elif s.is_integer and (s.is_positive or s.is_nonnegative):
            low[s], high[s] = (1 if s.is_positive else 0), _LARGE
        else:
            return False
    extents = {s for s in symbols if getattr(s, "divisor", None) is not None}
    signs = set()
    for point in (low, high, {s: (high if s in extents else low)[s] for s in symbols},
                  {s: (low if s in extents else high)[s] for s in symbols}):
        ranges = {s: (v, v) for s, v in point.items()}.get
        values = [_interval(sympy.sympify(x), ranges) for x in (a, b)]
        if any(lo is None or lo != hi for lo, hi in values):
            return False
        signs.add(values[0][0] < values[1][0])
        if len(signs) == 2:
            return True
    return False


def sign_range(sym) -> tuple:
    """A symbol's range from its declared assumptions alone (positive: 1.., non-negative: 0..),
    for facts.interval where no trace is at hand (the lowering, the interpreter)."""
    return (1 if sym.is_positive else 0 if sym.is_nonnegative else None), None


def provably_nonnegative(expr) -> bool:
    """True when the integer expression is >= 0 for every value of its symbols' assumptions
    (its interval first: a Mod symbolic.mod built has no assumptions computed yet, and sympy's
    is_nonnegative of it costs ~0.3 ms)."""
    expr = sympy.sympify(expr)
    lo = interval(expr, sign_range)[0]
    if lo is not None and (lo >= 0 or _attains_its_ends(expr)):
        return lo >= 0             # (a negative low end a value takes: sympy cannot say >= 0)
    return expr.is_nonnegative is True


def _attains_its_ends(expr) -> bool:
    """Whether `interval` of expr under sign_range is attained: each symbol occurs once, under
    sums, rational multiples, floor, ceiling, Min and Max only (monotone in each symbol, so an
    end is the value at an end of the symbols' ranges, a value they take)."""
    seen: list = []

    def monotone(x) -> bool:
        if x.is_Rational:
            return True
        if x.is_Symbol:
            seen.append(x)
            return True
        if x.is_Mul:
            return sum(not a.is_Rational for a in x.args) == 1 and all(map(monotone, x.args))
        if isinstance(x, (sympy.Add, sympy.floor, sympy.ceiling, sympy.Min, sympy.Max)):
            return all(map(monotone, x.args))
        return False
    return monotone(expr) and len(seen) == len(set(seen))


def positive_division(num, den, *, negate: bool = True):
    """(num, den) of floor(num / den) with `den` a provably positive kernel integer (both
    negated where `den` is provably negative and `negate`: sympy writes t // ceil(n/q) as
    floor(-t / (8*floor(-n/q))); Mod(p, q) has no such rewrite, so it passes negate=False), or
    None when `den` is not proven positive (or negative, with `negate`)."""
    lo, hi = interval(den, sign_range)
    if den.is_positive or lo is not None and lo >= 1:
        return num, den
    if negate and (den.is_negative or hi is not None and hi <= -1):
        return sympy.expand(-num), sympy.expand(-den)
    return None


def within_block(expr, tid, threads: int):
    """expr with floor(tid/q) -> 0 and Mod(tid, q) -> tid for q >= threads (0 <= tid < threads):
    the thread index's bound, which the symbol's assumptions cannot carry.

    >>> t = sympy.Symbol("tid", integer=True, nonnegative=True)
    >>> within_block(8 * sympy.Mod(t, 256) + sympy.floor(t / 256) + sympy.floor(t / 32), t, 256)
    8*tid + floor(tid/32)
    """
    def floor_(arg):
        num, den = fraction_of(arg)
        if num == tid and den.is_Integer and den >= threads:
            return sympy.Integer(0)
        return sympy.floor(arg)

    def mod_(a, q):
        if a == tid and q.is_Integer and q >= threads:
            return tid
        return symbolic.mod(a, q)
    expr = sympy.sympify(expr)
    return expr.replace(sympy.floor, floor_).replace(sympy.Mod, mod_)


def interval(expr, ranges) -> tuple[int | None, int | None]:
    """(lowest, highest) value of the integer expression `expr` when each symbol s ranges over
    `ranges(s)` (a pair of ints, None for an unbounded end), by interval arithmetic over sums,
    products, floor(p/q), ceiling(p/q), Mod(p, q), Min and Max. The pair contains every value
    `expr` takes (it is exact when each symbol occurs once and linearly); an end that cannot be
    bounded is None.

    >>> t = sympy.Symbol("t", integer=True, nonnegative=True)
    >>> r = {t: (0, 127)}.get
    >>> interval(8 * sympy.Mod(t, 32) + 256 * sympy.floor(t / 32) + 3, r)
    (3, 1019)
    >>> interval(t - 200, r), interval(t * t, {t: (0, None)}.get), interval(sympy.Mod(t, 7), r)
    ((-200, -73), (0, None), (0, 6))
    >>> from layoutkit.algebra import symbol
    >>> M = symbol("M", 64)
    >>> interval(M / 64 + t, {M: (64, 2**31 - 64), t: (0, 127)}.get)
    (1, 33554558)
    >>> interval(sympy.Max(sympy.Min(sympy.ceiling(M / 128), t - 4), 1),
    ...          {M: (64, None), t: (0, 127)}.get)
    (1, 123)
    """
    if type(expr) is int:
        return expr, expr
    lo, hi = _interval(sympy.sympify(expr), ranges)
    # the expression's values are integers: a rational end rounds inward
    return (None if lo is None else -(-lo.numerator // lo.denominator),
            None if hi is None else hi.numerator // hi.denominator)


def _interval(expr, ranges):
    """interval() with Fraction ends (a term such as M/64 is rational on its own), narrowed by
    the ranges' `hints` (compound expressions lk.assume gave a range) where present."""
    hints = getattr(ranges, "hints", None)
    if not hints or expr.is_Symbol or expr.is_Rational:
        return _interval_plain(expr, ranges)
    lo, hi = _interval_plain(expr, ranges)
    hinted = hints.get(expr)
    if hinted is None and isinstance(expr, sympy.Add):
        hinted = _hinted_terms(expr, hints, ranges)
    if hinted is None:
        return lo, hi
    h_lo, h_hi = (None if e is None else Fraction(e) for e in hinted)
    return (lo if h_lo is None else h_lo if lo is None else max(lo, h_lo),
            hi if h_hi is None else h_hi if hi is None else min(hi, h_hi))


def _hinted_terms(expr, hints, ranges):
    """The range of a sum some of whose terms form a hinted expression: the hint's range plus
    the interval of the other terms (the first hint that fits)."""
    terms = set(expr.args)
    for hinted, (lo, hi) in hints.items():
        if not isinstance(hinted, sympy.Add) or not set(hinted.args) <= terms:
            continue
        rest_lo, rest_hi = _interval(sympy.Add(*(terms - set(hinted.args))), ranges)
        return (None if lo is None or rest_lo is None else lo + rest_lo,
                None if hi is None or rest_hi is None else hi + rest_hi)
    return None


def _interval_plain(expr, ranges):
    if expr.is_Rational:
        return Fraction(int(expr.p), int(expr.q)), Fraction(int(expr.p), int(expr.q))
    if isinstance(expr, sympy.Symbol):
        lo, hi = ranges(expr) or (None, None)
        return (None if lo is None else Fraction(lo), None if hi is None else Fraction(hi))
    if isinstance(expr, sympy.Add):
        lo, hi = 0, 0
        for term in expr.args:
            t_lo, t_hi = _interval(term, ranges)
            lo = None if lo is None or t_lo is None else lo + t_lo
            hi = None if hi is None or t_hi is None else hi + t_hi
        return lo, hi
    if isinstance(expr, sympy.Mul):
        acc = (1, 1)
        for factor in expr.args:
            acc = _times(acc, _interval(factor, ranges))
        return acc
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        acc, base = (1, 1), _interval(expr.base, ranges)
        for _ in range(int(expr.exp)):
            acc = _times(acc, base)
        return acc
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        num, den = fraction_of(expr.args[0])
        n_lo, n_hi = _interval(num, ranges)
        d_lo, d_hi = _interval(den, ranges)
        if d_lo is None or d_lo < 1:
            return None, None
        up = isinstance(expr, sympy.ceiling)

        def div(a, b):
            return -(-a // b) if up else a // b
        if den.is_Integer:
            return (None if n_lo is None else div(n_lo, d_lo),
                    None if n_hi is None else div(n_hi, d_lo))
        if n_lo is None or n_lo < 0:        # a run-time divisor: non-negative numerators only
            return None, None
        return (0 if d_hi is None else div(n_lo, d_hi), None if n_hi is None else div(n_hi, d_lo))
    if isinstance(expr, (sympy.Min, sympy.Max)):
        ends = [_interval(a, ranges) for a in expr.args]
        pick = min if isinstance(expr, sympy.Min) else max
        los, his = [lo for lo, _ in ends], [hi for _, hi in ends]
        if isinstance(expr, sympy.Min):     # an unbounded argument cannot lower a min's top
            lo = None if None in los else pick(los)
            his = [hi for hi in his if hi is not None]
            hi = pick(his) if his else None
        else:
            los = [lo for lo in los if lo is not None]
            lo = pick(los) if los else None
            hi = None if None in his else pick(his)
        return lo, hi
    if isinstance(expr, sympy.Mod):
        a_lo, a_hi = _interval(expr.args[0], ranges)
        q_lo, q_hi = _interval(expr.args[1], ranges)
        if q_lo is None or q_lo < 1:
            return None, None
        if q_lo == q_hi and a_lo is not None and a_hi is not None and \
                a_lo // q_lo == a_hi // q_lo:
            return a_lo % q_lo, a_hi % q_lo
        return 0, None if q_hi is None else q_hi - 1
    return None, None


def _times(a, b):
    """The interval product of two (lo, hi) pairs with None for unbounded ends."""
    if a == (0, 0) or b == (0, 0):
        return 0, 0
    if b[0] is not None and b[0] == b[1]:
        a, b = b, a
    if a[0] is not None and a[0] == a[1] and None in b:     # a constant times a half-line
        c = a[0]
        ends = [None if e is None else c * e for e in b]
        return tuple(ends) if c > 0 else (ends[1], ends[0])
    if None in a or None in b:
        if a[0] is not None and a[0] >= 0 and b[0] is not None and b[0] >= 0:
            return a[0] * b[0], None if None in (a[1], b[1]) else a[1] * b[1]
        return None, None
    corners = [x * y for x in a for y in b]
    return min(corners), max(corners)
