"""load / store between a thread's partition of a global or shared tensor and a register tensor.

The access is split into chunks of `vec` consecutive value indices, `vec` the widest power of
two (at most 16 bytes) such that, for every chunk: the register and memory layouts agree on it
(max_common_vector of the two), its address is provably vec-aligned (pointer alignment fact and
symbolic offsets), its bounds mask is the same for all its elements, and (shared memory) a
swizzle Sw<B,M,S> keeps it contiguous (vec <= 2**M). Elements outside the bounds of a global
tensor are not accessed (a load gives `other` there). A bounds check `coordinate < bound` runs
in 32 bits when both fit (core/bounds.needs_64_bits: the bound's range provably inside i32, no
lk.i64 or lk.u32 symbol in either), else in 64 bits; addresses are always 64-bit.
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.algebra import Layout, LayoutError, max_common_vector
from layoutkit.algebra.sympy_gate import sympy

from ..core.bounds import needs_64_bits
from ..core.errors import LayoutMismatchError, TraceError
from ..core.facts import provably_divisible, provably_less
from .global_tensor import GlobalTensor
from .shared import SharedTensor, shared_access
from ..core.tracer import current
from ..core.types import bool_, i32, i64
from ..core.values import RegisterTensor, _operand


@dataclass(frozen=True)
class Chunk:
    first: int          # first value index
    vec: int            # number of values
    offset: object      # element offset of the first value (sympy or int)
    checks: tuple       # ((coordinate, bound), ...) still to test at run time
    never: bool         # provably outside the bounds


def _values_layout(view: GlobalTensor) -> Layout:
    return Layout(view.tv.layout[1].shape)


def _coordinate(view: GlobalTensor, mode: int, v: int):
    layout, base = view.coords[mode]
    return sympy.sympify(base + layout(v))


def _uniform(view: GlobalTensor, v0: int, vec: int) -> bool:
    """The bounds mask is the same for values v0 .. v0+vec-1."""
    if view.bounds is None or vec == 1:
        return True
    for mode, bound in enumerate(view.bounds):
        if bound is None:                       # a broadcast mode: never masked
            continue
        first = _coordinate(view, mode, v0)
        deltas = [sympy.simplify(_coordinate(view, mode, v0 + k) - first) for k in range(vec)]
        if all(d == 0 for d in deltas):
            continue
        if all(d == k for k, d in enumerate(deltas)) and provably_divisible(first, vec) and \
                provably_divisible(bound, vec):
            continue
        return False
    return True


def _aligned(view, v0: int, vec: int) -> bool:
    nbytes = vec * view.dtype.nbytes
    if nbytes > view.alignment:
        return False
    return provably_divisible(view.offset + view.layout(v0), vec)


def plan(view) -> list[Chunk]:
    """The chunks of a load/store of `view` (a thread's partition of a global or shared
    tensor); see the module docstring."""
    n = view.tv.num_values
    try:
        common = max_common_vector(view.layout, _values_layout(view))
    except LayoutError:
        common = 1
    common = common if isinstance(common, int) else 1
    vec = 1
    while vec * 2 <= min(common, 16 // view.dtype.nbytes, view.max_vector) and common % (vec * 2) == 0 \
            and n % (vec * 2) == 0:
        vec *= 2
    while vec > 1 and not all(_aligned(view, v0, vec) and _uniform(view, v0, vec)
                              for v0 in range(0, n, vec)):
        vec //= 2
    return chunks_of(view, vec)


def chunks_of(view, vec: int) -> list[Chunk]:
    """The partition `view` cut into chunks of `vec` consecutive values, each with the bounds
    checks that tracing could not prove (and `never` when one provably fails)."""
    chunks = []
    for v0 in range(0, view.tv.num_values, vec):
        checks, never = [], False
        for mode, bound in enumerate(view.bounds or ()):
            if bound is None:
                continue
            coordinate = _coordinate(view, mode, v0)
            known = provably_less(coordinate, bound)
            if known is False:
                never = True
            elif known is None:
                checks.append((coordinate, bound))
        chunks.append(Chunk(v0, vec, sympy.sympify(view.offset + view.layout(v0)),
                            tuple(checks), never))
    return chunks


def _mask(trace, checks):
    mask = None
    for coordinate, bound in checks:
        dtype = i64 if needs_64_bits(trace, coordinate, bound) else i32
        key = ("in_bounds", sympy.sympify(coordinate), sympy.sympify(bound), dtype)
        p = trace._lookup(key)
        if p is None:
            (p,) = trace.emit("cmp", [trace.index(coordinate, dtype), trace.index(bound, dtype)],
                              [bool_], {"kind": "lt"})
            trace.memo[-1][key] = p
        mask = p if mask is None else trace.emit("logic", [mask, p], [bool_], {"kind": "and"})[0]
    return mask


def _address(trace, offset):
    disp, rest = sympy.sympify(offset).as_coeff_Add()
    if not disp.is_Integer:
        disp, rest = 0, offset
    return trace.index(rest, i64), int(disp)


def _check_view(what: str, view) -> None:
    if not isinstance(view, (GlobalTensor, SharedTensor)) or view.tv is None:
        raise TraceError(f"{what} takes a thread's partition of a global or shared tensor "
                         f"(tensor.tile(...).partition(tv)), got {view!r}")


def _shared_load(trace, src: SharedTensor) -> RegisterTensor:
    values = [None] * src.tv.num_values
    for chunk in plan(src):
        values[chunk.first:chunk.first + chunk.vec] = shared_access(
            trace, src.alloc, src.dtype, src.swizzle, chunk.offset, chunk.vec)
    return RegisterTensor(src.dtype, src.tv, values)


def _shared_store(trace, dst: SharedTensor, value: RegisterTensor) -> None:
    for chunk in plan(dst):
        shared_access(trace, dst.alloc, dst.dtype, dst.swizzle, chunk.offset, chunk.vec,
                      value.values[chunk.first:chunk.first + chunk.vec])


def load(src, *, other=0) -> RegisterTensor:
    """This thread's values of `src` (a partition of a global or shared tensor) as a register
    tensor with src's TV layout. Values outside a global tensor's bounds are `other` and are
    not read; values naming the same elements under the same mask (a broadcast) are read once."""
    _check_view("lk.load", src)
    trace = current("lk.load")
    if isinstance(src, SharedTensor):
        return _shared_load(trace, src)
    if not isinstance(other, (int, float)) or isinstance(other, bool):
        raise TraceError(f"lk.load: other= is a Python number, got {other!r}")
    values = [None] * src.tv.num_values
    loaded: dict = {}           # chunks naming the same elements (a broadcast) load them once
    for chunk in plan(src):
        key = (chunk.offset, chunk.vec, chunk.checks, chunk.never)
        if key in loaded:
            results = loaded[key]
        elif chunk.never:
            results = (_operand("lk.load other=", other, src.dtype),) * chunk.vec
        else:
            base, disp = _address(trace, chunk.offset)
            mask = _mask(trace, chunk.checks)
            operands = [src.ptr.value, base] + ([mask] if mask is not None else [])
            results = trace.emit("load", operands, [src.dtype] * chunk.vec,
                                 {"vec": chunk.vec, "masked": mask is not None, "disp": disp,
                                  "other": other})
        loaded[key] = results
        values[chunk.first:chunk.first + chunk.vec] = results
    return RegisterTensor(src.dtype, src.tv, values)


def in_bounds(view: GlobalTensor) -> RegisterTensor:
    """A bool register tensor with view's TV layout: True where the value lies inside the
    global tensor's bounds (the elements lk.load reads and lk.store writes), e.g. to keep the
    `other` values of a masked load out of a reduction: lk.where(lk.in_bounds(X), x, 0.0)."""
    _check_view("lk.in_bounds", view)
    trace = current("lk.in_bounds")
    if not isinstance(view, GlobalTensor):
        raise TraceError(f"lk.in_bounds takes a partition of a global tensor (shared tiles have "
                         f"no bounds), got {view!r}")
    values = [None] * view.tv.num_values
    for chunk in plan(view):
        mask = trace.constant(False, bool_) if chunk.never else _mask(trace, chunk.checks)
        values[chunk.first:chunk.first + chunk.vec] = \
            (mask if mask is not None else trace.constant(True, bool_),) * chunk.vec
    return RegisterTensor(bool_, view.tv, values)


def check_written_value(what: str, dst, value: RegisterTensor) -> None:
    """The rule of every op that writes a register tensor into a partition (lk.store,
    lk.atomic_add, lk.sm90.dsmem_store*): the partition's TV layout (never converted
    implicitly) and its element type (cast explicitly)."""
    if value.layout != dst.tv:
        raise LayoutMismatchError(
            f"{what}: the register tensor and the destination partition have different "
            f"layouts\n      register tensor: {value.layout}\n      destination:     {dst.tv}\n"
            "  layoutkit never converts layouts implicitly")
    if value.dtype != dst.dtype:
        raise TraceError(f"{what}: a {value.dtype} tensor into {dst.dtype} memory; cast it "
                         f"explicitly with lk.cast(x, lk.{dst.dtype})")


def store(dst, value: RegisterTensor) -> None:
    """Write the register tensor `value` to this thread's partition `dst` of a global or shared
    tensor (same TV layout and dtype; elements outside a global tensor's bounds are not
    written)."""
    _check_view("lk.store", dst)
    trace = current("lk.store")
    if not isinstance(value, RegisterTensor):
        raise TraceError(f"lk.store writes a register tensor, got {value!r}")
    check_written_value("lk.store", dst, value)
    if isinstance(dst, SharedTensor):
        _shared_store(trace, dst, value)
        return
    for chunk in plan(dst):
        if chunk.never:
            continue
        base, disp = _address(trace, chunk.offset)
        mask = _mask(trace, chunk.checks)
        data = list(value.values[chunk.first:chunk.first + chunk.vec])
        operands = [dst.ptr.value, base, *data] + ([mask] if mask is not None else [])
        trace.emit("store", operands, (), {"vec": chunk.vec, "masked": mask is not None,
                                           "disp": disp})
