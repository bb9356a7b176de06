"""The warp-role, elect-one, named-barrier and cluster ops of the IR, one definition each. The
user API that emits them is layoutkit.dsl.sm90.roles and .cluster; the PTX comes from
layoutkit.sync.

IR ops (name: operands -> results; attrs):
  warp_role:     ->   role, warpgroups (first, count), registers (or None), setmaxnreg
                      ("inc"/"dec"/None, set when the split is complete), entry_registers;
                      one block: the role's body, run by the threads of those warpgroups
  elect_one:     ->   one block, run by one elected lane of each warp that reaches it
  named_barrier: ->   kind ("sync"/"arrive"), id (1..NAMED_BARRIER_COUNT-1), threads, role
                      (name or None)
  special_reg:   -> i32     name (a PTX special register: cluster_ctarank, cluster_ctaid.x,
                            clusterid.x, ...), inserted at the top of the kernel body
  cluster_sync:  ->         (barrier.cluster.arrive.release.aligned + wait.acquire.aligned)

A role region lowers to (the warpgroup index made warp-uniform once, by layoutkit.sync):

    sub.u32 d, wg, first;  setp.lt.u32 p, d, count;  @!p bra.uni $role_skip;
    setmaxnreg.{inc,dec}.sync.aligned.u32 N;      // per RoleSplit.direction
    <body>
  $role_skip:

Targets (what each lowering emits, PTX ISA / hopper-ptx.md §0.1): `bar.sync`/`bar.arrive` with an id
and a count exist on sm_80; a role region is a uniform branch on the warpgroup index (sm_80 PTX)
plus, when it has a register budget, `setmaxnreg` (sm_90a only: lk.sm90.warp_role refuses a budget
on sm_80 at trace time, asking the ptx layer's `setmaxnreg.REQUIREMENT`). `elect.sync`,
`barrier.cluster` and the cluster special registers need sm_90.
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.isa import arith, compare, control, special
from layoutkit.sync import (NAMED_BARRIER_COUNT, WARPGROUP_THREADS, WHOLE_CTA_ID, NamedBarrier,
                            check_directives, cluster_arrive, cluster_wait, emit_cluster_sync,
                            emit_elect_one, named_arrive,
                            named_sync, set_role_registers, warpgroup_index)
from layoutkit.ptx.isa.warp import WARP_SIZE
from layoutkit.sync import kernel_model as km

from ..core.opdef import ALL_TARGETS, SM90A_ONLY, NoEffects, OpDef
from ..core.types import i32
from ..core.verifier import fail
from ..interpreter import dsmem_model
from ..interpreter.executor import Step, run_steps
from ..interpreter.machine import BarrierState, BarrierWait, WaitQueue
from ..lower.roles import role_split_of
from .cluster import CLUSTER_REGISTERS



def _role_split(lw):
    """The kernel's RoleSplit, its directives checked and the warpgroup index emitted once."""
    if getattr(lw, "_split", None) is None:
        lw._split = role_split_of(lw.fn)
        check_directives(lw.k, lw._split)
        lw._tid, lw._warpgroup = warpgroup_index(lw.k)
    return lw._split


def _lower_region(lw, op, skip) -> None:
    lw.push()
    lw.block(op.blocks[0])
    lw.pop()
    lw.k.place(skip)


class WarpRole(OpDef):
    """Role `role`: its block runs in warpgroups first..first+count-1 only, after setmaxnreg
    to `registers` (direction `setmaxnreg`, from the kernel's RoleSplit)."""

    name = "warp_role"
    targets = ALL_TARGETS        # a register budget (setmaxnreg) is sm_90a: see the docstring
    emits_events = False           # effects() walks the region with the role's threads

    def verify(self, op):
        first, count = op.attrs.get("warpgroups", (None, None))
        if op.operands or op.results or len(op.blocks) != 1 or not isinstance(first, int)\
                or not isinstance(count, int) or first < 0 or count < 1:
            fail(op, "owns one block, takes no values and names warpgroups (first, count)")
        if op.attrs.get("setmaxnreg") not in (None, "inc", "dec") or (
                op.attrs["setmaxnreg"] is not None and op.attrs.get("registers") is None):
            fail(op, "setmaxnreg is inc, dec or None, and needs a register count")

    def lower(self, op, lw):
        k = lw.k
        split = _role_split(lw)
        first, count = op.attrs["warpgroups"]
        skip = k.label(f"role_{op.attrs['role']}_end")
        if count < split.threads // WARPGROUP_THREADS:
            offset = arith.sub(k, lw._warpgroup, first, dtype="u32") if first else\
                lw._warpgroup
            inside = compare.setp(k, "lt", offset, count, dtype="u32")
            control.bra(k, skip, uni=True, pred=~inside)
        set_role_registers(k, split, op.attrs["role"])
        _lower_region(lw, op, skip)

    def interpret(self, op, compiler):
        first, count = op.attrs["warpgroups"]
        role = op.attrs["role"]
        steps = compiler.block(op.blocks[0])

        def run(thread):
            group = thread.tid // WARPGROUP_THREADS
            if not first <= group < first + count:
                return None
            thread.role = f"{role} warpgroup {group}"
            return run_steps(thread, steps)
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        first, count = op.attrs["warpgroups"]
        wg = ex.tid // WARPGROUP_THREADS
        sub = mask & (wg >= first) & (wg < first + count)
        ex.roles.append(op.attrs["role"])
        ex.role[sub] = len(ex.roles) - 1
        ex.block(op.blocks[0], sub, loops)


