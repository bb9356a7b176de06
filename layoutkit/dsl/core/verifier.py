"""The IR verifier: scoping (a value is used only after its definition, in its block or below),
single definition, operand and result types per op, vector widths and block terminators.

Tracing builds valid IR by construction; the verifier guards the DSL's own ops (and later
passes) so that a broken IR is a `VerifierError` naming the op and its source line, never bad
PTX or a hang.
"""
from __future__ import annotations

from .errors import VerifierError
from .ir import Block, Function, Op
from .types import DType, PointerType, bool_, i32, i64

# Rules of the ops that other modules of the DSL define (mbarrier, roles, TMA, wgmma, mma):
# op name -> check(op), which calls `fail(op, rule)` when the op is malformed.
OP_RULES: dict = {}


def op_rule(*names: str):
    """Decorator: register `check(op)` as the verifier rule of the IR ops `names`."""
    def register(check):
        for name in names:
            if name in OP_RULES:
                raise ValueError(f"IR op {name!r} has a verifier rule already")
            OP_RULES[name] = check
        return check
    return register


BINARY = ("add", "sub", "mul", "div", "max", "min")
UNARY = ("neg", "abs", "exp2", "log2", "sqrt", "rsqrt", "rcp")
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


def legacy_check(op: Op) -> None:
    ops, res, a = op.operands, op.results, op.attrs
    name = op.name
    if name in ("load", "store"):
        _check_memory(op)
    elif name in ("shared_load", "shared_store"):
        _check_shared(op)
    elif name == "barrier":
        if ops or res:
            _fail(op, "takes no operands and has no results")
    elif name == "shfl":
        if len(ops) != 2 or ops[1].type != i32 or len(res) != 1 or res[0].type != ops[0].type \
                or ops[0].type.nbytes > 4 or a.get("mode") not in ("bfly", "idx"):
            _fail(op, "shuffles one value of at most 32 bits by an i32 lane, mode bfly or idx")
    elif name == "for":
        _check_for(op)
    elif name == "if":
        if len(ops) != 1 or ops[0].type != bool_ or len(op.blocks) != 1:
            _fail(op, "takes one bool and owns one block")
    elif name == "yield":
        pass
    elif name in OP_RULES:
        OP_RULES[name](op)
    else:
        _fail(op, "is not an op of the kernel IR")


def _check_memory(op: Op) -> None:
    vec, masked = op.attrs["vec"], op.attrs["masked"]
    ptr, offset = op.operands[0], op.operands[1]
    if not isinstance(ptr.type, PointerType) or offset.type != i64:
        _fail(op, "addresses a pointer plus an i64 element offset")
    data = op.results if op.name == "load" else op.operands[2:2 + vec]
    if vec not in (1, 2, 4, 8) or len(data) != vec:
        _fail(op, f"moves 1, 2, 4 or 8 values, got vec={vec} with {len(data)}")
    if vec * ptr.type.dtype.nbytes > 16:
        _fail(op, f"a vector access moves at most 16 bytes; {vec} x {ptr.type.dtype}")
    if any(v.type != ptr.type.dtype for v in data):
        _fail(op, f"values must be {ptr.type.dtype}, the pointer's element type")
    expected = 2 + (0 if op.name == "load" else vec) + (1 if masked else 0)
    if len(op.operands) != expected or (masked and op.operands[-1].type != bool_):
        _fail(op, "operands are ptr, offset, values (store), then the bool mask when masked")


def _check_shared(op: Op) -> None:
    vec = op.attrs["vec"]
    data = op.results if op.name == "shared_load" else op.operands[1:]
    if not op.operands or op.operands[0].type != i32:
        _fail(op, "addresses its buffer with an i32 element offset")
    if vec not in (1, 2, 4, 8) or len(data) != vec or len({v.type for v in data}) != 1:
        _fail(op, f"moves 1, 2, 4 or 8 values of one type, got vec={vec} with {len(data)}")
    if vec * data[0].type.nbytes > 16:
        _fail(op, f"a vector access moves at most 16 bytes; {vec} x {data[0].type}")


def _check_for(op: Op) -> None:
    start, stop, step, *inits = op.operands
    if len(op.blocks) != 1:
        _fail(op, "owns exactly one body block")
    body = op.blocks[0]
    if {start.type, stop.type, step.type} - {i32, i64} or len({start.type, stop.type,
                                                              step.type}) != 1:
        _fail(op, "start, stop and step are integers of one type")
    if len(body.args) != 1 + len(inits) or body.args[0].type != start.type:
        _fail(op, "the body's arguments are the induction variable then the carried values")
    if [v.type for v in body.args[1:]] != [v.type for v in inits] or \
            [v.type for v in op.results] != [v.type for v in inits]:
        _fail(op, "carried values keep their types (init, body argument and result)")
    last = body.ops[-1] if body.ops else None
    if last is None or last.name != "yield" or [v.type for v in last.operands] != \
            [v.type for v in inits]:
        _fail(op, "the body ends in a yield of the carried values")


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
        defined.add(op.results[0].id)
        top.add(op.results[0].id)
    _walk(fn.body, top, defined)
    for op in fn.body.ops:
        if op.name == "yield":
            _fail(op, "a yield belongs in a loop body, not the kernel body")
    return fn
