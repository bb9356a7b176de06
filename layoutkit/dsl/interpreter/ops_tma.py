"""Handlers of the TMA ops (layoutkit.dsl.sm90.tma.copy): tma_load, tma_store, tma_store_commit,
tma_store_wait, as the hardware executes them (PTX ISA "cp.async.bulk.tensor", "Tensor copy").

The tensor map is evaluated from the launch's arguments by the hidden parameter's resolver
(dims and strides in TMA order, innermost first; a stride TMA cannot encode is the launch's
KernelArgumentError). A box element (i0, ..., ir) sits at coordinates coords + i; outside
[0, dim) a load reads zero and a store drops it. In shared memory TMA writes the box densely,
dimension 0 fastest, from the destination address, and with a 32/64/128-byte swizzle moves
each 16-byte chunk: byte-address bits [4, 4+B) are XORed with bits [7, 7+B), B = 1, 2, 3
(`hardware_swizzle`; the address is the offset in the dynamic shared array, whose start is
1024-byte aligned). So a layout whose swizzle disagrees with the mode TMA was given reads
back scrambled data.

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

from ..sm90.tma.derive import SMEM_ALIGN
from ..core.types import DTYPES
from .errors import ExecutionError, MemoryFaultError
from .executor import Step, handler
from .machine import location_text
from .ops_mbarrier import lookup
from .scheduler import AsyncOperation

SWIZZLE_BITS = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
MULTICAST_MASK_BITS = 16          # the .b16 ctaMask operand


def hardware_swizzle(addresses: np.ndarray, mode: str) -> np.ndarray:
    """Shared byte addresses after TMA's swizzle `mode` (see the module docstring).

    >>> hardware_swizzle(np.array([0, 16, 128, 144, 1040]), "128B").tolist()
    [0, 16, 144, 128, 1040]
    """
    bits = SWIZZLE_BITS[mode]
    if not bits:
        return addresses
    return addresses ^ (((addresses >> 7) & ((1 << bits) - 1)) << 4)


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


def _coords(thread, op) -> list[int]:
    rank = len(op.attrs["box"])
    first = 3 if op.name == "tma_load" else 2
    return [thread.env[v.id] for v in op.operands[first:first + rank]]


def _shared_bytes(start: int, nbytes: int, mode: str) -> np.ndarray:
    return hardware_swizzle(start + np.arange(nbytes, dtype=np.int64), mode)


def _check_shared(cta, start: int, nbytes: int, what: str, op) -> None:
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


class TmaLoad(AsyncOperation):
    """One issued tma_load: its data, its destinations (cta, barrier, claim) until it lands."""

    def __init__(self, op, thread, data: np.ndarray, start: int, dests: list, what: str):
        self.op, self.issuer, self.data, self.start, self.dests = op, thread, data, start, dests
        self.what = what
        hb = thread.cta.machine.hb
        self.clock = None if hb is None else thread.cta.state["hb"].clock[thread.tid].copy()

    def complete(self) -> None:
        machine = self.issuer.cta.machine
        nbytes = self.data.size
        where = _shared_bytes(self.start, nbytes, self.op.attrs["swizzle"])
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


def _destinations(thread, op, what: str) -> list:
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


@handler("tma_load")
def _tma_load(op, compiler):
    a = op.attrs
    e = DTYPES[a["dtype"]].nbytes
    nbytes = a["bytes"]
    bar_id, dst_id = op.operands[1].id, op.operands[2].id
    what = f"the TMA load of {a['tensor']} into {a['buffer']}"

    def run(thread):
        tmap = tensor_map(thread, op)
        offsets, inside = tmap.elements(_coords(thread, op), a["box"])
        tmap.check(offsets, inside, what, op)
        raw = tmap.region.data
        gather = np.where(inside, offsets, 0)[:, None] + np.arange(e)
        data = np.where(inside[:, None], raw[gather], 0).astype(np.uint8).reshape(-1)
        start = a["base"] + thread.env[dst_id] * e
        offset = thread.env[bar_id]
        dests = []
        for cta in _destinations(thread, op, what):
            _check_shared(cta, start, nbytes, what, op)
            barrier = lookup(cta, offset, op, what)
            if cta.shared.claims:
                cta.shared.check_claims(start, nbytes, True, what, op)
            claim = cta.shared.claim(
                start, nbytes, True,
                f"the TMA load issued at {location_text(op)} (completing on "
                f"{barrier.describe()})",
                f"wait on {barrier.describe()} (lk.mbarrier_wait) before touching the stage")
            dests.append((cta, barrier, claim))
        thread.cta.machine.scheduler.post(TmaLoad(op, thread, data, start, dests, what))
    return Step(run, op, preempt=True)


class TmaStoreWrite(AsyncOperation):
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


class TmaStore:
    """An issued tma_store: its shared `claim` until a covering wait, its global `write`."""

    def __init__(self, op, claim, start: int, nbytes: int, write: TmaStoreWrite):
        self.op, self.claim, self.start, self.nbytes, self.write = op, claim, start, nbytes, write


def _stores(thread) -> dict:
    return thread.state.setdefault("tma_store", {"open": [], "groups": [], "unwritten": []})


@handler("tma_store")
def _tma_store(op, compiler):
    a = op.attrs
    e = DTYPES[a["dtype"]].nbytes
    nbytes = a["bytes"]
    src_id = op.operands[1].id
    what = f"the TMA store of {a['buffer']} to {a['tensor']}"

    def run(thread):
        cta = thread.cta
        tmap = tensor_map(thread, op)
        offsets, inside = tmap.elements(_coords(thread, op), a["box"])
        tmap.check(offsets, inside, what, op)
        start = a["base"] + thread.env[src_id] * e
        _check_shared(cta, start, nbytes, what, op)
        if cta.shared.claims:
            cta.shared.check_claims(start, nbytes, False, what, op)
        cta.machine.on_shared_access(thread, start, nbytes, False, what, op)
        data = cta.shared.data[_shared_bytes(start, nbytes, a["swizzle"])].copy()
        claim = cta.shared.claim(
            start, nbytes, False, f"the TMA store issued at {location_text(op)}",
            "lk.tma_store_commit() and lk.tma_store_wait() before overwriting its source")
        write = TmaStoreWrite(op, tmap.region, offsets, inside, data, e)
        _stores(thread)["open"].append(TmaStore(op, claim, start, nbytes, write))
        cta.machine.scheduler.post(write)
    return Step(run, op, preempt=True)


@handler("tma_store_commit")
def _tma_store_commit(op, compiler):
    def run(thread):
        stores = _stores(thread)
        if stores["open"]:
            stores["groups"].append(stores["open"])
            stores["open"] = []
    return Step(run, op)


@handler("tma_store_wait")
def _tma_store_wait(op, compiler):
    keep, writes = op.attrs["pending"], op.attrs["writes"]

    def run(thread):
        stores = _stores(thread)
        groups = stores["groups"]
        done = groups[:max(len(groups) - keep, 0)]
        del groups[:len(done)]
        shared = thread.cta.shared
        for group in done:
            for store in group:
                shared.release(store.claim)
                # the source was read until now: a later writer must be ordered after this wait
                thread.cta.machine.on_shared_access(
                    thread, store.start, store.nbytes, False,
                    f"the TMA store of {store.op.attrs['buffer']}", store.op)
                stores["unwritten"].append(store.write)
        stores["unwritten"] = [w for w in stores["unwritten"] if not w.done]
        if writes:
            scheduler = thread.cta.machine.scheduler
            for write in stores["unwritten"]:
                if write in scheduler.pending:
                    scheduler.pending.remove(write)
                write.complete()
            stores["unwritten"] = []
    return Step(run, op)


__all__ = ["hardware_swizzle", "TensorMap", "tensor_map", "TmaLoad", "TmaStoreWrite"]
