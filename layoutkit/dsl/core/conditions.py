"""Run-time conditions: the bool Value of a condition for `lk.if_`, `lk.where` and the ops that
take a predicate (wgmma's `accumulate`). A condition is a bool Scalar, a sympy relation of
kernel integers (`lk.thread_id() < n`, `lk.eq(a, b)`), relations joined with `&` and `|`, or a
relation sympy decided from the declared facts (a constant). A Python bool is refused: while
tracing it is fixed, typically a structural `==` of two expressions.
"""
from __future__ import annotations

import functools
from layoutkit.algebra.sympy_gate import sympy

from .errors import TraceError
from .types import bool_, i32, i64
from .values import Scalar


@functools.cache
def _relations() -> dict:
    """{sympy relation class: the cmp op's kind}, made at the first condition (sympy is imported
    then, not at the DSL's import)."""
    return {sympy.StrictLessThan: "lt", sympy.LessThan: "le", sympy.StrictGreaterThan: "gt",
            sympy.GreaterThan: "ge", sympy.Equality: "eq", sympy.Unequality: "ne"}


def condition(trace, cond, what: str = "lk.if_"):
    """A bool Value for `cond`: a bool Scalar, a sympy relation of kernel integers (or relations
    joined with & and |), or a relation sympy decided; `what` names the op in errors."""
    if isinstance(cond, Scalar):
        if cond.dtype != bool_:
            raise TraceError(f"{what}: the condition is a bool, got a {cond.dtype} scalar")
        return cond.value
    if isinstance(cond, bool):
        raise TraceError(f"{what}: the condition is the Python bool {cond}, fixed while tracing; "
                         "Python's == and != on kernel integers compare the expressions, not "
                         "their run-time values: write lk.eq(a, b) / lk.ne(a, b) (or <, <=, >, "
                         ">=), and use a plain Python `if` for a trace-time condition")
    if isinstance(cond, sympy.logic.boolalg.BooleanAtom):     # a relation sympy decided
        return trace.constant(bool(cond), bool_)
    if type(cond) in _relations():
        lhs, rhs = cond.args
        wide = (lhs.free_symbols | rhs.free_symbols) & trace.wide
        dtype = i64 if wide else i32
        (p,) = trace.emit("cmp", [trace.index(lhs, dtype), trace.index(rhs, dtype)], [bool_],
                          {"kind": _relations()[type(cond)]})
        return p
    if isinstance(cond, (sympy.And, sympy.Or)):      # (a < b) & (c < d), (a < b) | (c < d)
        kind = "and" if isinstance(cond, sympy.And) else "or"
        preds = [condition(trace, arg, what) for arg in cond.args]
        result = preds[0]
        for p in preds[1:]:
            (result,) = trace.emit("logic", [result, p], [bool_], {"kind": kind})
        return result
    raise TraceError(f"{what}: the condition is a bool scalar or a comparison of kernel "
                     f"integers (e.g. lk.thread_id() < n, joined with & or |), got {cond!r}")


__all__ = ["condition"]
