"""The TMA ops of the IR, one definition each: tma_load, tma_store, tma_store_commit,
tma_store_wait (sm_90a). The user API that emits them is `copy.py` (its docstring lists their
operands and attrs); what the hardware does is the PTX ISA's "cp.async.bulk.tensor".

Lowering. The tensor map is the generic address of its by-value parameter (`cvta.param`, made
once per scope that uses it); a shared tile is `smem + base + offset * element bytes` (the
offset is a box start, a multiple of the swizzle period, so the swizzle leaves it unchanged);
the barrier is `smem + its byte offset`; a multicast mask is `pattern << mask_base` (.b16).

Interpretation (interpreter/tma_model.py holds the model: tensor maps, the asynchronous load
and store writes). A load reads global memory at issue and lands when the scheduler picks:
then it writes shared memory in every destination CTA and calls complete_tx on the barrier at
the same offset there; until then the destination bytes are claimed. A store reads its shared
source at issue (claimed until a tma_store_wait covers its group) and writes global memory when
the scheduler picks, or at a covering `tma_store_wait(writes=True)`; a reducing store (attr
`reduce`) combines its in-bounds elements with global memory then instead (tma_model.combine).

Effects (the protocol check). A load is a Copy completing on its barrier stage into the byte
range of its box, in every CTA of its multicast mask; a store is an async-proxy read of its
source (reducing or not); commit and wait close and retire the thread's bulk groups.
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.builder import Address, Reg
from layoutkit.ptx.isa import arith, bits, convert, memory
from layoutkit.ptx.isa import tma as isa
from layoutkit.sync import kernel_model as km

from ...core.opdef import SM90A_ONLY, OpDef
from ...core.types import DTYPES, TensorMapType, i32
from ...core.verifier import fail
from .derive import reduce_error
from ...interpreter.executor import Step
from ...interpreter.machine import location_text
from ...interpreter.mbarrier_model import lookup
from ...interpreter.tma_model import (IssuedLoad, IssuedStore, StoreWrite, box_coords,
                                      check_shared, destinations, shared_bytes, store_groups,
                                      tensor_map)


# ---- lowering helpers ------------------------------------------------------------------------
def _u32(lw, value) -> "Reg | int":
    v = lw.operand(value)
    if isinstance(v, int):
        return v
    return v if v.type.name == "u32" else convert.mov(lw.k, v, dtype="b32", out=lw.k.reg("u32"))


def _tensor_map(lw, value) -> Reg:
    key = ("tensormap", value.id)
    for cache in reversed(lw.addr_cache):      # made in this scope or one enclosing it
        if key in cache:
            return cache[key]
    address = memory.cvta_param(lw.k, lw.vals[value.id])
    lw.addr_cache[-1][key] = address
    return address


def _shared(lw, offset_value, scale: int, base: int) -> Address:
    offset = _u32(lw, offset_value)
    if isinstance(offset, int):
        return Address(lw.smem, base + offset * scale)
    if scale == 1:
        return Address(arith.add(lw.k, offset, lw.smem, dtype="u32"), base)
    return Address(arith.mad(lw.k, offset, scale, lw.smem, mode="lo", dtype="u32"), base)


def _coords(lw, values) -> tuple:
    return tuple(lw.operand(v) if isinstance(lw.operand(v), int) else lw.reg(v) for v in values)


# ---- verifier and effects helpers --------------------------------------------------------------
def _verify_copy(op, leading: int) -> None:
    ops, a = op.operands, op.attrs
    rank = len(a.get("box", ()))
    extra = 1 if op.name == "tma_load" and a.get("multicast") else 0
    if op.results or len(ops) != leading + rank + extra or not 1 <= rank <= isa.MAX_DIMS:
        fail(op, "takes the tensor map, " + ("the barrier offset, " if leading == 3 else "") +
             f"the shared offset and one i32 coordinate per box dimension (1..{isa.MAX_DIMS})"
             + (", then the multicast mask base" if extra else ""))
    if not isinstance(ops[0].type, TensorMapType):
        fail(op, "its first operand is a tensormap parameter")
    if any(v.type != i32 for v in ops[1:]):
        fail(op, "its offsets and coordinates are i32")
    if len(a.get("coords", ())) != rank or len(a.get("modes", ())) != rank:
        fail(op, "attrs coords and modes have one entry per box dimension")
    if not isinstance(a.get("bytes"), int) or a["bytes"] <= 0:
        fail(op, "attr bytes is a positive int")


def _verify_group(op) -> None:
    if op.operands or op.results or op.blocks:
        fail(op, "takes no operands and has no results")


def _element_bytes(op) -> int:
    return op.attrs["bytes"] // int(np.prod(op.attrs["box"]))


class TmaLoad(OpDef):
    """cp.async.bulk.tensor global -> shared::cluster, completing on an mbarrier (multicast to
    the CTAs of `multicast["pattern"] << mask_base` when set)."""

    name = "tma_load"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _verify_copy(op, 3)

    def lower(self, op, lw):
        a = op.attrs
        tmap, bar, dst, *rest = op.operands
        rank = len(a["box"])
        nbytes = DTYPES[a["dtype"]].nbytes
        mask = None
        if a["multicast"] is not None:
            shift = _u32(lw, rest[rank])
            pattern = convert.mov(lw.k, a["multicast"]["pattern"], dtype="b16")
            mask = bits.shl(lw.k, pattern, shift, dtype="b16")
        isa.load(lw.k, _shared(lw, dst, nbytes, a["base"]), _tensor_map(lw, tmap),
                 _coords(lw, rest[:rank]), _shared(lw, bar, 1, 0), multicast=mask)

    def interpret(self, op, compiler):
        a = op.attrs
        e = DTYPES[a["dtype"]].nbytes
        nbytes = a["bytes"]
        bar_id, dst_id = op.operands[1].id, op.operands[2].id
        what = f"the TMA load of {a['tensor']} into {a['buffer']}"

        def run(thread):
            tmap = tensor_map(thread, op)
            offsets, inside = tmap.elements(box_coords(thread, op), a["box"])
            tmap.check(offsets, inside, what, op)
            raw = tmap.region.data
            gather = np.where(inside, offsets, 0)[:, None] + np.arange(e)
            data = np.where(inside[:, None], raw[gather], 0).astype(np.uint8).reshape(-1)
            start = a["base"] + thread.env[dst_id] * e
            offset = thread.env[bar_id]
            dests = []
            for cta in destinations(thread, op, what):
                check_shared(cta, start, nbytes, what, op)
                barrier = lookup(cta, offset, op, what)
                if cta.shared.claims:
                    cta.shared.check_claims(start, nbytes, True, what, op)
                claim = cta.shared.claim(
                    start, nbytes, True,
                    f"the TMA load issued at {location_text(op)} (completing on "
                    f"{barrier.describe()})",
                    f"wait on {barrier.describe()} (lk.sm90.mbarrier_wait) before touching the "
                    "stage")
                dests.append((cta, barrier, claim))
            thread.cta.machine.scheduler.post(IssuedLoad(op, thread, data, start, dests, what))
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        a = op.attrs
        site = ex.site(op, loops)
        bars = ex.per_thread(op.operands[1], mask)
        dsts = ex.per_thread(op.operands[2], mask)
        mc = a.get("multicast")
        bases = ex.per_thread(op.operands[-1], mask) if mc else ex.cta[mask]
        if bars is None or dsts is None or bases is None:
            ex.undecidable(op, loops, "this TMA load's barrier or destination is computed "
                           "from memory; the check skipped it")
            return
        nbytes = _element_bytes(op)
        for sub, (bar, dst, base, cta) in ex.split(mask, [bars, dsts, bases, ex.cta[mask]]):
            name, stage = ex.slot_of(bar, op, site)
            ctas = (cta,) if not mc else tuple(r for r in range(ex.ctas)
                                               if (mc["pattern"] << base) >> r & 1)
            rng = km.ByteRange(cta, a["buffer"], dst * nbytes, dst * nbytes + a["bytes"])
            ex.emit(sub, km.Copy, {"barrier": name, "stage": stage, "ctas": ctas,
                                   "nbytes": a["bytes"], "dst": rng, "site": site,
                                   "what": f"TMA load into {a['buffer']}"})


class TmaStore(OpDef):
    """cp.async.bulk.tensor shared::cta -> global, a bulk async-group operation; with attr
    `reduce` (an op enabled for attr dtype: derive.HARDWARE_REDUCTIONS) cp.reduce.async.bulk.tensor:
    global = global <reduce> shared, element-wise."""

    name = "tma_store"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _verify_copy(op, 2)
        reduce = op.attrs.get("reduce")
        if reduce is not None:
            dtype = DTYPES.get(op.attrs.get("dtype"))
            problem = "dtype is an element type" if dtype is None else reduce_error(reduce, dtype)
            if problem is not None:
                fail(op, f"attr {problem}")

    def lower(self, op, lw):
        a = op.attrs
        tmap, src, *coords = op.operands
        dtype = DTYPES[a["dtype"]]
        tensor, at = _tensor_map(lw, tmap), _coords(lw, coords)
        source = _shared(lw, src, dtype.nbytes, a["base"])
        if a.get("reduce") is None:
            isa.store(lw.k, tensor, at, source)
        else:
            isa.reduce(lw.k, a["reduce"], tensor, at, source, dtype=dtype.ptx)

    def interpret(self, op, compiler):
        a = op.attrs
        e = DTYPES[a["dtype"]].nbytes
        nbytes = a["bytes"]
        src_id = op.operands[1].id
        what = f"the TMA store of {a['buffer']} to {a['tensor']}" if a.get("reduce") is None \
            else f"the TMA reduce-{a['reduce']} of {a['buffer']} into {a['tensor']}"

        def run(thread):
            cta = thread.cta
            tmap = tensor_map(thread, op)
            offsets, inside = tmap.elements(box_coords(thread, op), a["box"])
            tmap.check(offsets, inside, what, op)
            start = a["base"] + thread.env[src_id] * e
            check_shared(cta, start, nbytes, what, op)
            if cta.shared.claims:
                cta.shared.check_claims(start, nbytes, False, what, op)
            cta.shared.check_written(start, nbytes, what, op, a["buffer"])
            cta.machine.on_shared_access(thread, start, nbytes, False, what, op)
            data = cta.shared.data[shared_bytes(start, nbytes, a["swizzle"])].copy()
            claim = cta.shared.claim(
                start, nbytes, False, f"the TMA store issued at {location_text(op)}",
                "lk.sm90.tma_store_commit() and lk.sm90.tma_store_wait() before overwriting its "
                "source")
            write = StoreWrite(op, tmap.region, offsets, inside, data, e)
            store_groups(thread)["open"].append(IssuedStore(op, claim, start, nbytes, write))
            cta.machine.scheduler.post(write)
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        a = op.attrs
        ex.shared_access(op, mask, loops, op.operands[1], _element_bytes(op), a["bytes"], a["buffer"],
                  km.SharedRead, "tma_store")


class TmaStoreCommit(OpDef):
    """cp.async.bulk.commit_group: close this thread's bulk async-group of stores."""

    name = "tma_store_commit"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _verify_group(op)

    def lower(self, op, lw):
        isa.commit_group(lw.k)

    def interpret(self, op, compiler):
        def run(thread):
            stores = store_groups(thread)
            if stores["open"]:
                stores["groups"].append(stores["open"])
                stores["open"] = []
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.Commit, {"kind": "tma_store", "site": ex.site(op, loops)})


