"""The interpreter's model of TMA copies, as the hardware executes them (PTX ISA
"cp.async.bulk.tensor", "Tensor copy"); the ops' interpret facets (layoutkit.dsl.sm90.tma.ops)
run on it.

The tensor map is evaluated from the launch's arguments by the hidden parameter's resolver
(dims and strides in TMA order, innermost first; a stride TMA cannot encode is the launch's
KernelArgumentError). A box element (i0, ..., ir) sits at coordinates coords + i; outside
[0, dim) a load reads zero and a store drops it. In shared memory TMA writes the box densely,
dimension 0 fastest, from the destination address, and with a 32/64/128-byte swizzle moves
each 16-byte chunk: byte-address bits [4, 4+B) are XORed with bits [7, 7+B), B = 1, 2, 3
(layoutkit.ptx.isa.smem_swizzle; the address is the offset in the dynamic shared array, whose
start is 1024-byte aligned). So a layout whose swizzle disagrees with the mode TMA was given
reads back scrambled data.

A load reads global memory at issue and lands at a point the scheduler picks: then it writes
shared memory in every destination CTA (the multicast mask's CTAs, or its own), and calls
complete_tx on the barrier at the same offset there. Until then the destination bytes are
claimed: any access to them is a RaceError at that access. Its writes are the barrier's agent's
(happens-before: a reader must have waited on that barrier). A store reads its shared source
at issue (the source stays claimed until a tma_store_wait covers its group) and writes global
memory at a point the scheduler picks, or at a covering `tma_store_wait(writes=True)`.

A reducing store (cp.reduce.async.bulk.tensor, attr `reduce`) is a store whose global writes
combine each in-bounds element with the one in memory (`combine`), the whole box at once: the
interpreter runs one thread at a time, so each element's reduction is atomic, as on the GPU.
Floats are rounded once to nearest even from the exact result (f32 add in f32, f16 / bf16 add
to f16 / bf16); subnormals are kept; min / max return the non-NaN operand (two NaNs: the
canonical NaN 0x7FFF) and order -0 below +0; integer add wraps; inc is
`0 if old >= src else old + 1` and dec `src if old == 0 or old > src else old - 1` (u32).
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.isa.smem_swizzle import swizzle_address
from layoutkit.ptx.isa.tma import MULTICAST_MASK_BITS
from layoutkit.ptx.isa.tma import SHARED_ALIGN as SMEM_ALIGN

from ..core.types import DTYPES, DType
from .errors import ExecutionError, MemoryFaultError
from .machine import location_text
from .numerics import bf16_from_f32_bits
from .scheduler import AsyncOperation


class TensorMap:
    """The global tensor of one tensor-map parameter in this run: `region` (its argument
    array), `origin` (byte offset of element 0 in it), `dims`, `strides` (TMA order)."""

    def __init__(self, region, origin: int, dims: tuple, strides: tuple, element_bytes: int,
                 name: str):
        self.region, self.origin, self.dims, self.strides = region, origin, dims, strides
        self.element_bytes, self.name = element_bytes, name

    def elements(self, coords, box) -> tuple[np.ndarray, np.ndarray]:
        """(byte offsets in the region, in-bounds mask) of the box's elements at `coords`,
        dimension 0 fastest."""
        grids = np.indices(tuple(box[::-1]), dtype=np.int64).reshape(len(box), -1)[::-1]
        offset = np.zeros(grids.shape[1], dtype=np.int64)
        inside = np.ones(grids.shape[1], dtype=bool)
        for d, (c, dim, stride) in enumerate(zip(coords, self.dims, self.strides)):
            at = grids[d] + c
            inside &= (at >= 0) & (at < dim)
            offset += at * stride
        return self.origin + offset * self.element_bytes, inside

    def check(self, offsets: np.ndarray, inside: np.ndarray, what: str, op) -> None:
        used = offsets[inside]
        if used.size and (used.min() < 0 or used.max() + self.element_bytes >
                          self.region.nbytes):
            raise MemoryFaultError(
                f"{what}: the tensor map of {self.name} (dims {self.dims}, strides "
                f"{self.strides} elements, innermost first) reaches outside the argument "
                f"array {self.region.name} of {self.region.nbytes} bytes: the tensor's extents "
                "and strides describe more memory than the array holds", op.location)


def tensor_map(thread, op) -> TensorMap:
    """The TensorMap of the op's tensor-map operand (computed once per run)."""
    machine = thread.cta.machine
    cache = machine.state.setdefault("tma_maps", {})
    key = op.operands[0].id
    found = cache.get(key)
    if found is not None:
        return found
    param = next(p for p in machine.fn.params if p.results[0].id == key)
    resolver = param.attrs["resolve"]
    dims = tuple(f(machine.values) for f in resolver.dims)
    strides = tuple(f(machine.values) for f in resolver.strides)
    resolver._check(dims, strides)         # the launch's own checks: same error as on the GPU
    pointer_param = next(p for p in machine.fn.params
                         if p.attrs["index"] == resolver.pointer_index)
    pointer = machine.params[pointer_param.results[0].id]
    region = machine.memory.region(pointer, f"the TMA tensor map of {resolver.pointer}", op)
    e = DTYPES[op.attrs["dtype"]].nbytes
    found = cache[key] = TensorMap(region, pointer - region.start, dims, strides, e,
                                   resolver.pointer)
    return found


