"""Which thread owns which coordinate: the layout reasoning behind reductions, broadcasts and
layout conversions, derived from TV layouts (never from per-recipe patterns).

Reducing a tile of shape S along mode m maps each column-major tile index to the index of the
reduced tile S' (S with S[m] = 1) by the projection layout P (shape S, strides of S' with 0 on
mode m). P o tv gives, per (thread, value), the reduced coordinate it contributes to. Within a
thread, values with equal reduced coordinates combine; threads whose P o tv thread parts agree
are *partners* and combine across lanes (shfl.sync.bfly over lane bits) or across warps
(shared memory). Partners must form an XOR group of thread-index bits, which is checked.

>>> from layoutkit.algebra import Layout
>>> from layoutkit.dsl.core.values import TVLayout
>>> rows = TVLayout((4, 64), Layout(((8, 4), 8), ((32, 1), 4)))   # 32 threads x 8 values
>>> r = plan_reduction(rows, 1)
>>> str(r.layout), r.lane_bits, r.warp_bits, r.groups
('((8,4),1):((0,1),0) over tile (4,1)', (0, 1, 2), (), ((0, 1, 2, 3, 4, 5, 6, 7),))
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.algebra import Layout, LayoutError, composition, filter, make_layout, size

from ..core.errors import LayoutMismatchError, TraceError
from ..core.values import TVLayout

WARP = 32
LANE_BITS = 5


def projection(tile: tuple, mode: int) -> Layout:
    """Column-major index of `tile` -> column-major index of `tile` with mode `mode` of size 1."""
    strides, running = [], 1
    for i, extent in enumerate(tile):
        strides.append(0 if i == mode else running)
        running *= 1 if i == mode else extent
    return Layout(tuple(tile), tuple(strides))


def reduced_tile(tile: tuple, mode: int) -> tuple:
    return tuple(1 if i == mode else e for i, e in enumerate(tile))


@dataclass(frozen=True)
class ReductionPlan:
    """`layout`: the reduced tensor's TV layout; `groups[j]`: the value indices of the input
    that combine into reduced value j (in order); `lane_bits` / `warp_bits`: the thread-index
    bits whose partners hold the same reduced coordinates (lanes of a warp / whole warps)."""

    layout: TVLayout
    groups: tuple
    lane_bits: tuple
    warp_bits: tuple


def _thread_table(layout: Layout, count: int) -> list:
    return [layout(t) for t in range(count)]


def _xor_bits(table: list) -> list:
    """Bits b with table[t ^ 2**b] == table[t] for every t (and t ^ 2**b a thread)."""
    n = len(table)
    return [b for b in range(max(n - 1, 1).bit_length())
            if all((t ^ (1 << b)) < n and table[t ^ (1 << b)] == table[t] for t in range(n))]


def _projected(tv: TVLayout, mode: int, what: str) -> Layout:
    if not isinstance(tv, TVLayout):
        raise TraceError(f"{what}: takes a register tensor, got {tv!r}")
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode < len(tv.tile):
        raise TraceError(f"{what}: mode {mode!r} is not a mode of the tile {tv.tile}")
    if not all(isinstance(e, int) for e in tv.tile):
        raise TraceError(f"{what}: the tile {tv.tile} has symbolic extents")
    try:
        return composition(projection(tv.tile, mode), tv.layout)
    except LayoutError as exc:
        raise TraceError(f"{what}: cannot project {tv} onto mode {mode}'s complement ({exc})") \
            from None


def plan_reduction(tv: TVLayout, mode: int, what: str = "reduction") -> ReductionPlan:
    """How to reduce a register tensor over `tv` along `mode` (see the module docstring)."""
    pl = _projected(tv, mode, what)
    threads, values = tv.num_threads, tv.num_values
    pt = _thread_table(pl[0], threads)
    lt = _thread_table(tv.layout[0], threads)
    pv = [pl[1](v) for v in range(values)]
    if len({tv.layout[1](v) for v in range(values)}) != values:
        raise TraceError(f"{what}: {tv} repeats a coordinate within a thread; a reduction would "
                         "count it twice")
    keys = list(dict.fromkeys(pv))
    kept = filter(pl[1])
    if [kept(j) for j in range(size(kept))] != keys:
        raise TraceError(f"{what}: the reduced values of {tv} along mode {mode} are not a layout "
                         f"of the thread's values ({pl[1]})")
    groups = tuple(tuple(v for v in range(values) if pv[v] == key) for key in keys)
    reducing = _xor_bits(pt)
    replicated = set(_xor_bits(lt))
    bits = [b for b in reducing if b not in replicated]
    classes: dict = {}
    for t in range(threads):
        classes.setdefault(pt[t], set()).add(lt[t])
    holders = [sum(1 for t in range(threads) if pt[t] == p) for p in classes]
    if any(h != 1 << len(reducing) for h in holders) or \
            any(len(c) != 1 << len(bits) for c in classes.values()):
        raise TraceError(f"{what}: the threads of {tv} that share a reduced coordinate along mode "
                         f"{mode} do not form a group of thread-index bits (a power-of-two "
                         "number of lanes or warps); choose a TV layout whose threads split the "
                         "mode by whole bits")
    owner: dict = {}
    for t in range(threads):
        for key in keys:
            if owner.setdefault(pt[t] + key, pt[t]) != pt[t]:
                raise TraceError(f"{what}: in {tv}, two threads that are not partners hold parts "
                                 f"of the same reduced coordinate along mode {mode}")
    layout = TVLayout(reduced_tile(tv.tile, mode), make_layout(pl[0], kept))
    return ReductionPlan(layout, groups, tuple(b for b in bits if b < LANE_BITS),
                         tuple(b for b in bits if b >= LANE_BITS))


def broadcast_map(reduced: TVLayout, target: TVLayout, what: str = "lk.broadcast") -> tuple:
    """For each value index of `target`, the value index of `reduced` holding its reduced
    coordinate in the same thread; LayoutMismatchError if `reduced` is not `target` reduced
    along a mode."""
    modes = [i for i, (a, b) in enumerate(zip(reduced.tile, target.tile)) if a != b]
    mismatch = LayoutMismatchError(
        f"{what}: the reduced tensor's layout is not the target layout reduced along one mode\n"
        f"      reduced tensor: {reduced}\n      target layout:  {target}")
    if len(reduced.tile) != len(target.tile) or len(modes) != 1 or reduced.tile[modes[0]] != 1 \
            or reduced.num_threads != target.num_threads:
        raise mismatch
    pl = _projected(target, modes[0], what)
    threads = target.num_threads
    if _thread_table(pl[0], threads) != _thread_table(reduced.layout[0], threads):
        raise mismatch
    have = {reduced.layout[1](j): j for j in range(reduced.num_values)}
    try:
        return tuple(have[pl[1](v)] for v in range(target.num_values))
    except KeyError:
        raise mismatch from None


__all__ = ["ReductionPlan", "plan_reduction", "broadcast_map", "projection", "reduced_tile"]
