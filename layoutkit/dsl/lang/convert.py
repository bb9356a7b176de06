"""`lk.convert_layout(x, layout)`: the only way a register tensor changes TV layout.

Warp shuffles when every destination value can come from a thread of the same warp: for each
destination value index v, the source lane and the source value index j must be bit-wise
functions of the thread index, f(t) = c + sum_b w_b * bit_b(t), checked for every thread. Then
each j that some thread needs for v is one shfl.sync.idx of register j from that lane, and a
select on j(t) keeps the right one (one shuffle per value when j is the same for all threads).
When that costs more than MAX_SHUFFLES_PER_VALUE shuffles per value, or a value leaves its warp,
or the functions are not bit-wise: a round trip through a shared buffer: store under the old layout, barrier, load
under the new one (and a second barrier when inside a loop, before the buffer is rewritten).
Both are derived from the two TV layouts by enumerating who owns which tile coordinate.
"""
from __future__ import annotations

from layoutkit.algebra import Layout
from layoutkit.algebra.sympy_gate import deferred_module, sympy

from ..core.errors import LayoutMismatchError, TraceError
from .memory import load, store
from .ownership import WARP
from .reduce import in_loop
from .shared import shared_tensor
from ..core.tracer import current
from ..core.types import bool_, i32
from ..core.values import RegisterTensor, TVLayout

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)


def _owners(tv: TVLayout) -> dict:
    """Tile index -> [(thread, value), ...] of `tv`."""
    found: dict = {}
    for t in range(tv.num_threads):
        for v in range(tv.num_values):
            found.setdefault(tv.layout(t, v), []).append((t, v))
    return found


def _bitwise_fit(table: list):
    """(c, {bit: weight}) with table[t] == c + sum weight * bit_b(t) for every t, or None."""
    c = table[0]
    weights = {b: table[1 << b] - c for b in range(max(len(table) - 1, 1).bit_length())
               if (1 << b) < len(table) and table[1 << b] != c}
    for t, value in enumerate(table):
        if value != c + sum(w for b, w in weights.items() if t >> b & 1):
            return None
    return c, weights


MAX_SHUFFLES_PER_VALUE = 4


def shuffle_plan(src: TVLayout, dst: TVLayout):
    """Per destination value: (lane fit, value-index fit, sorted value indices used), or None
    when a value leaves its warp, a function is not bit-wise, or it needs too many shuffles."""
    owners = _owners(src)
    plan = []
    for v in range(dst.num_values):
        lanes, indices = [], []
        for t in range(dst.num_threads):
            local = [(s, j) for (s, j) in owners[dst.layout(t, v)] if s // WARP == t // WARP]
            if not local:
                return None
            s, j = min(local, key=lambda sj: (sj[1], sj[0]))
            lanes.append(s % WARP)
            indices.append(j)
        lane_fit, index_fit = _bitwise_fit(lanes), _bitwise_fit(indices)
        if lane_fit is None or index_fit is None:
            return None
        plan.append((lane_fit, index_fit, sorted(set(indices))))
    if sum(len(used) for _, _, used in plan) > MAX_SHUFFLES_PER_VALUE * dst.num_values:
        return None
    return plan


def _bitwise_expr(tid, fit):
    c, weights = fit
    return c + sum((w * symbolic.mod(sympy.floor(tid / (1 << b)), 2) for b, w in weights.items()),
                   sympy.Integer(0))


def convert_layout(x: RegisterTensor, layout: TVLayout) -> RegisterTensor:
    """`x` with the TV layout `layout` (same tile, same threads); see the module docstring."""
    what = "lk.convert_layout"
    trace = current(what)
    if not isinstance(x, RegisterTensor):
        raise TraceError(f"{what}: converts a register tensor, got {x!r}")
    if not isinstance(layout, TVLayout):
        raise TraceError(f"{what}: the new layout is a TVLayout, got {layout!r}")
    if x.layout == layout:
        return x
    if tuple(x.layout.tile) != tuple(layout.tile) or x.layout.num_threads != layout.num_threads:
        raise LayoutMismatchError(f"{what}: the layouts cover different tiles or thread counts\n"
                                  f"      tensor: {x.layout}\n      new:    {layout}")
    missing = set(range(int(sympy.prod(layout.tile)))) - set(_owners(x.layout))
    if missing:
        raise TraceError(f"{what}: the tensor's layout {x.layout} holds no value for tile index "
                         f"{min(missing)}, which {layout} needs")
    trace.require_uniform(what)
    plan = shuffle_plan(x.layout, layout)
    if plan is not None:
        tid = trace.special("thread_idx", 0)
        values = []
        for lane_fit, index_fit, used in plan:
            lane = trace.index(_bitwise_expr(tid, lane_fit), i32)
            got = [trace.emit("shfl", [x.values[j], lane], [x.dtype], {"mode": "idx"})[0]
                   for j in used]
            value = got[0]
            if len(used) > 1:
                index = trace.index(_bitwise_expr(tid, index_fit), i32)
                for j, other in zip(used[1:], got[1:]):
                    (pick,) = trace.emit("cmp", [index, trace.constant(j, i32)], [bool_],
                                         {"kind": "eq"})
                    (value,) = trace.emit("select", [pick, other, value], [x.dtype])
            values.append(value)
        return RegisterTensor(x.dtype, layout, values)
    buffer = shared_tensor(Layout(tuple(x.layout.tile)), x.dtype)
    store(buffer.partition(x.layout), x)
    trace.emit("barrier", (), ())
    out = load(buffer.partition(layout))
    if in_loop(trace):
        trace.emit("barrier", (), ())
    return out


__all__ = ["convert_layout", "shuffle_plan"]
