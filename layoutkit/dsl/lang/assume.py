"""`lk.assume(condition)`: a fact about the kernel's integer parameters that the author knows and
the proofs may use, checked at every launch.

    def attention(q: lk.Tensor[lk.bf16, 4], k: lk.Tensor[lk.bf16, 4], ...):
        SQ, SK = q.shape[1], k.shape[1]
        lk.assume(SQ <= SK)                  # the host refuses a launch where it fails

`condition` is a relation of kernel integers (`<`, `<=`, `>`, `>=`, `lk.eq`, `lk.ne`), or several
joined with `&`, over the kernel's integer parameters only: scalar `lk.i32`/`lk.i64` parameters
and the extents and strides of `lk.Tensor` parameters (constexprs fold in). A thread, block or
loop index, or a loaded value, has no value on the host to check: stating a fact of one is a
TraceError (an `lk.index_value` takes its own `lo`/`hi`).

What uses it: the static bounds (layoutkit.dsl.core.bounds: each relation gives its expression
a range, e.g. SK - SQ >= 0, which interval arithmetic then applies wherever those terms
appear); the ring-state and mbarrier proofs through the same ranges; the protocol check, which
walks only parameter values satisfying every assumption. A condition that the declared facts
refute is a TraceError at its line; one that they prove is kept (it costs nothing).

Checked: at every launch on the host before anything reaches the GPU (`KernelArgumentError`
naming the condition, its line and the values: a kernel with assumptions launches through the
checked path), and by the CPU interpreter (an ExecutionError at the line). IR op `assume`; it
lowers to nothing.
"""
from __future__ import annotations

import functools
from layoutkit.algebra.sympy_gate import sympy

from ..core.bounds import add_fact, value_range
from ..core.conditions import condition
from ..core.errors import TraceError
from ..core.fingerprint import NotCacheable
from ..core.launch_plan import expression_json
from ..core.opdef import NoEffects, OpDef
from ..core.tracer import current
from ..core.types import bool_
from ..core.verifier import fail
from ..interpreter.errors import ExecutionError
from ..interpreter.executor import Step

@functools.cache
def _sides() -> dict:
    """{sympy relation class: (lo, hi) of `lhs - rhs` for lhs REL rhs}, made at the first
    lk.assume (sympy is imported then, not at the DSL's import)."""
    return {sympy.GreaterThan: (0, None), sympy.StrictGreaterThan: (1, None),
            sympy.LessThan: (None, 0), sympy.StrictLessThan: (None, -1), sympy.Equality: (0, 0)}


def _relations(what: str, cond) -> list:
    if isinstance(cond, sympy.And):
        return [r for arg in cond.args for r in _relations(what, arg)]
    if isinstance(cond, sympy.Rel):
        return [cond]
    if isinstance(cond, sympy.logic.boolalg.BooleanAtom):
        return [cond]
    raise TraceError(f"{what}: the condition is a comparison of kernel integers, or several "
                     f"joined with & (e.g. lk.assume((SQ <= SK) & (n > 0))), got {cond!r}")


def _parameter_symbols(trace) -> set:
    params = {op.results[0].id for op in trace.fn.params}
    return {sym for sym, value in trace.symbols.items() if value.id in params}


def assume(cond, *, why: str | None = None) -> None:
    """State `cond`, a fact of the kernel's integer parameters (see the module docstring).
    `why`: the rule that needs it, appended to its text (a launch that breaks it says so)."""
    what = f"lk.assume({cond})"
    trace = current("lk.assume")
    if isinstance(cond, bool):
        raise TraceError(f"lk.assume: the condition is the Python bool {cond}, fixed while "
                         "tracing; write a comparison of kernel integers (lk.eq(a, b) for ==)")
    relations = _relations(what, cond)
    params = _parameter_symbols(trace)
    for rel in relations:
        if rel is sympy.false:
            raise TraceError("lk.assume: the declared facts refute the condition (sympy "
                             "decided it false for every launch this specialization serves)")
        if rel is sympy.true:
            continue
        others = sorted((s for s in rel.free_symbols if s not in params), key=str)
        if others:
            raise TraceError(f"{what}: {others[0]} is not an integer parameter of the kernel; "
                             "lk.assume states facts of parameters (scalar lk.i32/lk.i64 "
                             "arguments, Tensor extents and strides), which the host checks at "
                             "every launch")
    for rel in relations:
        if not isinstance(rel, sympy.logic.boolalg.BooleanAtom):
            try:
                expression_json(rel.lhs), expression_json(rel.rhs)
            except NotCacheable:
                raise TraceError(f"{what}: the host checks sums, products, floor and ceiling "
                                 "division, Mod, min and max of parameters; this relation has "
                                 "another form") from None
    facts = []
    for rel in relations:
        if rel is sympy.true or isinstance(rel, sympy.Unequality):
            continue
        lo, hi = _sides()[type(rel)]
        diff = sympy.expand(rel.lhs - rel.rhs)
        const, rest = diff.as_coeff_Add()
        lo = None if lo is None else lo - int(const)
        hi = None if hi is None else hi - int(const)
        found_lo, found_hi = value_range(trace, rest)
        if lo is not None and found_hi is not None and found_hi < lo or \
                hi is not None and found_lo is not None and found_lo > hi:
            raise TraceError(f"{what}: the declared facts refute it ({rest} is in "
                             f"{found_lo}..{found_hi} for every launch this specialization "
                             "serves)")
        facts.append((rest, lo, hi))
    pred = condition(trace, cond, "lk.assume")
    trace.emit("assume", [pred], (), {"relation": cond,
                                     "text": str(cond) if why is None else f"{cond}: {why}"})
    for rest, lo, hi in facts:        # and its negation, as sums appear either way round
        add_fact(trace, rest, lo, hi)
        add_fact(trace, -rest, None if hi is None else -hi, None if lo is None else -lo)


class Assume(NoEffects, OpDef):
    """A fact of the integer parameters (its bool operand); lowers to nothing. The host checks
    it at every launch, the interpreter when the op runs, the protocol check walks only values
    satisfying it (check/extract.py)."""

    name = "assume"

    def verify(self, op):
        if len(op.operands) != 1 or op.operands[0].type != bool_ or op.results or \
                not isinstance(op.attrs.get("text"), str):
            fail(op, "takes one bool (its condition) and its text")

    def lower(self, op, lw):
        return None

    def interpret(self, op, compiler):
        pred, text = op.operands[0].id, op.attrs["text"]

        def run(thread):
            if not thread.env[pred]:
                raise ExecutionError(f"lk.assume({text}) does not hold for this launch",
                                     op.location)
        return Step(run, op)


__all__ = ["assume", "Assume"]
