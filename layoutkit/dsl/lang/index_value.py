"""`lk.index_value`: a runtime integer (a value loaded from memory, a reduction's result) made a
kernel integer, so index expressions, tiles and `lk.range` bounds may use it like an integer
parameter: a packed batch's sequence bounds read from `cu_seqlens`, a page number from a block
table.

    cu = lk.load(offsets.tile((1,), (b,)).partition(everyone))      # one value, every thread
    start = lk.index_value(cu, name="start", lo=0)
    for i in lk.range(0, (stop - start + 127) // 128): ...

The value must be the same in every thread of the CTA that runs it (load it through a TV layout
whose threads all read one element): it is one register, with no per-thread meaning. The CPU
interpreter checks that (a DivergenceError naming two threads that disagree) and the stated
range (an ExecutionError). The static bounds take `lo..hi` for its range (unstated ends:
unknown, the type's range). The protocol check treats it as a parameter: where it bounds a
loop with barrier events, the check chooses its value by the same search as an integer
parameter's (check/extract.py), within `lo..hi`; its `name` appears in the check's "runtime
loops checked with ..." line. Lowering: the register itself (IR op `index_value`).
"""
from __future__ import annotations

from layoutkit.algebra.sympy_gate import sympy

from ..core.errors import TraceError
from ..core.tracer import current
from ..core.types import i32, i64
from ..core.values import RegisterTensor, Scalar


def index_value(x, *, name: str | None = None, lo: int | None = None,
                hi: int | None = None) -> sympy.Symbol:
    """The kernel integer of `x`, an i32/i64 Scalar or a register tensor of one value, the
    same in every thread of the CTA (see the module docstring); `name` its symbol (default
    `index_value<N>`, the first one free), `lo`/`hi` the range the author states (ints, or None)."""
    what = "lk.index_value"
    trace = current(what)
    if isinstance(x, RegisterTensor):
        if len(x.values) != 1:
            raise TraceError(f"{what}: a register tensor of one value per thread (a broadcast "
                             f"load), got {x.layout} with {len(x.values)} values")
        value = x.values[0]
    elif isinstance(x, Scalar):
        value = x.value
    else:
        raise TraceError(f"{what}: takes a runtime integer (a Scalar or a one-value register "
                         f"tensor, e.g. from lk.load), got {x!r}; a kernel integer already is "
                         "one")
    if value.type not in (i32, i64):
        raise TraceError(f"{what}: the value is an i32 or i64, got {value.type}; lk.cast it")
    for label, bound in (("lo", lo), ("hi", hi)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
            raise TraceError(f"{what}: {label} is a Python int or None, got {bound!r}")
    if lo is not None and hi is not None and lo > hi:
        raise TraceError(f"{what}: the stated range lo = {lo} .. hi = {hi} is empty")
    if name is None:
        taken = {str(s) for s in trace.symbols}
        name = next(f"index_value{n}" for n in range(len(taken) + 1)
                    if f"index_value{n}" not in taken)
    if not isinstance(name, str) or not name.isidentifier():
        raise TraceError(f"{what}: name is a Python identifier, got {name!r}")
    if any(str(s) == name for s in trace.symbols):
        raise TraceError(f"{what}: the name {name!r} already names a kernel integer of this "
                         "kernel (a parameter, an index or another lk.index_value); choose "
                         "another")
    (result,) = trace.emit("index_value", [value], [value.type],
                           {"name": name, "lo": lo, "hi": hi})
    sym = sympy.Symbol(name, integer=True,
                       positive=True if lo is not None and lo >= 1 else None,
                       nonnegative=True if lo is not None and lo >= 0 else None)
    return trace.bind(sym, result)


__all__ = ["index_value"]
