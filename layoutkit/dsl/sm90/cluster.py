"""Thread-block clusters: the CTA's rank and position in its cluster, and the cluster barrier.

A kernel declared with `@lk.kernel(cluster=(x, y, z))` gets `.reqnctapercluster x, y, z` and
is launched in clusters of that shape (the grid must be a whole number of clusters). Inside it:

    rank = lk.sm90.block_rank_in_cluster()      # %cluster_ctarank, 0..x*y*z-1 (a kernel integer)
    lk.sm90.cluster_sync()                      # barrier.cluster.arrive.release + wait.acquire
    lk.sm90.cluster_sync(relaxed=True)          # arrive.relaxed + wait: a rendezvous only
    lk.sm90.mbarrier_arrive(empty[s], cta=(rank + 1) % 2)   # arrive on a peer's barrier

`lk.sm90.cluster_sync()` is reached by every thread of every CTA of the cluster: before touching a
peer's shared memory (its barriers initialised) and before exiting while peers may still
touch ours. Inside lk.if_ or a warp role it is refused (it would hang).

The IR ops these emit (special_reg, cluster_sync) are defined in
layoutkit.dsl.sm90.role_ops.
"""
from __future__ import annotations

from layoutkit.algebra.sympy_gate import sympy

from ..core.errors import TraceError
from ..core.ir import Op
from ..core.sync_trace import sync_state
from ..core.tracer import current
from ..core.types import i32

# The special registers a kernel may read as integers here, and the symbol each binds.
CLUSTER_REGISTERS = {"cluster_ctarank": "cta_rank",
                     **{f"cluster_ctaid.{a}": f"cta_in_cluster_{a}" for a in "xyz"},
                     **{f"clusterid.{a}": f"cluster_{a}" for a in "xyz"},
                     **{f"nclusterid.{a}": f"num_clusters_{a}" for a in "xyz"}}


def _cluster(what: str):
    trace = current(what)
    shape = sync_state(trace).cluster
    if shape is None:
        raise TraceError(f"{what} needs a cluster kernel: declare @lk.kernel(cluster=(x, y, z))")
    return trace, shape


def _special(what: str, name: str) -> sympy.Symbol:
    trace, _ = _cluster(what)
    key = (name, -1)
    if key not in trace.specials:
        sym = sympy.Symbol(CLUSTER_REGISTERS[name], integer=True, nonnegative=True)
        value = trace.fn.new_value(i32)
        # at the front of the body, so it dominates every block already opened
        trace.fn.body.ops.insert(0, Op("special_reg", (), (value,), {"name": name}, (), None))
        trace.specials[key] = trace.bind(sym, value)
    return trace.specials[key]


def _axis(what: str, axis) -> str:
    if axis not in (0, 1, 2):
        raise TraceError(f"{what}: axis is 0, 1 or 2, got {axis!r}")
    return "xyz"[axis]


def cluster_shape() -> tuple[int, int, int]:
    """The kernel's cluster shape (x, y, z) as Python ints."""
    return _cluster("lk.sm90.cluster_shape()")[1]


def cluster_size() -> int:
    """CTAs per cluster (x * y * z), a Python int."""
    x, y, z = cluster_shape()
    return x * y * z


def block_rank_in_cluster() -> sympy.Symbol:
    """This CTA's rank in its cluster (%cluster_ctarank, 0..cluster_size()-1)."""
    return _special("lk.sm90.block_rank_in_cluster()", "cluster_ctarank")


def block_id_in_cluster(axis: int = 0) -> sympy.Symbol:
    """This CTA's position in its cluster along `axis` (%cluster_ctaid)."""
    what = "lk.sm90.block_id_in_cluster()"
    return _special(what, "cluster_ctaid." + _axis(what, axis))


def cluster_id(axis: int = 0) -> sympy.Symbol:
    """The cluster's index in the grid along `axis` (%clusterid)."""
    what = "lk.sm90.cluster_id()"
    return _special(what, "clusterid." + _axis(what, axis))


def num_clusters(axis: int = 0) -> sympy.Symbol:
    """How many clusters the grid has along `axis` (%nclusterid)."""
    what = "lk.sm90.num_clusters()"
    return _special(what, "nclusterid." + _axis(what, axis))


def cluster_sync(relaxed: bool = False) -> None:
    """Every thread of every CTA of the cluster arrives and waits (release/acquire). With
    `relaxed`, the arrive is barrier.cluster.arrive.relaxed: a rendezvous that orders no
    memory (no MEMBAR before it), enough to know that every peer has started (before a first
    lk.sm90.dsmem_store) while this thread's loads stay in flight."""
    what = "lk.sm90.cluster_sync()"
    trace, _ = _cluster(what)
    if not isinstance(relaxed, bool):
        raise TraceError(f"{what}: relaxed = {relaxed!r} must be True or False")
    trace.require_uniform(what, cluster=True)
    trace.emit("cluster_sync", (), (), {"relaxed": True} if relaxed else {})


__all__ = ["block_id_in_cluster", "block_rank_in_cluster", "cluster_id", "cluster_shape",
           "cluster_size", "cluster_sync", "num_clusters"]
