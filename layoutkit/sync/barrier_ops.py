"""Emitting the CTA-, warp- and cluster-level barriers and fences a pipeline needs.

- `cta_sync(k)`: `bar.sync 0`, the whole CTA (every thread must reach it; do it before the
  role split, since roles may exit early: hopper-ptx.md §7).
- `named_sync` / `named_arrive`: a NamedBarrier's `bar.sync id, threads` / `bar.arrive id,
  threads`; the count always comes from the barrier value, so every participant agrees.
- `emit_fence_proxy_async(k)`: after generic-proxy writes (st.shared, stmatrix) that the async
  proxy (TMA store, wgmma) will read; each writer fences, then a barrier (§4).
- `emit_cluster_sync(k)`: `barrier.cluster.arrive.release` + `wait.acquire` over the whole cluster,
  before touching a peer's shared memory and before exit (§9).
- `emit_elect_one(k)`: a predicate true in exactly one lane of the (converged) warp (§2).
"""
from __future__ import annotations

from layoutkit.ptx.builder import KernelBuilder, Reg
from layoutkit.ptx.isa import cluster, named_barrier, proxy_fence
from layoutkit.ptx.isa.warp import FULL_MASK as FULL_WARP

from .errors import NamedBarrierError
from .named_barriers import WHOLE_CTA_ID, NamedBarrier


def cta_sync(k: KernelBuilder) -> None:
    """`bar.sync 0`: every thread of the CTA waits for every other."""
    named_barrier.bar_sync(k, WHOLE_CTA_ID)


def _barrier(barrier, what: str) -> NamedBarrier:
    if not isinstance(barrier, NamedBarrier):
        raise NamedBarrierError("takes a NamedBarrier (from NamedBarrierAllocator.allocate)",
                                thing=what, value=barrier)
    return barrier


def named_sync(k: KernelBuilder, barrier: NamedBarrier, *, pred=None) -> None:
    """Arrive at `barrier` and wait until all of its `threads` have arrived."""
    b = _barrier(barrier, "named_sync")
    named_barrier.bar_sync(k, b.id, b.threads, pred=pred)


def named_arrive(k: KernelBuilder, barrier: NamedBarrier, *, pred=None) -> None:
    """Arrive at `barrier` without waiting (the signalling side of a producer/consumer pair)."""
    b = _barrier(barrier, "named_arrive")
    named_barrier.bar_arrive(k, b.id, b.threads, pred=pred)


def emit_fence_proxy_async(k: KernelBuilder, space: str = "shared::cta", *, pred=None) -> None:
    """`fence.proxy.async.<space>`: order this thread's generic writes before async-proxy reads."""
    proxy_fence.fence_proxy_async(k, space, pred=pred)


def cluster_arrive(k: KernelBuilder, *, relaxed: bool = False) -> None:
    """Arrive at the cluster barrier (`.release`, or `.relaxed` when no ordering is needed)."""
    cluster.barrier_cluster_arrive(k, sem="relaxed" if relaxed else "release")


def cluster_wait(k: KernelBuilder) -> None:
    """Wait until every thread of the cluster has arrived (`.acquire`)."""
    cluster.barrier_cluster_wait(k, acquire=True)


def emit_cluster_sync(k: KernelBuilder) -> None:
    """Arrive and wait at the cluster barrier: all CTAs started (and initialised their
    shared memory), or none still uses a peer's."""
    cluster_arrive(k)
    cluster_wait(k)


def emit_elect_one(k: KernelBuilder) -> Reg:
    """A predicate true in exactly one lane of the full warp (`elect.sync _|p, 0xFFFFFFFF`);
    the warp must be converged. Guard a TMA issue or a single arrive with it."""
    return cluster.elect_sync(k, FULL_WARP)


__all__ = ["cluster_arrive", "emit_cluster_sync", "cluster_wait", "cta_sync", "emit_elect_one",
           "emit_fence_proxy_async", "named_arrive", "named_sync"]
