"""Warp election and thread-block clusters: elect.sync, barrier.cluster, mapa, getctarank.

Rules (PTX ISA, hopper-ptx.md §2 and §9): `elect.sync d|p, membermask` makes exactly one lane
of the mask true (PTX 8.0, sm_90); every lane gets the elected lane id in d (or `_`).
`barrier.cluster.arrive{.release|.relaxed}{.aligned}` / `barrier.cluster.wait{.acquire}
{.aligned}` (PTX 7.8; the .sem qualifiers PTX 8.0): all CTAs of the cluster must have
started before one touches a peer's shared memory, and none may exit while peers still access
its shared memory. `mapa` maps a shared address to the same offset in the CTA of cluster rank
`rank` (`.shared::cluster` u32/u64, or generic u64); `getctarank` gives the owning rank.
The cluster special registers (%cluster_ctarank, ...) are read with `special.sreg`.
"""
from __future__ import annotations

from ..builder import SINK, TYPES, KernelBuilder, PTXTypeError, Reg, Symbol
from .checks import choose, dest, flag, sink_or_dest, source
from .hopper_operands import PRED, SM90, SM90_PTX80, U32, u32_operand
from .warp import FULL_MASK

U64 = TYPES["u64"]
SPACES = ("shared::cluster", "generic")


def elect_sync(k: KernelBuilder, membermask=FULL_MASK, *, lane: bool = False, out=None,
               pred=None) -> "Reg | tuple[Reg, Reg]":
    """p = this lane is the one elected among `membermask`. With `lane` (or `out`), returns
    (lane_id, p): every lane gets the elected lane's id.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k")
    >>> _ = elect_sync(k); k.body_lines()[-1]
    '    elect.sync _|%p0, 0xFFFFFFFF;'
    """
    instr = "elect.sync"
    mask = u32_operand(k, instr, "membermask", membermask, 1, FULL_MASK,
                       rule="a nonzero lane mask")
    lane_id = SINK if out is None and not flag(instr, "lane", lane) else\
        sink_or_dest(k, instr, out, U32, "lane")
    p = k.reg(PRED)
    k.emit(instr, (f"{lane_id}|{p}", mask), defs=(lane_id, p), pred=pred, requires=SM90_PTX80)
    return (lane_id, p) if isinstance(lane_id, Reg) else p


def barrier_cluster_arrive(k: KernelBuilder, *, sem=None, aligned: bool = True, pred=None) -> None:
    """Arrive at the cluster barrier (`sem` 'release' (default meaning) or 'relaxed')."""
    if sem is not None:
        choose("barrier.cluster.arrive", "sem", sem, ("release", "relaxed"))
    instr = ".".join(p for p in ("barrier.cluster.arrive", sem,
                                 "aligned" if flag("barrier.cluster.arrive", "aligned", aligned)
                                 else None) if p)
    k.emit(instr, pred=pred, requires=SM90 if sem is None else SM90_PTX80)


def barrier_cluster_wait(k: KernelBuilder, *, acquire: bool = False, aligned: bool = True,
                         pred=None) -> None:
    """Wait until every thread of the cluster has arrived (`.acquire` spelled out on request).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k")
    >>> barrier_cluster_arrive(k, sem="release"); barrier_cluster_wait(k, acquire=True)
    >>> k.body_lines()
    ['    barrier.cluster.arrive.release.aligned;', '    barrier.cluster.wait.acquire.aligned;']
    """
    acquire = flag("barrier.cluster.wait", "acquire", acquire)
    instr = ".".join(p for p in ("barrier.cluster.wait", "acquire" if acquire else None,
                                 "aligned" if flag("barrier.cluster.wait", "aligned", aligned)
                                 else None) if p)
    k.emit(instr, pred=pred, requires=SM90_PTX80 if acquire else SM90)


def _cluster_operand(k: KernelBuilder, instr: str, a, space: str):
    """The address operand of mapa/getctarank and the instruction type it implies."""
    if isinstance(a, Symbol):
        if space != "shared::cluster" or a.space != "shared":
            raise PTXTypeError("a symbol operand must be a shared variable with "
                               "space='shared::cluster'", instruction=instr, operand="a", value=a)
        return a, U32
    if not isinstance(a, Reg) or a.type.is_float or a.type.is_pred or a.type.bits not in (32, 64):
        raise PTXTypeError("the address is a 32- or 64-bit integer register or a shared Symbol",
                           instruction=instr, operand="a", value=a)
    if space == "generic" and a.type.bits != 64:
        raise PTXTypeError("a generic address is 64-bit (use space='shared::cluster' for a "
                           "32-bit shared offset)", instruction=instr, operand="a", value=a)
    itype = U32 if a.type.bits == 32 else U64
    return source(k, instr, "a", a, itype, imm=False), itype


def mapa(k: KernelBuilder, a, rank, *, space: str = "shared::cluster", out=None, pred=None) -> Reg:
    """The address of `a`'s shared location in the CTA of cluster rank `rank` (u32 register or
    immediate 0..15). `space='shared::cluster'` maps a shared::cta address (32- or 64-bit) to
    a shared::cluster one; 'generic' maps a 64-bit generic address.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); a = k.reg("u32")
    >>> _ = mapa(k, a, 1); k.body_lines()[-1]
    '    mapa.shared::cluster.u32 %u1, %u0, 1;'
    """
    choose("mapa", "space", space, SPACES)
    prefix = "mapa.shared::cluster" if space == "shared::cluster" else "mapa"
    operand, itype = _cluster_operand(k, prefix, a, space)
    instr = f"{prefix}.{itype}"
    r = u32_operand(k, instr, "rank", rank, 0, 15, rule="a cluster has at most 16 CTAs")
    d = dest(k, instr, out, itype)
    k.emit(instr, (d, operand, r), defs=(d,), pred=pred, requires=SM90)
    return d


def getctarank(k: KernelBuilder, a, *, space: str = "shared::cluster", out=None, pred=None) -> Reg:
    """The cluster rank (u32) of the CTA whose shared memory holds address `a`."""
    choose("getctarank", "space", space, SPACES)
    prefix = "getctarank.shared::cluster" if space == "shared::cluster" else "getctarank"
    operand, itype = _cluster_operand(k, prefix, a, space)
    instr = f"{prefix}.{itype}"
    d = dest(k, instr, out, U32)
    k.emit(instr, (d, operand), defs=(d,), pred=pred, requires=SM90)
    return d


__all__ = ["FULL_MASK", "barrier_cluster_arrive", "barrier_cluster_wait", "elect_sync",
           "getctarank", "mapa"]
