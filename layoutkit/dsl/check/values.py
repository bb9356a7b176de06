"""Integer and bool IR values of a kernel evaluated for every thread at once (numpy int64 arrays
over the threads of a CTA or cluster), for the static protocol check.

Values that depend only on parameters, thread/block/cluster indices and loop counters are
known; anything computed from memory contents (loads, shuffles, carried tensors) is UNKNOWN.
`index` expressions are exact integer arithmetic (floor division and modulo as sympy defines
them); the values the check uses are small, so the lowering's register wrap never matters.

>>> import sympy, numpy as np
>>> t = sympy.Symbol("t", integer=True)
>>> f = compile_expr(sympy.floor(t / 32) + sympy.Mod(t, 4), (t,))
>>> f(np.array([0, 33, 70])).tolist()
[0, 2, 4]
"""
from __future__ import annotations

import math

import numpy as np

from layoutkit.algebra.sympy_gate import sympy

UNKNOWN = None
_COMPILED: dict = {}
_BY_ID: dict = {}           # (id(expr), id(symbols)) -> (expr, symbols, function)
_ABSENT = object()          # a value id with no entry (UNKNOWN is a value: None)


class Unevaluable(Exception):
    """An index expression form the evaluator does not handle."""


def _text(expr, names: dict) -> str:
    if expr.is_Integer:
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        return names[expr]
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(_text(a, names) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if not coeff.is_Integer:
            n, den = _over_integer(expr, names)
            return f"(({n}) // {den})"
        return "(" + " * ".join([str(int(coeff))] + [_text(f, names) for f in
                                                       sympy.Mul.make_args(rest)]) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp >= 0:
        return f"({_text(expr.base, names)} ** {int(expr.exp)})"
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        n, den = _over_integer(expr.args[0], names)
        return f"(({n}) // {den})" if isinstance(expr, sympy.floor) else \
            f"(-((-({n})) // {den}))"
    if isinstance(expr, sympy.Mod):
        return f"(({_text(expr.args[0], names)}) % ({_text(expr.args[1], names)}))"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        fn = "_max" if isinstance(expr, sympy.Max) else "_min"
        return f"{fn}({', '.join(_text(a, names) for a in expr.args)})"
    raise Unevaluable(str(expr))


def _over_integer(expr, names: dict) -> tuple:
    """(the text of an integer n, an int d > 0) with expr = n / d exactly: each term a
    rational times a product of integer forms (no negative powers), d the lcm of the
    rationals' denominators; raises Unevaluable for any other form."""
    terms = []
    for term in sympy.Add.make_args(expr):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Rational or any(f.is_Pow and not (f.exp.is_Integer and f.exp >= 0)
                                        for f in sympy.Mul.make_args(rest)):
            raise Unevaluable(str(expr))
        terms.append((coeff, rest))
    den = math.lcm(*(int(c.q) for c, _ in terms))
    parts = [str(int(c * den)) if rest is sympy.S.One else
             f"{int(c * den)} * {_text(rest, names)}" for c, rest in terms]
    return " + ".join(parts), den


def _max(*args):
    out = args[0]
    for a in args[1:]:
        out = np.maximum(out, a)
    return out


def _min(*args):
    out = args[0]
    for a in args[1:]:
        out = np.minimum(out, a)
    return out


def compile_expr(expr, symbols):
    """A function of the symbols' values (ints or int64 arrays) computing the integer
    expression `expr` exactly; raises Unevaluable for forms it does not know."""
    known = _BY_ID.get((id(expr), id(symbols)))     # the IR's own objects: no sympy hash
    if known is not None and known[0] is expr and known[1] is symbols:
        fn = known[2]
    else:
        key = (expr, tuple(symbols))
        fn = _COMPILED.get(key)
        if fn is None:
            names = {s: f"v{i}" for i, s in enumerate(symbols)}
            try:
                body = _text(sympy.sympify(expr), names)
            except Unevaluable as exc:          # remembered too: the form stays unknown
                fn = exc
            else:
                args = ", ".join(names[s] for s in symbols)
                fn = eval(f"lambda {args}: {body}",  # noqa: S307 - text from the IR's sympy
                          {"_max": _max, "_min": _min})
            _COMPILED[key] = fn
        if len(_BY_ID) > 8192:       # a long-lived process: keep the fast path bounded
            _BY_ID.clear()
        _BY_ID[(id(expr), id(symbols))] = (expr, symbols, fn)   # held: the ids stay theirs
    if isinstance(fn, Unevaluable):
        raise Unevaluable(*fn.args)
    return fn


CHECK_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal}
CHECK_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
        "min": np.minimum}


class Fixed(dict):
    """value id -> int / int64 array over the threads; an array holding one value at every
    thread (a loop counter from 0 for all threads) is kept as that int, so that what is
    computed from it is computed once, not per thread."""

    def __setitem__(self, vid, value) -> None:
        if type(value) is np.ndarray and value.ndim == 1 and value.size and \
                value.dtype.kind == "i":
            first = value[0]
            if (value == first).all():
                value = int(first)
        dict.__setitem__(self, vid, value)


class Values:
    """Evaluates IR Values over all threads: `fixed` maps value ids to their known values
    (parameters, thread and block indices, loop counters); others are computed from their
    defining op on first use and kept until `forget` drops them (a loop's next iteration)."""

    def __init__(self, defs: dict, fixed: dict):
        self.defs = defs            # value id -> defining Op
        self.fixed = Fixed(fixed)   # value id -> int / array (set by the walker)
        self.memo: dict = {}

    def forget(self, ids) -> None:
        memo = self.memo
        if isinstance(ids, (set, frozenset)) and len(memo) < len(ids):   # the fewer keys
            for vid in [vid for vid in memo if vid in ids]:
                del memo[vid]
            return
        pop = memo.pop
        for vid in ids:
            pop(vid, None)

    def __call__(self, value):
        vid = value.id
        found = self.fixed.get(vid, _ABSENT)
        if found is not _ABSENT:
            return found
        found = self.memo.get(vid, _ABSENT)
        if found is not _ABSENT:
            return found
        op = self.defs.get(vid)
        result = UNKNOWN if op is None else self._compute(op, value)
        self.memo[vid] = result
        return result

    def _compute(self, op, value):
        args = [self(v) for v in op.operands]
        return op.defn.check_value(op, args)


__all__ = ["UNKNOWN", "Unevaluable", "Values", "compile_expr", "CHECK_BINARY", "CHECK_CMP"]