class ElectOne(OpDef):
    """Its block runs in one lane of each warp that reaches it (`elect.sync`, sm_90; the
    interpreter and the protocol check elect the lowest lane, as the hardware does for a
    converged warp)."""

    name = "elect_one"
    targets = SM90A_ONLY
    emits_events = False           # effects() walks the region with the elected lanes

    def verify(self, op):
        if op.operands or op.results or len(op.blocks) != 1:
            fail(op, "owns one block and takes no values")

    def lower(self, op, lw):
        skip = lw.k.label("elect_end")
        control.bra(lw.k, skip, pred=~emit_elect_one(lw.k))
        _lower_region(lw, op, skip)

    def interpret(self, op, compiler):
        steps = compiler.block(op.blocks[0])

        def run(thread):
            return run_steps(thread, steps) if thread.lane == 0 else None
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        idx = np.nonzero(mask)[0]
        _, first = np.unique(idx // WARP_SIZE, return_index=True)
        sub = np.zeros_like(mask)
        sub[idx[first]] = True
        ex.block(op.blocks[0], sub, loops)


class NamedBarrierOp(OpDef):
    """`bar.sync id, threads` (kind "sync") or `bar.arrive id, threads` (kind "arrive") on a
    named barrier (ids 1..NAMED_BARRIER_COUNT-1; WHOLE_CTA_ID is lk.barrier()'s)."""

    name = "named_barrier"
    targets = ALL_TARGETS
    synchronizes = True

    def verify(self, op):
        a = op.attrs
        if op.operands or op.results or op.blocks or a.get("kind") not in ("sync", "arrive")\
                or not isinstance(a.get("id"), int)\
                or not WHOLE_CTA_ID < a["id"] < NAMED_BARRIER_COUNT\
                or not isinstance(a.get("threads"), int) or a["threads"] % WARP_SIZE:
            fail(op, f"is a sync or arrive on id {WHOLE_CTA_ID + 1}..{NAMED_BARRIER_COUNT - 1} "
                     f"with a multiple of {WARP_SIZE} threads")

    def lower(self, op, lw):
        a = op.attrs
        barrier = NamedBarrier(a["id"], a["threads"], a["role"] or "")
        (named_sync if a["kind"] == "sync" else named_arrive)(lw.k, barrier)

    def interpret(self, op, compiler):
        ident, threads, waits = op.attrs["id"], op.attrs["threads"], op.attrs["kind"] == "sync"

        def run(thread):
            barrier = thread.cta.barrier(ident)
            generation = barrier.arrive(thread, threads, op, waits)
            return BarrierWait(barrier, generation, op) if waits else None
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        a = op.attrs
        ex.emit(mask, km.ThreadBarrier, {"ident": a["id"], "threads": a["threads"],
                                         "waits": a["kind"] == "sync",
                                         "site": ex.site(op, loops)}, per_thread=1)


class SpecialReg(NoEffects, OpDef):
    """A cluster special register `name` (one of cluster.CLUSTER_REGISTERS) as an i32 (sm_90).
    The protocol check binds its value per thread itself (Extractor._fixed)."""

    name = "special_reg"
    targets = SM90A_ONLY

    def verify(self, op):
        if op.operands or len(op.results) != 1 or op.results[0].type != i32 or\
                op.attrs.get("name") not in CLUSTER_REGISTERS:
            fail(op, f"reads one of {sorted(CLUSTER_REGISTERS)} into an i32")

    def lower(self, op, lw):
        lw.define(op, special.sreg(lw.k, op.attrs["name"]))

    def interpret(self, op, compiler):
        name, r = op.attrs["name"], op.results[0].id

        def run(thread):
            thread.env[r] = thread.cta.state["cluster_registers"][name]
        return Step(run, op)


class ClusterSync(OpDef):
    """Every thread of every CTA of the cluster arrives and waits (`barrier.cluster.arrive
    .release.aligned` + `barrier.cluster.wait.acquire.aligned`, sm_90; attr `relaxed`:
    `arrive.relaxed`, a rendezvous that orders no memory)."""

    name = "cluster_sync"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        if op.operands or op.results or op.blocks or \
                not isinstance(op.attrs.get("relaxed", False), bool):
            fail(op, "takes no operands, has no results, and is relaxed or not")

    def lower(self, op, lw):
        if op.attrs.get("relaxed"):
            cluster_arrive(lw.k, relaxed=True)
            cluster_wait(lw.k)
        else:
            emit_cluster_sync(lw.k)

    def interpret(self, op, compiler):
        relaxed = op.attrs.get("relaxed", False)

        def run(thread):
            cluster = thread.cta.state["cluster_ctas"]
            barrier = cluster[0].state.get("cluster_barrier")
            if barrier is None:
                barrier = cluster[0].state["cluster_barrier"] = BarrierState(
                    -1, WaitQueue(thread.cta.machine.scheduler), name="barrier.cluster")
            total = sum(len(cta.threads) for cta in cluster)
            dsmem_model.arrive(thread, orders=not relaxed)
            return BarrierWait(barrier, barrier.arrive(thread, total, op), op)
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.ThreadBarrier, {"ident": "cluster",
                                         "threads": ex.block_threads * ex.ctas,
                                         "waits": True, "site": ex.site(op, loops),
                                         "orders": not op.attrs.get("relaxed", False)},
                per_thread=1)
