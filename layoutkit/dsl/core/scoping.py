"""A value used outside the region that made it: the TraceError that names the variable, the
op that defined it and both lines.

A value made inside `lk.if_` or `lk.range` (or another region: a warp role, `lk.sm90.elect_one()`)
exists only there: the branch may not run, and a loop body's value is one iteration's. The
tracer records each value's block as it is made (`Trace.home`) and checks each operand of an
op as the op is emitted (`Trace.emit`), so the error comes at the use, while tracing, with the
user's line, instead of the verifier's `uses %8, which is not defined before it`.

The variable's name is found by looking for the value among the locals of the user's frames
at the use (a Scalar holding it, a register tensor among whose values it is, a kernel integer
over the loop index bound to it); when none holds it, the value's id and type are shown.
"""
from __future__ import annotations

import sys

from layoutkit.algebra.sympy_gate import sympy

from .errors import TraceError, here

_INTERNAL = ("layoutkit", "sympy", "contextlib", "functools")
_REGIONS = {"if": ("lk.if_", "a branch",
                   "compute it before the lk.if_ (pick between values with lk.where), or use "
                   "it inside the branch"),
            "for": ("lk.range", "a loop body",
                    "carry it out of the loop: loop = lk.range(start, stop, carry=(initial,)), "
                    "loop.next(new value) in the body, loop.results after it")}


def escaped(trace, value, home, user: str, attrs=None, location=None) -> TraceError:
    """The error of op `user` using `value`, made in `home` = (block, op or None), a block that
    is no longer open."""
    block, op = home
    owner = trace.owner.get(id(block))
    region, inside, fix = _REGIONS.get(owner.name if owner is not None else "", (
        f"the {owner.name if owner is not None else '?'} region", "a region",
        "use it inside the region"))
    opened = _line(owner)
    where = location if location is not None else here()
    use = where.line if where is not None else "?"
    if op is None:
        index = bool(block.args) and block.args[0] is value
        defined = (f"is {'the loop index' if index else 'a carried value'} of the {region} "
                   f"opened at line {opened}")
        if index:
            fix = ("after the loop, use its bounds instead (the last index of a step-1 loop is "
                   "stop - 1), or carry a value out with carry=")
    else:
        defined = (f"is defined at line {_line(op)} (by {_op_name(op)}) inside the {region} "
                   f"opened at line {opened}")
    message = (f"{_name(trace, value)} {defined}; it is used at line {use} (by "
               f"{_op_name(user, attrs)}), outside it: a value made inside {inside} exists only "
               f"there; {fix}")
    return TraceError(message, where) if where is not None else TraceError(message)


def _line(op):
    return op.location.line if op is not None and op.location is not None else "?"


def _op_name(op, attrs=None) -> str:
    name, attrs = (op, attrs or {}) if isinstance(op, str) else (op.name, op.attrs)
    kind = attrs.get("kind")
    return f"`{name} {kind}`" if isinstance(kind, str) else f"`{name}`"


def _name(trace, value) -> str:
    """`v` (an f32 register tensor), or the value %8 (f32) when no user variable holds it."""
    described = f"{value!r} ({value.type})"
    found = _variable(trace, value)
    if found is None:
        return f"the value {described}"
    name, kind = found
    return f"`{name}` ({kind})"


def _variable(trace, value):
    from .constructs import _a
    from .values import RegisterTensor, Scalar
    symbols = {s for s, v in trace.symbols.items() if v is value}
    frame, seen = sys._getframe(1), 0
    while frame is not None and seen < 6:
        module = (frame.f_globals.get("__name__", "") or "").split(".")[0]
        if module not in _INTERNAL:
            seen += 1
            for name, local in _candidates(frame.f_locals):
                if local is value:
                    return name, f"{_a(value.type)} value"
                if isinstance(local, Scalar) and local.value is value:
                    return name, f"{_a(local.dtype)} scalar"
                if isinstance(local, RegisterTensor) and any(v is value for v in local.values):
                    return name, f"{_a(local.dtype)} register tensor"
                if symbols and isinstance(local, sympy.Basic) and local.free_symbols & symbols:
                    return name, f"the kernel integer {local}"
        frame = frame.f_back
    return None


def _candidates(local_vars):
    """(name, value) of a frame's locals, then of the items of its lists and tuples
    (`vals[2]`)."""
    items = [(n, v) for n, v in local_vars.items() if not n.startswith("__lk")]
    yield from items
    for name, local in items:
        if isinstance(local, (list, tuple)) and len(local) <= 256:
            for i, item in enumerate(local):
                yield f"{name}[{i}]", item


__all__ = ["escaped"]
