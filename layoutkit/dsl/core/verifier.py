"""The IR verifier: scoping (a value is used only after its definition, in its block or below),
single definition, operand and result types per op, vector widths and block terminators.

Tracing builds valid IR by construction; the verifier guards the DSL's own ops (and later
passes) so that a broken IR is a `VerifierError` naming the op and its source line, never bad
PTX or a hang.
"""
from __future__ import annotations

from .errors import VerifierError
from .ir import Block, Function, Op

BINARY = ("add", "sub", "mul", "div", "max", "min")
UNARY = ("neg", "abs", "exp2", "log2", "sqrt", "rsqrt", "rcp", "tanh")
CMP = ("lt", "le", "gt", "ge", "eq", "ne")


def fail(op: Op, rule: str) -> None:
    """Raise the VerifierError of `op` breaking `rule`."""
    raise VerifierError(f"IR op '{op.name}' (results {list(op.results)}): {rule}", op.location)


_fail = fail


def same_type(op: Op, values) -> None:
    """Fail unless `values` all have one type."""
    types = {v.type for v in values}
    if len(types) != 1:
        _fail(op, f"operands must have one type, got {sorted(map(str, types))}")


def _walk(block: Block, visible: set[int], defined: set[int]) -> None:
    scope = set(visible)
    for arg in block.args:
        if arg.id in defined:
            raise VerifierError(f"IR value {arg!r} is defined twice")
        defined.add(arg.id)
        scope.add(arg.id)
    for i, op in enumerate(block.ops):
        for v in op.operands:
            if v.id not in scope:
                _fail(op, f"uses {v!r}, which is not defined before it in this block or an "
                          "enclosing one")
        if op.name == "yield" and i != len(block.ops) - 1:
            _fail(op, "a yield ends its block")
        op.defn.verify(op)
        for inner in op.blocks:
            _walk(inner, scope, defined)
        for r in op.results:
            if r.id in defined:
                _fail(op, f"defines {r!r} a second time (SSA)")
            defined.add(r.id)
            scope.add(r.id)


def verify(fn: Function) -> Function:
    """Check `fn`; return it unchanged or raise VerifierError naming the op and its line."""
    defined: set[int] = set()
    top: set[int] = set()
    for op in fn.params:
        if op.name != "param":
            _fail(op, "kernel parameters are param ops")
        op.defn.verify(op)
        defined.add(op.results[0].id)
        top.add(op.results[0].id)
    _walk(fn.body, top, defined)
    for op in fn.body.ops:
        if op.name == "yield":
            _fail(op, "a yield belongs in a loop body, not the kernel body")
    return fn
