"""Handlers of global and shared loads and stores.

Global: the byte address is `pointer + (offset + disp) * sizeof(dtype)` (layoutkit.dsl.lower.function);
a masked-off access touches nothing and a load gives `other`. Shared: the byte offset is
`base + disp * n + Sw(offset) * n` with the buffer's swizzle Sw applied to the 32-bit element
offset exactly as layoutkit.dsl.lower.shared emits it (y = x ^ ((x & yyy_mask) >> S)), so a
wrong swizzle shows in the data. Every access is checked against its array or buffer and for
alignment to its width, and against the claims of pending asynchronous operations.
"""
from __future__ import annotations

from layoutkit.algebra import Swizzle

from . import numerics
from .executor import Step, handler
from .memory import decode, encode

_U32 = 0xFFFFFFFF


def swizzle_function(swizzle):
    """The element-offset swizzle of a shared access's attrs (None: identity), on u32 values."""
    if swizzle is None:
        return None
    sw = Swizzle(*swizzle)
    mask, shift = sw.yyy_mask, sw.shift
    if shift >= 0:
        return lambda x: x ^ ((x & mask) >> shift)
    return lambda x: x ^ ((x & mask) << -shift)


@handler("load")
def _load(op, compiler):
    vec, masked, disp = op.attrs["vec"], op.attrs["masked"], op.attrs["disp"]
    dtype = op.operands[0].type.dtype
    ptr, offset = op.operands[0].id, op.operands[1].id
    mask = op.operands[2].id if masked else None
    results = tuple(r.id for r in op.results)
    other = numerics.to_dtype(op.attrs["other"], dtype)
    nbytes = vec * dtype.nbytes
    what = f"the load of {vec} x {dtype}"

    def run(thread):
        env = thread.env
        if mask is not None and not env[mask]:
            for r in results:
                env[r] = other
            return
        raw = thread.cta.machine.memory.access(env[ptr], (env[offset] + disp) * dtype.nbytes,
                                               nbytes, nbytes, what, op)
        for r, value in zip(results, decode(raw.copy(), dtype)):
            env[r] = value
    return Step(run, op, preempt=True)


@handler("store")
def _store(op, compiler):
    vec, masked, disp = op.attrs["vec"], op.attrs["masked"], op.attrs["disp"]
    dtype = op.operands[0].type.dtype
    ptr, offset = op.operands[0].id, op.operands[1].id
    data = tuple(v.id for v in op.operands[2:2 + vec])
    mask = op.operands[-1].id if masked else None
    nbytes = vec * dtype.nbytes
    what = f"the store of {vec} x {dtype}"

    def run(thread):
        env = thread.env
        if mask is not None and not env[mask]:
            return
        raw = thread.cta.machine.memory.access(env[ptr], (env[offset] + disp) * dtype.nbytes,
                                               nbytes, nbytes, what, op)
        raw[:] = encode([env[v] for v in data], dtype)
    return Step(run, op, preempt=True)


def _shared_address(op, dtype):
    """A function of the element offset giving the access's byte offset in shared memory."""
    swizzle = swizzle_function(op.attrs["swizzle"])
    n = dtype.nbytes
    constant = op.attrs["base"] + op.attrs["disp"] * n
    if swizzle is None:
        return lambda offset: (constant + ((offset & _U32) * n & _U32)) & _U32
    return lambda offset: (constant + (swizzle(offset & _U32) * n & _U32)) & _U32


@handler("shared_load")
def _shared_load(op, compiler):
    dtype, vec = op.results[0].type, op.attrs["vec"]
    address = _shared_address(op, dtype)
    offset, buffer = op.operands[0].id, op.attrs["buffer"]
    results = tuple(r.id for r in op.results)
    nbytes = vec * dtype.nbytes
    what = f"the shared load of {vec} x {dtype} from {buffer}"

    def run(thread):
        start = address(thread.env[offset])
        cta = thread.cta
        shared = cta.shared
        shared.check_access(start, nbytes, nbytes, False, what, op, buffer)
        cta.machine.on_shared_access(thread, start, nbytes, False, what, op)
        env = thread.env
        for r, value in zip(results, decode(shared.view(start, nbytes).copy(), dtype)):
            env[r] = value
    return Step(run, op, preempt=True)


@handler("shared_store")
def _shared_store(op, compiler):
    vec = op.attrs["vec"]
    dtype = op.operands[1].type
    address = _shared_address(op, dtype)
    offset, buffer = op.operands[0].id, op.attrs["buffer"]
    data = tuple(v.id for v in op.operands[1:1 + vec])
    nbytes = vec * dtype.nbytes
    what = f"the shared store of {vec} x {dtype} to {buffer}"

    def run(thread):
        start = address(thread.env[offset])
        cta = thread.cta
        shared = cta.shared
        shared.check_access(start, nbytes, nbytes, True, what, op, buffer)
        env = thread.env
        new = encode([env[v] for v in data], dtype)
        target = shared.view(start, nbytes)
        cta.machine.on_shared_access(thread, start, nbytes, True, what, op, target == new)
        target[:] = new
    return Step(run, op, preempt=True)