def box_coords(thread, op) -> list[int]:
    rank = len(op.attrs["box"])
    first = 3 if op.name == "tma_load" else 2
    return [thread.env[v.id] for v in op.operands[first:first + rank]]


def shared_bytes(start: int, nbytes: int, mode: str) -> np.ndarray:
    return swizzle_address(start + np.arange(nbytes, dtype=np.int64), mode)


def check_shared(cta, start: int, nbytes: int, what: str, op) -> None:
    cta.shared.check_range(start, nbytes, 1, what, op, op.attrs["buffer"])
    if start % SMEM_ALIGN:
        raise MemoryFaultError(f"{what}: its shared address (byte {start}) is not a multiple of "
                               f"{SMEM_ALIGN} bytes (PTX ISA: tensor copies' shared addresses)",
                               op.location)


def _agent_index(machine, offset: int) -> int:
    table = machine.state.get("agent_index")
    if table is None:
        table = machine.state["agent_index"] = {o: i for i, o in enumerate(machine.agents)}
    return table[offset]


class IssuedLoad(AsyncOperation):
    """One issued tma_load: its data, its destinations (cta, barrier, claim) until it lands."""

    def __init__(self, op, thread, data: np.ndarray, start: int, dests: list, what: str):
        self.op, self.issuer, self.data, self.start, self.dests = op, thread, data, start, dests
        self.what = what
        hb = thread.cta.machine.hb
        self.clock = None if hb is None else thread.cta.state["hb"].clock[thread.tid].copy()

    def complete(self) -> None:
        machine = self.issuer.cta.machine
        nbytes = self.data.size
        where = shared_bytes(self.start, nbytes, self.op.attrs["swizzle"])
        for cta, barrier, claim in self.dests:
            cta.shared.release(claim)
            cta.shared.data[where] = self.data
            published = None
            if machine.hb is not None:
                hb = machine.hb
                row = hb.agent_row(cta, _agent_index(machine, barrier.offset))
                own = cta is self.issuer.cta
                if own:
                    hb.acquire(cta, row, self.clock)
                hb.access_at(cta, row, self.start, nbytes, True, self.what, self.op,
                             check=own)
                published = hb.release(cta, row)
            barrier.complete_tx(nbytes, published)

    def describe(self) -> str:
        ctas = ", ".join(str(c.coord) for c, _, _ in self.dests)
        barrier = self.dests[0][1].describe()
        return (f"{self.what} ({location_text(self.op)}) into shared bytes {self.start}.."
                f"{self.start + self.data.size - 1} of CTA {ctas}, completing on {barrier}")


def destinations(thread, op, what: str) -> list:
    """The CTAs a load writes to: its own, or those of the multicast mask."""
    mc = op.attrs["multicast"]
    if mc is None:
        return [thread.cta]
    shift = thread.env[op.operands[-1].id]
    mask = (mc["pattern"] << shift) & ((1 << MULTICAST_MASK_BITS) - 1)
    cluster = thread.cta.state["cluster_ctas"]
    ranks = [r for r in range(MULTICAST_MASK_BITS) if mask >> r & 1]
    if not ranks or ranks[-1] >= len(cluster):
        raise ExecutionError(f"{what}: the multicast mask {mask:#06x} (pattern "
                             f"{mc['pattern']:#x} << {shift}) names CTA ranks {ranks}, but the "
                             f"cluster has {len(cluster)} CTAs", op.location)
    return [cluster[r] for r in ranks]


class StoreWrite(AsyncOperation):
    """The global writes of one issued tma_store (its source already read)."""

    def __init__(self, op, region, offsets, inside, data, e: int):
        self.op, self.region, self.offsets, self.inside = op, region, offsets, inside
        self.data, self.e, self.done = data, e, False

    def complete(self) -> None:
        if self.done:
            return
        self.done = True
        where = self.offsets[self.inside][:, None] + np.arange(self.e)
        values = self.data.reshape(-1, self.e)[self.inside]
        op = self.op.attrs.get("reduce")
        if op is None:
            self.region.data[where] = values
        else:
            reduce_into(self.region.data, where, values, op, DTYPES[self.op.attrs["dtype"]])

    def describe(self) -> str:
        return f"the global writes of the TMA store at {location_text(self.op)}"


CANONICAL_NAN16 = 0x7FFF             # f16 and bf16 (PTX ISA: min / max of two NaNs)


