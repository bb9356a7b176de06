"""lk.atomic_add(dst, value): dst += value, element by element, as atomic reductions on global
memory (PTX `red.global.add.f32`, 2 or 4 consecutive values as one `red.global.add.v2/.v4.f32`),
for many CTAs summing into one f32 buffer (FlashAttention's backward accumulates dQ so).

`dst` is this thread's partition of a global f32 tensor and `value` an f32 register tensor in
the same TV layout (never converted implicitly); the access is cut into chunks as lk.store's
(lang/memory.plan: consecutive, aligned, uniformly masked values, here at most 4), and elements
outside the tensor's bounds are not touched. The reduction returns nothing and orders nothing:
its result is visible to the next kernel (or after a grid-wide fence the DSL does not have).
Global memory is outside the protocol check; the interpreter adds each chunk in one step.
"""
from __future__ import annotations

from layoutkit.ptx.isa import atomic

from ..core.errors import TraceError
from ..core.opdef import NoEffects
from ..core.tracer import current
from ..core.types import f32
from ..core.values import RegisterTensor
from ..core.verifier import fail
from ..interpreter.memory import decode, encode
from .global_tensor import GlobalTensor
from .memory import _address, _mask, check_written_value, plan
from .memory_ops import _GlobalAccess

DTYPES = (f32,)                        # the element types red.global.add takes here
VECTORS = (1,) + atomic.RED_VECTORS    # values per reduction


def atomic_add(dst, value: RegisterTensor) -> None:
    """Add the f32 register tensor `value` into this thread's partition `dst` of a global f32
    tensor (same TV layout), atomically per element; out-of-bounds elements are skipped."""
    what = "lk.atomic_add"
    trace = current(what)
    if not isinstance(dst, GlobalTensor) or dst.tv is None:
        raise TraceError(f"{what} adds into a thread's partition of a global tensor "
                         f"(tensor.tile(...).partition(tv)), got {dst!r}")
    if not isinstance(value, RegisterTensor):
        raise TraceError(f"{what} adds a register tensor, got {value!r}")
    if dst.dtype not in DTYPES:
        raise TraceError(f"{what}: the destination holds {dst.dtype}; atomic addition here is "
                         f"on {', '.join(str(t) for t in DTYPES)} memory")
    check_written_value(what, dst, value)
    for chunk in plan(dst):
        if chunk.never:
            continue
        for first in range(0, chunk.vec, VECTORS[-1]):      # plan allows 16 bytes: 4 f32
            vec = min(chunk.vec - first, VECTORS[-1])
            base, disp = _address(trace, chunk.offset)
            mask = _mask(trace, chunk.checks)
            data = list(value.values[chunk.first + first:chunk.first + first + vec])
            operands = [dst.ptr.value, base, *data] + ([mask] if mask is not None else [])
            trace.emit(AtomicAdd.name, operands, (), {"vec": vec, "masked": mask is not None,
                                                 "disp": disp + first})


class AtomicAdd(NoEffects, _GlobalAccess):
    """ptr, i64 element offset, vec f32 values[, mask]: [ptr + offset + disp ..] += values
    (vec 1, 2 or 4). Global memory is outside the protocol check."""

    name = "atomic_add"

    def verify(self, op):
        super().verify(op)
        if op.operands[0].type.dtype not in DTYPES or op.attrs["vec"] not in VECTORS:
            fail(op, f"adds 1, 2 or 4 values into {', '.join(map(str, DTYPES))} memory")

    def lower(self, op, lw):
        vec = op.attrs["vec"]
        mask = lw.operand(op.operands[-1]) if op.attrs["masked"] else True
        if mask is False:
            return
        data = [lw.reg(v) for v in op.operands[2:2 + vec]]
        atomic.red(lw.k, "global", "add", lw.global_address(op),
                   tuple(data) if vec > 1 else data[0], pred=None if mask is True else mask)

    def interpret(self, op, compiler):
        dtype = op.operands[0].type.dtype

        def add(raw, values):
            return encode([o + v for o, v in zip(decode(raw.copy(), dtype), values)], dtype)
        return self.write_step(op, "the atomic add", add)
