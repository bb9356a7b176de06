"""Runtime control flow: `lk.range` (a PTX loop, values carried across iterations) and
`lk.if_` (a PTX branch). Python `for`/`if` over constexprs unroll at trace time instead.

    for i in lk.range(0, n):                       # a loop with no carried values
        ...
    loop = lk.range(0, n, 4, carry=(acc,))         # acc carried: the body sees the current
    for i, (acc,) in loop:                         # value and hands the next one to
        loop.next(acc + x)                         # loop.next(...)
    (acc,) = loop.results
    with lk.if_(lk.thread_id() < n): ...           # a branch (no values flow out of it)
"""
from __future__ import annotations

import builtins
import contextlib

from layoutkit.algebra.sympy_gate import deferred_module, sympy

from ..core.errors import LayoutMismatchError, TraceError
from ..core.facts import provably_less
from ..core.ir import Block
from ..core.tracer import current, is_int_expr
from ..core.types import i32, i64
from ..core.conditions import condition
from ..core.values import RegisterTensor, Scalar, compare

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)

UNROLL = (None, 1, True)


def _flatten(what: str, items) -> list:
    values = []
    for item in items:
        if isinstance(item, RegisterTensor):
            values += item.values
        elif isinstance(item, Scalar):
            values.append(item.value)
        else:
            raise TraceError(f"{what}: a carried value is a register tensor or a scalar, got "
                             f"{item!r} (make a tensor with lk.full(layout, value, dtype))")
    return values


def _rebuild(like, values) -> tuple:
    out, at = [], 0
    for item in like:
        if isinstance(item, RegisterTensor):
            n = len(item.values)
            out.append(RegisterTensor(item.dtype, item.layout, values[at:at + n]))
            at += n
        else:
            out.append(Scalar(values[at]))
            at += 1
    return tuple(out)


class range:  # noqa: A001 - the DSL's counterpart of Python's range
    """`lk.range(start, stop, step=1, unroll=None, carry=())`: a runtime loop over integer
    expressions. `step` is a non-zero Python int. `unroll`: None lets ptxas decide, 1 forbids
    unrolling, True unrolls at trace time (needs int bounds). With `carry`, iterate `(i,
    carried)` and call `loop.next(...)` once per body; `loop.results` holds the final values."""

    def __init__(self, start, stop=None, step: int = 1, *, unroll=None, carry=()):
        if stop is None:
            start, stop = 0, start
        for name, bound in (("start", start), ("stop", stop)):
            if not is_int_expr(bound):
                raise TraceError(f"lk.range: {name} is an integer expression (a Python int or "
                                 f"a kernel integer), got {bound!r}")
        if isinstance(step, bool) or not isinstance(step, int) or step == 0:
            raise TraceError(f"lk.range: step is a non-zero Python int, got {step!r}")
        if unroll not in UNROLL or isinstance(unroll, bool) and unroll is not True:
            raise TraceError(f"lk.range: unroll is None (ptxas decides), 1 (never) or True "
                             f"(at trace time), got {unroll!r}")
        if unroll is True and not (isinstance(start, int) and isinstance(stop, int)):
            raise TraceError(f"lk.range(unroll=True) needs Python int bounds to unroll at trace "
                             f"time, got start={start}, stop={stop}")
        self.start, self.stop, self.step, self.unroll = start, stop, step, unroll
        self.carry = tuple(carry) if isinstance(carry, (tuple, list)) else (carry,)
        _flatten("lk.range carry", self.carry)
        self.results = None
        self._next = None

    def next(self, *values) -> None:
        """The carried values for the next iteration (same kinds, dtypes and layouts)."""
        if not self.carry:
            raise TraceError("loop.next(...): this lk.range carries no values (pass carry=)")
        if len(values) != len(self.carry):
            raise TraceError(f"loop.next: {len(self.carry)} carried values, got {len(values)}")
        for old, new in zip(self.carry, values):
            if type(old) is not type(new) or old.dtype != new.dtype:
                raise TraceError(f"loop.next: a carried {type(old).__name__} of {old.dtype} "
                                 f"cannot become {new!r}")
            if isinstance(old, RegisterTensor) and old.layout != new.layout:
                raise LayoutMismatchError(
                    "loop.next: the carried tensor changes layout\n"
                    f"      before: {old.layout}\n      after:  {new.layout}")
        self._next = values

    def _take_next(self):
        if self.carry and self._next is None:
            raise TraceError("the body of an lk.range with carry= must call loop.next(...)")
        values, self._next = self._next, None
        return values

    def __iter__(self):
        trace = current("lk.range")
        if self.unroll is True:
            carried = self.carry
            for i in builtins.range(self.start, self.stop, self.step):
                yield (i, carried) if self.carry else i
                if self.carry:
                    carried = tuple(self._take_next())
            self.results = carried
            return
        wide = any(sympy.sympify(b).free_symbols & trace.wide for b in (self.start, self.stop))
        itype = i64 if wide else i32
        bounds = [trace.index(self.start, itype), trace.index(self.stop, itype),
                  trace.constant(self.step, itype)]
        inits = _flatten("lk.range carry", self.carry)
        body = Block()
        iv = trace.fn.new_value(itype, "i")
        body.args = [iv] + [trace.fn.new_value(v.type) for v in inits]
        nonnegative = self.step > 0 and provably_less(-1, self.start) is True
        sym = trace.bind(trace.loop_symbol(nonnegative), iv)
        dependent = any(trace.thread_dependent(b) for b in (self.start, self.stop))
        results = trace.emit("for", bounds + inits, [v.type for v in inits],
                             {"unroll": self.unroll, "thread_dependent": dependent},
                             blocks=(body,))
        with trace.block(body):
            carried = _rebuild(self.carry, body.args[1:])
            yield (sym, carried) if self.carry else sym
            nxt = _flatten("loop.next", self._take_next()) if self.carry else []
            trace.emit("yield", nxt, ())
        self.results = _rebuild(self.carry, list(results))


def eq(a, b):
    """The run-time condition a == b, for lk.if_ and lk.where: a relation of kernel integers,
    or a bool scalar/tensor when a or b is a scalar or register tensor (Python's == would
    compare them while tracing, so the DSL refuses it on runtime values)."""
    if isinstance(a, (Scalar, RegisterTensor)) or isinstance(b, (Scalar, RegisterTensor)):
        return compare("eq", a, b)
    if _undecided(a, b):          # what sympy's evaluation returns, without its queries
        return sympy.Eq(a, b, evaluate=False)
    return sympy.Eq(a, b)


def ne(a, b):
    """The run-time condition a != b (see `eq`)."""
    if isinstance(a, (Scalar, RegisterTensor)) or isinstance(b, (Scalar, RegisterTensor)):
        return compare("ne", a, b)
    if _undecided(a, b):
        return sympy.Ne(a, b, evaluate=False)
    return sympy.Ne(a, b)


def _undecided(a, b) -> bool:
    """a == b is a thread / lane / warp index against an int it takes (and others):
    layoutkit.algebra.symbolic.attains."""
    return type(b) is int and isinstance(a, sympy.Basic) and symbolic.attains(a, b)


@contextlib.contextmanager
def if_(cond):
    """Run the body only where `cond` holds (a PTX branch). Values made inside stay inside."""
    trace = current("lk.if_")
    pred = condition(trace, cond)
    body = Block()
    trace.emit("if", [pred], (), {}, blocks=(body,))
    with trace.block(body):
        yield
