"""Reductions of a register tensor along a mode of its tile, and broadcasting back.

`lk.reduce_max(x, mode)` / `lk.reduce_sum(x, mode)` (f32) combine, in order: the values of each
thread with the same reduced coordinate (a pairwise tree), the lanes of a warp that hold parts
of it (shfl.sync.bfly over the lane bits the TV layout spreads the mode over), and the warps
that do (each warp's partial through a shared scratch buffer, between two barriers when the
reduction sits in a loop). Which threads and values combine is derived from the TV layout
(layoutkit.dsl.lang.ownership). The result's layout is the reduced tile's TV layout: every thread
that held a part of a reduced coordinate holds the whole result. `lk.broadcast(r, layout)`
spreads it back over `layout` (the one it was reduced from), for elementwise ops with x.

    m = lk.reduce_max(x, 1)                 # row maxima of a (rows, cols) tile
    y = lk.exp2(x - lk.broadcast(m, x.layout))

`lk.thread_sum(x, mode)` stops after the first step: each thread's own partial, as a tensor over
the tile with `mode` cut to the number of partner threads (a partner's rank among them is its
coordinate there). A running sum kept that way (a softmax's row sum, rescaled each step) costs
no shuffles until `lk.reduce_sum(partial, mode)` combines it once, in `reduce_sum(x, mode)`'s
layout (for layouts whose partners are lanes).
"""
from __future__ import annotations

import math

from layoutkit.algebra import Layout, composition, flatten, make_layout
from layoutkit.algebra.sympy_gate import deferred_module, sympy

from ..core.errors import TraceError
from .ownership import broadcast_map, plan_reduction
from .shared import allocate, shared_access
from ..core.tracer import current
from ..core.types import f32, i32
from ..core.values import RegisterTensor, TVLayout

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)

KINDS = {"reduce_max": "max", "reduce_sum": "add"}


