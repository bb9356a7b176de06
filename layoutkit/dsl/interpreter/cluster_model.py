"""The cluster special registers of each CTA of an interpreted launch (what `special_reg`
reads: its `interpret` facet is in layoutkit.dsl.sm90.role_ops, with the warp-role, elect-one,
named-barrier and cluster-barrier ops).
"""
from __future__ import annotations


def cluster_registers(coord: tuple, grid: tuple, shape: tuple) -> dict:
    """The cluster special registers of the CTA at `coord` (grid and cluster shapes)."""
    local = tuple(c % s for c, s in zip(coord, shape))
    regs = {"cluster_ctarank": local[0] + shape[0] * (local[1] + shape[1] * local[2])}
    for axis, a in enumerate("xyz"):
        regs[f"cluster_ctaid.{a}"] = local[axis]
        regs[f"clusterid.{a}"] = coord[axis] // shape[axis]
        regs[f"nclusterid.{a}"] = grid[axis] // shape[axis]
    return regs
