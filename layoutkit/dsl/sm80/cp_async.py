"""`lk.sm80.cp_async(dst, src)`: copy a thread's partition of a global tile into the same partition
of a shared tile asynchronously (cp.async, sm_80), in commit groups the author waits for:

    lk.sm80.cp_async(smem_tile.partition(tv), gmem_tile.partition(tv))   # any number of copies
    lk.sm80.cp_async_commit()                      # close the group (one pipeline stage)
    lk.sm80.cp_async_wait(n)                       # until at most n of this thread's groups pend
    lk.barrier()                              # ...and the other threads' copies are visible

Each copy moves the widest vector both partitions allow (16 bytes at most: both layouts
contiguous over it, both addresses provably aligned, the shared swizzle keeping it whole, one
bounds mask for all of it; see layoutkit.dsl.lang.memory). Elements outside the global tensor's
bounds (or where `mask` is false) are zero-filled: cp.async's src-size operand is 0 there, so
nothing is read. cp.async copies 4, 8 or 16 bytes (PTX ISA "cp.async"); where the layouts
allow only 2-byte accesses (a row length that is not a multiple of 2 elements, say), the copy
is a synchronous ld.global + st.shared of each element instead, with the same result.

IR ops:
  cp_async: ptr, offset(i64), inner(i32), outer(i32)[, mask] ->   bytes, vec, disp (global
            elements), buffer, base, sdisp, swizzle, masked, bank_ways. Copies `bytes` from
            ptr + (offset + disp) elements to shared element Sw(inner) + outer + sdisp of the
            buffer; where the mask is false it writes zeros and reads nothing.
  cp_async_commit: ->                   closes this thread's current group
  cp_async_wait: ->                     pending: waits until at most `pending` groups pend
"""
from __future__ import annotations

from layoutkit.algebra import LayoutError, composition
from layoutkit.algebra.sympy_gate import sympy

from ..core.errors import LayoutMismatchError, TraceError
from ..lang.global_tensor import GlobalTensor
from ..lang.memory import Chunk, _address, _mask, chunks_of, plan
from ..lang.shared import SharedTensor, shared_access
from .smem_address import bank_ways, split_swizzled
from ..core.tracer import current
from ..core.types import bool_, i32
from ..core.values import Scalar, _operand

CP_ASYNC_BYTES = (4, 8, 16)
MAX_PENDING = 255


def _check(dst, src, mask) -> None:
    if not isinstance(dst, SharedTensor) or dst.tv is None:
        raise TraceError("lk.sm80.cp_async: dst is a thread's partition of a shared tile "
                         f"(tile.partition(tv)), got {dst!r}")
    if not isinstance(src, GlobalTensor) or src.tv is None:
        raise TraceError("lk.sm80.cp_async: src is a thread's partition of a global tile "
                         f"(tile.partition(tv)), got {src!r}")
    if dst.tv != src.tv:
        raise LayoutMismatchError(
            "lk.sm80.cp_async: the shared and global partitions have different TV layouts\n"
            f"      dst (shared): {dst.tv}\n      src (global): {src.tv}\n"
            "  partition both tiles by the same TV layout: each thread copies its own values")
    if dst.dtype != src.dtype:
        raise TraceError(f"lk.sm80.cp_async copies bytes unchanged: a {src.dtype} tile into "
                         f"{dst.dtype} shared memory")
    if mask is not None and not (isinstance(mask, Scalar) and mask.dtype == bool_):
        raise TraceError(f"lk.sm80.cp_async: mask is a bool scalar (a comparison), got {mask!r}")


def _bank_ways(dst: SharedTensor, v0: int, nbytes: int):
    """The worst bank conflict of the first warp's shared writes of chunk v0 (None when the
    tile offset is symbolic beyond whole swizzle periods)."""
    tile = dst.parent
    if tile is None:
        return None
    offset = sympy.sympify(tile.offset)
    _, outer, _ = split_swizzled(offset, dst.swizzle)
    rest = sympy.expand(offset - outer) if dst.swizzle is not None else offset
    if rest.free_symbols:
        return None
    try:
        full = composition(tile.layout, dst.tv.layout)
        start = full[1](v0)
        elements = [int(rest) + full[0](t) + start for t in range(min(32, dst.tv.num_threads))]
    except LayoutError:
        return None
    if dst.swizzle is not None:
        elements = [dst.swizzle(e) for e in elements]
    return bank_ways([dst.alloc.offset + e * dst.dtype.nbytes for e in elements], nbytes)


