"""Handlers of warp roles, elect-one regions, named barriers and clusters (layoutkit.dsl.sm90.roles,
layoutkit.dsl.sm90.cluster): `warp_role` runs its block in the threads of its warpgroups (which then
carry the role's name in reports), `elect_one` in lane 0 of each warp (elect.sync elects the
lowest active lane of a converged warp), `named_barrier` is bar.sync/bar.arrive id, threads,
`special_reg` reads the cluster registers and `cluster_sync` waits for every thread of every
CTA of the cluster.
"""
from __future__ import annotations

from .executor import Step, handler, run_steps
from .machine import BarrierState, BarrierWait, WaitQueue

WARPGROUP_THREADS = 128


@handler("warp_role")
def _warp_role(op, compiler):
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


@handler("elect_one")
def _elect_one(op, compiler):
    steps = compiler.block(op.blocks[0])

    def run(thread):
        return run_steps(thread, steps) if thread.lane == 0 else None
    return Step(run, op)


@handler("named_barrier")
def _named_barrier(op, compiler):
    ident, threads, waits = op.attrs["id"], op.attrs["threads"], op.attrs["kind"] == "sync"

    def run(thread):
        barrier = thread.cta.barrier(ident)
        generation = barrier.arrive(thread, threads, op, waits)
        return BarrierWait(barrier, generation, op) if waits else None
    return Step(run, op)


@handler("special_reg")
def _special_reg(op, compiler):
    name, r = op.attrs["name"], op.results[0].id

    def run(thread):
        thread.env[r] = thread.cta.state["cluster_registers"][name]
    return Step(run, op)


@handler("cluster_sync")
def _cluster_sync(op, compiler):
    def run(thread):
        cluster = thread.cta.state["cluster_ctas"]
        barrier = cluster[0].state.get("cluster_barrier")
        if barrier is None:
            barrier = cluster[0].state["cluster_barrier"] = BarrierState(
                -1, WaitQueue(thread.cta.machine.scheduler), name="barrier.cluster")
        total = sum(len(cta.threads) for cta in cluster)
        return BarrierWait(barrier, barrier.arrive(thread, total, op), op)
    return Step(run, op)


def cluster_registers(coord: tuple, grid: tuple, shape: tuple) -> dict:
    """The cluster special registers of the CTA at `coord` (grid and cluster shapes)."""
    local = tuple(c % s for c, s in zip(coord, shape))
    regs = {"cluster_ctarank": local[0] + shape[0] * (local[1] + shape[1] * local[2])}
    for axis, a in enumerate("xyz"):
        regs[f"cluster_ctaid.{a}"] = local[axis]
        regs[f"clusterid.{a}"] = coord[axis] // shape[axis]
        regs[f"nclusterid.{a}"] = grid[axis] // shape[axis]
    return regs