class TmaStoreWait(OpDef):
    """cp.async.bulk.wait_group[.read] `pending`: at most that many of this thread's store
    groups stay in flight (`writes`: until the global writes are done, not only the reads)."""

    name = "tma_store_wait"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _verify_group(op)
        pending = op.attrs.get("pending")
        if not (isinstance(pending, int) and 0 <= pending <= isa.MAX_PENDING_BULK_GROUPS
                and isinstance(op.attrs.get("writes"), bool)):
            fail(op, f"attrs pending (int in 0..{isa.MAX_PENDING_BULK_GROUPS}) and writes "
                     "(bool)")

    def lower(self, op, lw):
        isa.wait_group(lw.k, op.attrs["pending"], read=not op.attrs["writes"])

    def interpret(self, op, compiler):
        keep, writes = op.attrs["pending"], op.attrs["writes"]

        def run(thread):
            stores = store_groups(thread)
            groups = stores["groups"]
            done = groups[:max(len(groups) - keep, 0)]
            del groups[:len(done)]
            shared = thread.cta.shared
            for group in done:
                for store in group:
                    shared.release(store.claim)
                    # the source was read until now: a later writer must be ordered after this
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

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.GroupWait, {"kind": "tma_store", "pending": op.attrs["pending"],
                                     "site": ex.site(op, loops)})


__all__ = ["TmaLoad", "TmaStore", "TmaStoreCommit", "TmaStoreWait"]