def cp_async(dst: SharedTensor, src: GlobalTensor, *, mask=None) -> None:
    """Copy this thread's values of the global partition `src` into the shared partition
    `dst` (same TV layout) asynchronously; zero-fill outside src's bounds or where `mask`
    (a bool scalar) is false. Completes at lk.sm80.cp_async_wait of a later commit group."""
    what = "lk.sm80.cp_async"
    trace = current(what)
    _check(dst, src, mask)
    vec = min(plan(dst)[0].vec, plan(src)[0].vec)
    nbytes = vec * src.dtype.nbytes
    swizzle = None if dst.swizzle is None else (dst.swizzle.bits, dst.swizzle.base,
                                                  dst.swizzle.shift)
    for chunk in chunks_of(src, vec):
        shared_offset = dst.offset + dst.layout(chunk.first)
        keep = None if chunk.never else _mask(trace, chunk.checks)
        if mask is not None and not chunk.never:
            keep = mask.value if keep is None else \
                trace.emit("logic", [keep, mask.value], [bool_], {"kind": "and"})[0]
        if nbytes < CP_ASYNC_BYTES[0]:
            _copy_synchronously(trace, dst, src, chunk, shared_offset, keep)
            continue
        if chunk.never:
            keep = trace.constant(False, bool_)
        base, disp = _address(trace, chunk.offset)
        inner, outer, sdisp = split_swizzled(shared_offset, dst.swizzle)
        operands = [src.ptr.value, base, trace.index(inner, i32), trace.index(outer, i32)]
        trace.emit("cp_async", operands + ([keep] if keep is not None else []), (),
                   {"bytes": nbytes, "vec": vec, "disp": disp, "buffer": dst.alloc.name,
                    "base": dst.alloc.offset, "sdisp": sdisp, "swizzle": swizzle,
                    "masked": keep is not None,
                    "bank_ways": _bank_ways(dst, chunk.first, nbytes)})


def _copy_synchronously(trace, dst, src, chunk: Chunk, shared_offset, keep) -> None:
    """ld.global (zero where masked) + st.shared, for copies narrower than cp.async's 4 B."""
    if chunk.never:
        data = (_operand("lk.sm80.cp_async zero-fill", 0, src.dtype),) * chunk.vec
    else:
        base, disp = _address(trace, chunk.offset)
        operands = [src.ptr.value, base] + ([keep] if keep is not None else [])
        data = trace.emit("load", operands, [src.dtype] * chunk.vec,
                          {"vec": chunk.vec, "masked": keep is not None, "disp": disp,
                           "other": 0})
    shared_access(trace, dst.alloc, dst.dtype, dst.swizzle, shared_offset, chunk.vec, data)


def cp_async_commit() -> None:
    """Close this thread's current group of lk.sm80.cp_async copies (`cp.async.commit_group`)."""
    current("lk.sm80.cp_async_commit()").emit("cp_async_commit", (), ())


def cp_async_wait(pending: int) -> None:
    """Wait until at most `pending` of this thread's committed groups are still in flight
    (`cp.async.wait_group`). Other threads' copies need an lk.barrier() after it."""
    trace = current("lk.sm80.cp_async_wait()")
    if isinstance(pending, bool) or not isinstance(pending, int) or \
            not 0 <= pending <= MAX_PENDING:
        raise TraceError(f"lk.sm80.cp_async_wait: pending={pending!r} is the number of groups left "
                         f"in flight, a Python int in 0..{MAX_PENDING}")
    trace.emit("cp_async_wait", (), (), {"pending": pending})


__all__ = ["cp_async", "cp_async_commit", "cp_async_wait"]
