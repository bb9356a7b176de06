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
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.isa.smem_swizzle import swizzle_address
from layoutkit.ptx.isa.tma import MULTICAST_MASK_BITS
from layoutkit.ptx.isa.tma import SHARED_ALIGN as SMEM_ALIGN

from ..core.types import DTYPES
from .errors import ExecutionError, MemoryFaultError
from .machine import location_text
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
        self.region.data[where] = self.data.reshape(-1, self.e)[self.inside]

    def describe(self) -> str:
        return f"the global writes of the TMA store at {location_text(self.op)}"


class IssuedStore:
    """An issued tma_store: its shared `claim` until a covering wait, its global `write`."""

    def __init__(self, op, claim, start: int, nbytes: int, write: StoreWrite):
        self.op, self.claim, self.start, self.nbytes, self.write = op, claim, start, nbytes, write


def store_groups(thread) -> dict:
    return thread.state.setdefault("tma_store", {"open": [], "groups": [], "unwritten": []})


__all__ = ["TensorMap", "tensor_map", "IssuedLoad", "IssuedStore", "StoreWrite",
           "box_coords", "check_shared", "destinations", "shared_bytes", "store_groups"]