def _tree(combine, values: list):
    while len(values) > 1:
        pairs = [combine(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    return values[0]


def in_loop(trace) -> bool:
    """Whether the op being traced is inside an lk.range body."""
    return any(parent.ops and parent.ops[-1].name == "for" for parent in trace.blocks[:-1])


def _bit(tid, b: int):
    return symbolic.mod(sympy.floor(tid / (1 << b)), 2)


def _across_warps(trace, plan, values: list, combine, what: str) -> list:
    """Combine each warp's partials through shared memory: scratch[rank][reduced index]."""
    entries = int(sympy.prod(plan.layout.tile))
    ranks = 1 << len(plan.warp_bits)
    alloc = allocate(what, ranks * entries * f32.nbytes, 16, name=None)
    tid = trace.special("thread_idx", 0)
    _, base = plan.layout.layout.slice_and_offset((tid, None))
    bits = plan.warp_bits
    if list(bits) == list(range(bits[0], bits[0] + len(bits))):     # one contiguous field
        rank = symbolic.mod(sympy.floor(tid / (1 << bits[0])), 1 << len(bits))
    else:
        rank = sum((_bit(tid, b) * (1 << i) for i, b in enumerate(bits)), sympy.Integer(0))
    value_layout = plan.layout.layout[1]
    offsets = [base + value_layout(j) for j in range(len(values))]
    for offset, value in zip(offsets, values):
        shared_access(trace, alloc, f32, None, rank * entries + offset, 1, [value])
    trace.emit("barrier", (), ())
    out = [_tree(combine, [shared_access(trace, alloc, f32, None, r * entries + offset, 1)[0]
                           for r in range(ranks)]) for offset in offsets]
    if in_loop(trace):      # the next iteration rewrites the scratch: wait for every reader
        trace.emit("barrier", (), ())
    return out


def _reduce(x, mode, what: str) -> RegisterTensor:
    trace = current(what)
    if not isinstance(x, RegisterTensor):
        raise TraceError(f"{what}: reduces a register tensor, got {x!r}")
    if x.dtype != f32:
        raise TraceError(f"{what}: reduces f32 tensors, got {x.dtype}; cast first with "
                         "lk.cast(x, lk.f32)")
    plan = plan_reduction(x.layout, mode, what)
    if plan.lane_bits or plan.warp_bits:
        trace.require_uniform(what)
    kind = KINDS[what.removeprefix("lk.")]

    def combine(a, b):
        return trace.emit("binary", [a, b], [f32], {"kind": kind})[0]

    values = [_tree(combine, [x.values[v] for v in group]) for group in plan.groups]
    for b in plan.lane_bits:
        lane = trace.constant(1 << b, i32)
        values = [combine(v, trace.emit("shfl", [v, lane], [f32], {"mode": "bfly"})[0])
                  for v in values]
    if plan.warp_bits:
        values = _across_warps(trace, plan, values, combine, what)
    return RegisterTensor(f32, plan.layout, values)


def _partial_layout(tv: TVLayout, plan, mode: int, what: str) -> TVLayout:
    """The layout of `thread_sum`: tile mode `mode` of extent 2**len(partner bits), thread t at
    the reduced coordinates of its values and, along `mode`, at its rank among its partners."""
    bits = plan.lane_bits + plan.warp_bits
    tile = tuple((1 << len(bits)) if i == mode else e for i, e in enumerate(tv.tile))
    strides, running = [], 1
    for extent in tile:
        strides.append(running)
        running *= extent
    embed = Layout(tuple(plan.layout.tile), tuple(strides))   # reduced tile index -> new tile
    threads, values = plan.layout.layout[0], plan.layout.layout[1]

    def at(t: int) -> int:
        rank = sum(((t >> b) & 1) << i for i, b in enumerate(bits))
        return embed(threads(t)) + strides[mode] * rank

    shape = flatten(tv.layout[0].shape)
    firsts = [math.prod(shape[:i]) for i in range(len(shape))]
    thread_layout = Layout(tuple(shape), tuple(at(f) for f in firsts))
    if any(thread_layout(t) != at(t) for t in range(tv.num_threads)):
        raise TraceError(f"{what}: the partner ranks of {tv} along mode {mode} are not a "
                         "layout of the thread index; use lk.reduce_sum")
    value_layout = composition(embed, values)
    return TVLayout(tile, make_layout(thread_layout, value_layout))


def thread_sum(x: RegisterTensor, mode: int) -> RegisterTensor:
    """Each thread's own sum of its values of `x` (f32) along tile mode `mode`, no shuffles;
    `lk.reduce_sum(thread_sum(x, mode), mode)` is `lk.reduce_sum(x, mode)` (see the module
    docstring)."""
    trace = current("lk.thread_sum")
    if not isinstance(x, RegisterTensor) or x.dtype != f32:
        raise TraceError(f"lk.thread_sum: sums an f32 register tensor, got {x!r}")
    plan = plan_reduction(x.layout, mode, "lk.thread_sum")
    layout = _partial_layout(x.layout, plan, mode, "lk.thread_sum")

    def combine(a, b):
        return trace.emit("binary", [a, b], [f32], {"kind": "add"})[0]

    return RegisterTensor(f32, layout, [_tree(combine, [x.values[v] for v in group])
                                        for group in plan.groups])


def reduce_max(x: RegisterTensor, mode: int) -> RegisterTensor:
    """The maximum of `x` (f32) along tile mode `mode`; see the module docstring."""
    return _reduce(x, mode, "lk.reduce_max")


def reduce_sum(x: RegisterTensor, mode: int) -> RegisterTensor:
    """The sum of `x` (f32) along tile mode `mode`; see the module docstring."""
    return _reduce(x, mode, "lk.reduce_sum")


def broadcast(r: RegisterTensor, layout: TVLayout) -> RegisterTensor:
    """`r` (reduced along one mode of `layout`'s tile) repeated along that mode, as a tensor
    over `layout`; no data moves (each thread already holds its rows' results)."""
    current("lk.broadcast")
    if not isinstance(r, RegisterTensor) or not isinstance(layout, TVLayout):
        raise TraceError(f"lk.broadcast: takes a register tensor and a TVLayout, got {r!r}, "
                         f"{layout!r}")
    index = broadcast_map(r.layout, layout)
    return RegisterTensor(r.dtype, layout, [r.values[j] for j in index])


__all__ = ["reduce_max", "reduce_sum", "thread_sum", "broadcast"]