def _typed(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """The elements of `raw` (uint8, n x element bytes) as a numpy array: bf16 as its uint16
    bit patterns, other types as themselves."""
    kind = "u" if dtype.name == "bf16" or dtype.kind == "uint" else \
        {"int": "i", "float": "f"}[dtype.kind]
    return np.ascontiguousarray(raw).reshape(-1).view(f"<{kind}{dtype.nbytes}")


def _float_values(x: np.ndarray, dtype: DType) -> np.ndarray:
    with np.errstate(invalid="ignore"):                 # a signalling NaN widens quietly
        if dtype.name == "bf16":
            return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return x.astype(np.float64)


def _round_float(exact: np.ndarray, dtype: DType) -> np.ndarray:
    """float64 values rounded to nearest even in `dtype` (bit patterns for bf16). From float64
    the rounding is the exact result's: float64 has more than 2p + 1 bits (p = 24, 11, 8), and
    bf16 rounds float32's correctly rounded value, likewise."""
    with np.errstate(over="ignore"):
        as32 = exact.astype(np.float32)
        if dtype.name == "bf16":
            return bf16_from_f32_bits(as32.view(np.uint32))
        return as32 if dtype.name == "f32" else exact.astype(np.float16)


def _float_pick(old: np.ndarray, new: np.ndarray, dtype: DType, op: str) -> np.ndarray:
    """min / max of float elements (bit patterns for bf16): the non-NaN operand, -0 < +0."""
    x, y = _float_values(old, dtype), _float_values(new, dtype)
    sx, sy = np.signbit(x), np.signbit(y)
    bigger = (y > x) | ((y == x) & sx & ~sy)          # new above old (+0 above -0)
    take_new = np.isnan(x) | (~np.isnan(y) & (bigger if op == "max" else
                                               (y < x) | ((y == x) & sy & ~sx)))
    out = np.where(take_new, new, old)
    both_nan = np.isnan(x) & np.isnan(y)
    if both_nan.any():
        bits = out.view(np.uint16)
        bits[both_nan] = CANONICAL_NAN16
    return out


def combine(op: str, dtype: DType, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """`old <op> new` element by element as cp.reduce.async.bulk.tensor computes it (the
    module's docstring): old and new are n elements' bytes (uint8, n x element bytes), as is
    the result. `op`, `dtype`: a legal pair of isa.tma.REDUCE_TYPES."""
    x, y = _typed(old, dtype), _typed(new, dtype)
    if dtype.kind == "float":
        if op == "add":
            with np.errstate(invalid="ignore"):                 # inf + -inf: NaN, quietly
                exact = _float_values(x, dtype) + _float_values(y, dtype)
            out = _round_float(exact, dtype)
        else:
            out = _float_pick(x, y, dtype, op)
    elif op == "add":
        out = x + y                                   # numpy integer arrays wrap
    elif op in ("min", "max"):
        out = np.minimum(x, y) if op == "min" else np.maximum(x, y)
    elif op in ("and", "or", "xor"):
        out = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](x, y)
    elif op == "inc":
        out = np.where(x >= y, 0, x + 1).astype(x.dtype)
    elif op == "dec":
        out = np.where((x == 0) | (x > y), y, x - 1).astype(x.dtype)
    else:
        raise ValueError(f"no TMA reduction {op!r} of {dtype} elements")
    return np.ascontiguousarray(out, dtype=x.dtype).view(np.uint8).reshape(old.shape)


def reduce_into(memory: np.ndarray, where: np.ndarray, values: np.ndarray, op: str,
                dtype: DType) -> None:
    """memory[where[i]] = memory[where[i]] <op> values[i] for every element i in order (row i
    of `where`: element i's byte addresses in `memory`, uint8): an address that occurs twice
    (a tensor map whose strides overlap) is reduced twice, as by two atomics."""
    pending = np.arange(len(where))
    while pending.size:
        _, first = np.unique(where[pending, 0], return_index=True)
        now = pending[np.sort(first)]             # one occurrence of each address
        memory[where[now]] = combine(op, dtype, memory[where[now]], values[now])
        pending = np.setdiff1d(pending, now, assume_unique=True)


class IssuedStore:
    """An issued tma_store: its shared `claim` until a covering wait, its global `write`."""

    def __init__(self, op, claim, start: int, nbytes: int, write: StoreWrite):
        self.op, self.claim, self.start, self.nbytes, self.write = op, claim, start, nbytes, write


def store_groups(thread) -> dict:
    return thread.state.setdefault("tma_store", {"open": [], "groups": [], "unwritten": []})


__all__ = ["TensorMap", "tensor_map", "IssuedLoad", "IssuedStore", "StoreWrite",
           "box_coords", "check_shared", "combine", "destinations", "reduce_into",
           "shared_bytes", "store_groups"]
