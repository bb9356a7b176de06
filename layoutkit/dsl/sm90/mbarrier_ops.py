"""The mbarrier ops of the IR, one definition each: init, the init fence, arrive (local or on a
cluster peer), arrive.expect_tx, the parity wait and the proxy fence. The user API that emits
them is layoutkit.dsl.sm90.mbarrier; the barrier state the interpreter keeps is
layoutkit.dsl.interpreter.mbarrier_model; the PTX comes from layoutkit.sync (and its ptx isa
family for init and the remote arrive).

IR ops (name: operands -> results; attrs). `offset` is the i32 byte offset of the barrier in
the dynamic shared array (lowering adds the array's address); `barrier` the array's name,
`stage` the stage expression (int or sympy), so a protocol checker or interpreter needs no PTX:
  mbarrier_init:              ->      barrier, offset (int, of stage 0), stages, arrive_count
  fence_mbarrier_init:        ->      (fence.mbarrier_init.release.cluster)
  mbarrier_arrive:  offset[, rank] -> barrier, stage, count, remote (rank: i32 cluster rank of
                                      the peer CTA whose barrier receives the arrival), scope
                                      (release scope of a remote arrive: cluster or cta)
  mbarrier_arrive_expect_tx: offset -> barrier, stage, tx_bytes, copies ((what, nbytes), ...)
  mbarrier_wait:    offset, parity[, stage, errors] -> barrier, stage, phase (expr), debug
                                      (debug: stage is the i32 stage, errors the hidden pointer
                                      of the wait-error record; the wait gives up and traps)
  fence_proxy_async:          ->      space ("shared::cta")

Targets (what each lowering emits, PTX ISA / hopper-ptx.md §0.1): `mbarrier.init` and a plain
`mbarrier.arrive` exist on sm_80 (the `.shared::cta` spelling needs PTX 7.8, which sm_80
accepts); an arrive with a count, a remote arrive (mapa + `.shared::cluster`), `arrive.expect_tx`,
`try_wait.parity` and both fences need sm_90. lk.sm90.mbarrier_arrive refuses a count on sm_80 at
trace time by asking the ptx layer (`mbarrier.ARRIVE_COUNT`, where the rule lives); a remote
arrive needs a cluster kernel, which is sm_90a.

Effects: each op addressing a barrier by operand 0 becomes one protocol event per distinct
(barrier offset, CTA) of the executing threads (`_barrier_columns`).
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.builder import Address, Reg
from layoutkit.ptx.isa import arith, convert, memory
from layoutkit.ptx.isa import mbarrier as isa_mbarrier
from layoutkit.ptx.isa.mbarrier import MAX_COUNT, MBARRIER_ALIGN, MBARRIER_BYTES
from layoutkit.sync import BarrierSlot, MbarrierPlacement
from layoutkit.sync import arrive, arrive_expect_tx, emit_fence_proxy_async, wait
from layoutkit.sync import kernel_model as km

from ..core.opdef import ALL_TARGETS, SM90A_ONLY, OpDef
from ..core.types import PointerType, i32
from ..core.verifier import fail
from ..interpreter.errors import ExecutionError
from ..interpreter.executor import Step
from ..interpreter.machine import location_text
from ..interpreter.mbarrier_model import MbarrierState, barriers, lookup
from ..interpreter.mbarrier_model import MbarrierWait as PhaseWait
from .debug_waits import LoweredWaits



# ---- lowering helpers (the barrier's shared address, its layoutkit.sync slot) --------------
def _u32(lw, value) -> "Reg | int":
    """An i32 Value as a u32 register (or its int immediate)."""
    v = lw.operand(value)
    if isinstance(v, int):
        return v
    return v if v.type.name == "u32" else\
        convert.mov(lw.k, v, dtype="b32", out=lw.k.reg("u32"))


def _barrier_address(lw, offset_value) -> Address:
    offset = _u32(lw, offset_value)
    if isinstance(offset, int):
        return Address(lw.smem, offset)
    return Address(arith.add(lw.k, lw.smem, offset, dtype="u32"), 0)


def _barrier_arrays(lw) -> dict:
    """name -> layoutkit.sync MbarrierPlacement of every mbarrier_init of the kernel (cached)."""
    arrays = getattr(lw, "_mbarrier_arrays", None)
    if arrays is None:
        arrays = lw._mbarrier_arrays = {}
        pending = [lw.fn.body]
        while pending:
            for op in pending.pop().ops:
                pending.extend(op.blocks)
                if op.name == MbarrierInit.name:
                    a = op.attrs
                    arrays[a["barrier"]] = MbarrierPlacement(a["barrier"], a["stages"],
                                                         a["arrive_count"], 0)
    return arrays


def _slot(lw, op, stage=None) -> BarrierSlot:
    a = op.attrs
    stage = stage if stage is not None else a["stage"] if isinstance(a["stage"], int) else 0
    return BarrierSlot(_barrier_arrays(lw)[a["barrier"]], stage,
                       _barrier_address(lw, op.operands[0]))


# ---- effects helper --------------------------------------------------------------------------
def _barrier_columns(ex, op, mask, loops):
    """(site, [(sub-mask, (offset, cta))]) of an op addressing a barrier by operand 0."""
    site = ex.site(op, loops)
    offsets = ex.per_thread(op.operands[0], mask)
    if offsets is None:
        ex.undecidable(op, loops, f"the stage of {op.attrs['barrier']} is computed from "
                       "memory; the check skipped this op")
        return site, []
    return site, list(ex.split(mask, [offsets, ex.cta[mask]]))


# ---- verify helpers --------------------------------------------------------------------------
def _no_values(op) -> None:
    if op.operands or op.results or op.blocks:
        fail(op, "takes no operands, has no results and no blocks")


def _check_barrier_operand(op) -> None:
    if not op.operands or op.operands[0].type != i32 or op.results or op.blocks:
        fail(op, "takes the barrier's i32 byte offset first and has no results")
    if "barrier" not in op.attrs or "stage" not in op.attrs:
        fail(op, "names its barrier and stage in attrs")


def _nothing(op):
    # Fences order memory between proxies; the interpreter's memory is coherent and the
    # happens-before edges come from the barriers and waits that follow the fences.
    return Step(lambda thread: None, op)


# ---- the ops ---------------------------------------------------------------------------------
class MbarrierInit(OpDef):
    """`mbarrier.init` of every stage of array `barrier` (at byte `offset`, `stages` barriers
    of MBARRIER_BYTES) with `arrive_count` arrivals per phase; one thread runs it."""

    name = "mbarrier_init"
    targets = ALL_TARGETS
    synchronizes = True

    def verify(self, op):
        _no_values(op)
        a = op.attrs
        if not (isinstance(a.get("offset"), int) and a["offset"] % MBARRIER_ALIGN == 0
                and isinstance(a.get("stages"), int) and a["stages"] >= 1
                and isinstance(a.get("arrive_count"), int)
                and 1 <= a["arrive_count"] <= MAX_COUNT):
            fail(op, f"needs an {MBARRIER_ALIGN}-aligned int offset, stages >= 1 and an "
                     f"arrive_count in 1..{MAX_COUNT}")

    def lower(self, op, lw):
        a = op.attrs
        for stage in range(a["stages"]):
            isa_mbarrier.init(lw.k, Address(lw.smem, a["offset"] + MBARRIER_BYTES * stage),
                              a["arrive_count"])

    def interpret(self, op, compiler):
        a = op.attrs

        def run(thread):
            table = barriers(thread.cta)
            for stage in range(a["stages"]):
                offset = a["offset"] + MBARRIER_BYTES * stage
                table[offset] = MbarrierState(thread.cta, a["barrier"], stage,
                                              a["arrive_count"], offset)
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        a = op.attrs
        site = ex.site(op, loops)
        ex.barriers.setdefault(a["barrier"], km.BarrierDecl(a["barrier"], a["stages"],
                                                            a["arrive_count"], site))
        for sub, (cta,) in ex.split(mask, [ex.cta[mask]]):
            ex.emit(sub, km.Init, {"barrier": a["barrier"], "cta": cta, "site": site})


class FenceMbarrierInit(OpDef):
    """`fence.mbarrier_init.release.cluster`: the initialising thread's inits become visible
    to the async proxy and the cluster (sm_90, PTX 8.0)."""

    name = "fence_mbarrier_init"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _no_values(op)

    def lower(self, op, lw):
        isa_mbarrier.fence_init(lw.k)

    def interpret(self, op, compiler):
        return _nothing(op)

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.InitFence, {"site": ex.site(op, loops)})


class FenceProxyAsync(OpDef):
    """`fence.proxy.async.<space>` (space "shared::cta"): generic-proxy shared writes before
    later async-proxy reads (sm_90, PTX 8.0)."""

    name = "fence_proxy_async"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _no_values(op)
        if op.attrs.get("space") != "shared::cta":
            fail(op, "fences the shared::cta space")

    def lower(self, op, lw):
        emit_fence_proxy_async(lw.k, op.attrs["space"])

    def interpret(self, op, compiler):
        return _nothing(op)

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.ProxyFence, {"site": ex.site(op, loops)})


class MbarrierArrive(OpDef):
    """`count` arrivals on the barrier at operand 0 (`mbarrier.arrive`), or, when `remote`, on
    the barrier at that offset in the CTA of cluster rank operand 1 (mapa +
    `mbarrier.arrive.release.<scope>.shared::cluster`, sm_90)."""

    name = "mbarrier_arrive"
    targets = ALL_TARGETS        # count > 1 and remote are sm_90: see the module docstring
    synchronizes = True

    def verify(self, op):
        _check_barrier_operand(op)
        remote = op.attrs.get("remote")
        if len(op.operands) != (2 if remote else 1) or (remote and op.operands[1].type != i32):
            fail(op, "takes an offset, plus an i32 cluster rank when remote")

    def lower(self, op, lw):
        count = op.attrs["count"] if op.attrs["count"] != 1 else None
        if op.attrs["remote"]:
            address = _barrier_address(lw, op.operands[0])
            base = address.base if address.offset == 0 else\
                arith.add(lw.k, address.base, address.offset, dtype="u32")
            if not isinstance(base, Reg):
                base = convert.mov(lw.k, base, dtype="u32")
            isa_mbarrier.arrive_remote(lw.k, base, _u32(lw, op.operands[1]), count,
                                       scope=op.attrs.get("scope", "cluster"))
        else:
            arrive(lw.k, _slot(lw, op), count)

    def interpret(self, op, compiler):
        offset, count = op.operands[0].id, op.attrs["count"]

        def run(thread):
            target = _target_cta(thread, op)
            barrier = lookup(target, thread.env[offset], op, "lk.sm90.mbarrier_arrive")
            barrier.arrive(count, op, thread)
            where = "" if target is thread.cta else f" of CTA {target.coord}"
            thread.notes["mbarrier"] = f"arrived on {barrier.describe()}{where} "\
                                       f"({location_text(op)})"
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        site, groups = _barrier_columns(ex, op, mask, loops)
        remote = op.attrs["remote"]
        for sub, (offset, cta) in groups:
            target = [cta]
            if remote:
                ranks = ex.per_thread(op.operands[1], sub)
                target = sorted(set(ranks.tolist())) if ranks is not None else [cta]
            name, stage = ex.slot_of(offset, op, site)
            for dest in target:
                part = sub if len(target) == 1 else\
                    sub & (np.broadcast_to(np.asarray(ex.values(op.operands[1])),
                                           ex.all.shape) == dest)
                ex.emit(part, km.Arrive, {"barrier": name, "stage": stage, "cta": dest,
                                          "site": site, "remote": remote},
                        per_thread=op.attrs["count"])


def _target_cta(thread, op):
    if not op.attrs.get("remote"):
        return thread.cta
    rank = thread.env[op.operands[1].id]
    cluster = thread.cta.state.get("cluster_ctas")
    if cluster is None or not 0 <= rank < len(cluster):
        size = len(cluster) if cluster is not None else 1
        raise ExecutionError(f"a remote arrive on {op.attrs['barrier']} names cluster rank "
                             f"{rank}, outside the cluster's {size} CTAs", op.location)
    return cluster[rank]


class MbarrierArriveExpectTx(OpDef):
    """One arrival on the barrier at operand 0 that adds `tx_bytes` (the total of the attached
    `copies`) to its phase (`mbarrier.arrive.expect_tx`, sm_90, PTX 8.0)."""

    name = "mbarrier_arrive_expect_tx"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _check_barrier_operand(op)
        tx = op.attrs.get("tx_bytes")
        if len(op.operands) != 1 or not isinstance(tx, int) or not 0 < tx <= MAX_COUNT:
            fail(op, f"takes one offset and expects 1..{MAX_COUNT} bytes")

    def lower(self, op, lw):
        arrive_expect_tx(lw.k, _slot(lw, op), op.attrs["tx_bytes"])

    def interpret(self, op, compiler):
        offset, nbytes = op.operands[0].id, op.attrs["tx_bytes"]

        def run(thread):
            barrier = lookup(thread.cta, thread.env[offset], op, "lk.sm90.expect_tx")
            barrier.expect_tx(nbytes)
            barrier.arrive(1, op, thread)
            thread.notes["mbarrier"] = (f"arrived on {barrier.describe()} expecting {nbytes} "
                                        f"bytes ({location_text(op)})")
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        site, groups = _barrier_columns(ex, op, mask, loops)
        for sub, (offset, cta) in groups:
            name, stage = ex.slot_of(offset, op, site)
            ex.emit(sub, km.Arrive, {"barrier": name, "stage": stage, "cta": cta,
                                     "site": site, "expect": True,
                                     "tx_bytes": op.attrs["tx_bytes"]}, per_thread=1)
            for what, nbytes in op.attrs["copies"]:
                if not what.startswith("lk.sm90.tma_load"):     # attached by hand: no copy op
                    ex.emit(sub, km.Copy, {"barrier": name, "stage": stage, "ctas": (cta,),
                                           "nbytes": nbytes, "dst": None, "site": site,
                                           "what": f"{what} (attached by hand)"})


class MbarrierWait(OpDef):
    """Wait until the phase of parity operand 1 of the barrier at operand 0 has completed
    (`mbarrier.try_wait.parity` in a loop, sm_90); in debug builds a bounded loop that records
    the barrier, stage (operand 2) and line in the error record (operand 3) and traps."""

    name = "mbarrier_wait"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _check_barrier_operand(op)
        debug = op.attrs.get("debug")
        if len(op.operands) != (4 if debug else 2) or op.operands[1].type != i32:
            fail(op, "takes offset and parity (i32), plus stage and the error-record pointer "
                     "in debug builds")
        if debug and (op.operands[2].type != i32 or
                      not isinstance(op.operands[3].type, PointerType)):
            fail(op, "in debug builds the stage is an i32 and the record a pointer")

    def lower(self, op, lw):
        parity = _u32(lw, op.operands[1])
        if not op.attrs["debug"]:
            wait(lw.k, _slot(lw, op), parity)
            return
        stage, errors = op.operands[2], op.operands[3]
        sink = next(p.attrs["resolve"] for p in lw.fn.params if p.results[0].id == errors.id)
        stage_reg = _u32(lw, stage)
        waits = LoweredWaits(lw.k, sink, memory.cvta(lw.k, "global", lw.reg(errors)))
        wait(lw.k, _slot(lw, op, stage_reg), parity, debug=waits, location=op.location)

    def interpret(self, op, compiler):
        offset, parity = op.operands[0].id, op.operands[1].id

        def run(thread):
            barrier = lookup(thread.cta, thread.env[offset], op, "lk.sm90.mbarrier_wait")
            return PhaseWait(barrier, thread.env[parity] & 1, op)
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        site, groups = _barrier_columns(ex, op, mask, loops)
        for sub, (offset, cta) in groups:
            parity = ex.per_thread(op.operands[1], sub)
            name, stage = ex.slot_of(offset, op, site)
            if parity is None:
                ex.undecidable(op, loops, f"the parity of this wait on {name}[{stage}] is "
                               "computed from memory; the check skipped it")
                continue
            for part, (p,) in ex.split(sub, [parity]):
                ex.emit(part, km.Wait, {"barrier": name, "stage": stage, "cta": cta,
                                        "parity": p, "site": site})

