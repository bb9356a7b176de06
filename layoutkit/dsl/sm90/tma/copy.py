"""TMA copies between a global tensor's tile and a shared tile, every hardware fact derived from
the two layouts: the tensor map (dims, strides) from the global tensor's layout and bounds, the
box and swizzle mode from the shared layout, the coordinates from the tile's position, and the
bytes a load charges to its mbarrier from the box (see derive.py for the rules).

    A = lk.global_tensor(a, Layout((M, K), (K, 1)))                   # bf16, row-major
    sA = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((128, 64), (64, 1))), lk.bf16)
    with lk.if_(lk.thread_id() == 0):
        with lk.sm90.expect_tx(full[s]):                       # expects 16384 bytes, derived here
            lk.sm90.tma_load(sA, A.tile((128, 64), (m, k)), full[s])
    ...
    lk.sm90.fence_proxy_async(); lk.barrier()                 # every writer of sC, then one thread:
    lk.sm90.tma_store(C.tile((128, 64), (m, n)), sC)
    lk.sm90.tma_store_commit(); lk.sm90.tma_store_wait(0)           # sC reusable / the CTA may exit
    lk.sm90.tma_store(dQ.tile((64, 128), (m, 0)), sdQ, reduce="add")  # dQ tile += sdQ, element-wise

A copy is issued by every thread that executes it: issue from one thread (lk.if_ or
lk.sm90.elect_one). Loads outside the tensor's bounds fill zeros; stores there are dropped,
but TMA writes the innermost dimension in 16-byte chunks, so a stored tensor's innermost extent
must be a whole number of them (proven at trace time, implied by the row stride's 16-byte rule,
or else checked at every launch as an lk.assume at the store's line) (a
`window` of a tensor is copied through the whole tensor's map: its stop does not clip). The
tensor map is a hidden kernel parameter encoded at launch from the arguments (cached per
address, dims and strides); a global stride that breaks the 16-byte rule is a trace-time
error when provable, else a KernelArgumentError at launch naming the tensor and the stride.

A store with `reduce=` (an op of the ptx layer's isa.tma.REDUCE_TYPES: "add", "min", "max",
"inc", "dec", "and", "or", "xor", for the element types listed there that a GPU ran correctly:
derive.HARDWARE_REDUCTIONS) combines the tile
into global memory element by element (cp.reduce.async.bulk.tensor), each element atomically,
so many CTAs may reduce into one tensor; it is otherwise the store: same boxes, tensor map,
clipping and bulk groups (tma_store_wait(writes=True) waits for the reductions).

Multicast (`multicast="x"`, or a tuple of cluster axes): the tile is shared by the CTAs of the
cluster that differ only along those axes. Each of the n CTAs issues 1/n of every box (sliced
along the box's outermost dimension) to all of them, so each CTA receives, and charges to its
own barrier, the whole tile. All n CTAs must execute the same lk.sm90.tma_load (same tile, shared
tile and barrier stage), each with its barrier initialised before any CTA issues
(lk.sm90.cluster_sync() after the init).

IR ops (name: operands -> results; attrs). Offsets are elements of the shared buffer before
its swizzle (`buffer` the allocation's name, `base` its byte offset); `box`, `coords`,
`tensor_dims`, `tensor_strides` are in TMA order (innermost first), `modes` names the tensor
mode of each; `tensor` is the global tensor's pointer parameter; `bytes` is what one op moves
into (load: each receiving CTA's) shared memory:
  tma_load:   tmap, bar(i32 byte offset), dst(i32 element offset), coords(i32)...[, mask_base]
              -> ;  tensor, modes, tensor_dims, tensor_strides, coords, box, swizzle, dtype,
              buffer, base, offset, barrier, stage, bytes, multicast (None or {"axes", "ctas",
              "pattern", "slot", "slice_dim"}; mask = pattern << mask_base, bit i = CTA rank i)
  tma_store:  tmap, src(i32 element offset), coords(i32)... -> ;  tensor, modes, tensor_dims,
              tensor_strides, coords, box, swizzle, dtype, buffer, base, offset, bytes, reduce
              (None: a plain store; else the reduction op, e.g. "add")
  tma_store_commit: -> ;  (closes this thread's bulk async-group of stores)
  tma_store_wait:   -> ;  pending (groups that may stay in flight), writes (False: until their
              shared sources are read; True: until the global writes are done)
"""
from __future__ import annotations

from layoutkit.algebra import Layout, size
from layoutkit.algebra.sympy_gate import deferred_module, sympy
from layoutkit.ptx.isa.tma import MAX_PENDING_BULK_GROUPS

from ..cluster import block_rank_in_cluster
from ...core.errors import TraceError
from ...lang.assume import assume
from ...lang.global_tensor import GlobalTensor
from ..mbarrier import MbarrierRef, attach_copy
from ...lang.shared import SharedTensor
from ...core.sync_trace import sync_state
from .derive import (SMEM_ALIGN, WRITE_CHUNK_BYTES, TmaError, plan_copies, reduce_error,
                     tensor_modes, tile_to_modes, written_extent_error)
from .tensor_map import tensormap_param
from ...core.tracer import current
from ...core.types import i32

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)

AXES = "xyz"


def _check_tiles(what: str, shared, tile) -> None:
    if not isinstance(shared, SharedTensor) or shared.tv is not None:
        raise TraceError(f"{what}: the shared side is a shared tile (lk.shared_tensor or its "
                         f".tile(...)), not a thread's partition, got {shared!r}")
    if not isinstance(tile, GlobalTensor) or tile.tv is not None:
        raise TraceError(f"{what}: the global side is a tile of a global tensor "
                         f"(lk.global_tensor(...).tile(...)), got {tile!r}")
    if tile.bounds is None or None in tile.bounds:
        raise TraceError(f"{what}: the global tensor was made with bounds {tile.bounds}; TMA "
                         "needs every mode's extent (make it with the default bounds or "
                         "explicit ones)")
    if shared.dtype != tile.dtype:
        raise TraceError(f"{what}: a {tile.dtype} global tensor and a {shared.dtype} shared "
                         "tile; TMA copies bits, the element types must match")
    if not tile.ptr.aligned16:
        raise TmaError(f"{what}: the pointer {tile.ptr.name} is not 16-byte aligned in this "
                       "specialization; a TMA tensor's global address is a multiple of 16 bytes")


def _shapes(layout: Layout) -> tuple:
    return layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)


def derive(what: str, shared: SharedTensor, tile: GlobalTensor, split: int = 1):
    """(TensorModes, CopyPlan, origins per tensor mode) of a copy between `tile` and `shared`."""
    modes = tensor_modes(tile.root, tile.extents, what)     # a window's map is its tensor's
    coord_layouts = [c for c, _ in tile.coords]
    origins = [sympy.sympify(o) for _, o in tile.coords]
    walks, extents = tile_to_modes(coord_layouts, tile.layout.shape, what)
    g_shape, s_shape = _shapes(tile.layout), _shapes(shared.layout)
    if len(g_shape) != len(s_shape) or any(size(a) != size(b) for a, b in zip(g_shape, s_shape)):
        raise TraceError(f"{what}: the global tile has shape {g_shape} but the shared tile "
                         f"{shared.layout} has shape {s_shape}; they must match mode by mode")
    per_mode = [Layout(1, 0)] * len(modes.extents)
    for j, m in enumerate(walks):
        if m is not None:
            per_mode[m] = shared.layout[j] if isinstance(shared.layout.shape, tuple) \
                else shared.layout
    plan = plan_copies(shared.dtype.nbytes, contiguous=modes.contiguous, tile_extents=extents,
                       shared=per_mode, swizzle=shared.swizzle, offset=shared.offset, what=what,
                       split=split)
    nbytes = shared.dtype.nbytes
    need = SMEM_ALIGN if shared.swizzle is None else max(SMEM_ALIGN,
                                                         shared.swizzle.size() * nbytes)
    if shared.alloc.align < need:
        raise TmaError(f"{what}: the shared buffer {shared.alloc.name} is "
                       f"{shared.alloc.align}-byte aligned, but a TMA box's shared address is a "
                       f"multiple of {need} bytes; allocate it with lk.shared_tensor(..., "
                       f"align={need})")
    return modes, plan, origins


def _common_attrs(shared: SharedTensor, tile: GlobalTensor, plan, tmap_attrs: dict) -> dict:
    return {"tensor": tile.ptr.name, "modes": plan.order,
            "tensor_dims": tmap_attrs["dims"], "tensor_strides": tmap_attrs["strides"],
            "box": plan.box, "swizzle": plan.swizzle, "dtype": shared.dtype.name,
            "buffer": shared.alloc.name, "base": shared.alloc.offset}


def _multicast_group(trace, what: str, multicast):
    """(ctas, pattern, slot expr, mask base expr, axes) of a multicast over cluster axes."""
    axes = (multicast,) if isinstance(multicast, str) else tuple(multicast)
    if not axes or any(a not in AXES for a in axes) or len(set(axes)) != len(axes):
        raise TraceError(f"{what}: multicast= is a cluster axis 'x', 'y' or 'z' or a tuple of "
                         f"distinct axes, got {multicast!r}")
    cluster = sync_state(trace).cluster
    if cluster is None:
        raise TraceError(f"{what}: multicast={multicast!r} needs a cluster kernel; declare "
                         "@lk.kernel(cluster=(x, y, z))")
    rank = block_rank_in_cluster()
    strides = (1, cluster[0], cluster[0] * cluster[1])
    coord = {a: symbolic.mod(sympy.floor(rank / strides[i]), cluster[i])
             for i, a in enumerate(AXES)}
    ctas, slot, base, pattern_ranks = 1, sympy.Integer(0), rank, [0]
    for a in AXES:
        if a not in axes:
            continue
        i = AXES.index(a)
        slot = slot + ctas * coord[a]
        ctas *= cluster[i]
        base = base - strides[i] * coord[a]
        pattern_ranks = [r + strides[i] * c for r in pattern_ranks for c in range(cluster[i])]
    if ctas == 1:
        raise TraceError(f"{what}: multicast={multicast!r} names {ctas} CTA of the cluster "
                         f"{cluster}; multicast needs at least 2 (or leave multicast=None)")
    pattern = sum(1 << r for r in pattern_ranks)
    return ctas, pattern, slot, base, axes


def tma_load(dst: SharedTensor, src: GlobalTensor, barrier: MbarrierRef, *,
             multicast=None) -> None:
    """Copy the global tile `src` into the shared tile `dst` with TMA, completing on `barrier`
    (inside `with lk.sm90.expect_tx(barrier):`, which it charges with the bytes landing in this
    CTA). `multicast`: None, or cluster axes ('x', ('x', 'y')) whose CTAs share the tile."""
    what = "lk.sm90.tma_load"
    trace = current(what)
    _check_tiles(what, dst, src)
    if not isinstance(barrier, MbarrierRef):
        raise TraceError(f"{what}: barrier= is one mbarrier (array[stage] of "
                         f"lk.sm90.mbarrier_array), got {barrier!r}")
    group = None if multicast is None else _multicast_group(trace, what, multicast)
    modes, plan, origins = derive(what, dst, src, 1 if group is None else group[0])
    tmap, tmap_attrs = tensormap_param(trace, what, src, modes, plan)
    describe = f"{what} of {src.ptr.name} {plan.box[::-1]} into {dst.alloc.name}"
    attrs = _common_attrs(dst, src, plan, tmap_attrs)
    bar = barrier.byte_offset()
    for deltas, start in plan.copies:
        coords = [origins[m] + d for m, d in zip(plan.order, deltas)]
        offset = sympy.sympify(dst.offset) + start
        extra, mc = [], None
        if group is not None:
            ctas, pattern, slot, base, axes = group
            k, _, per_slice = plan.slice
            coords[k] = coords[k] + slot * plan.box[k]
            offset = offset + slot * per_slice
            extra = [trace.index(base, i32)]
            mc = {"axes": axes, "ctas": ctas, "pattern": pattern, "slot": slot, "slice_dim": k}
        trace.emit("tma_load", [tmap, bar, trace.index(offset, i32),
                                *(trace.index(c, i32) for c in coords), *extra], (),
                   {**attrs, "coords": tuple(coords), "offset": offset, **barrier.attrs(),
                    "bytes": plan.box_bytes, "multicast": mc})
    attach_copy(barrier, plan.total_bytes, describe)


def tma_store(dst: GlobalTensor, src: SharedTensor, *, reduce: str | None = None) -> None:
    """Copy the shared tile `src` to the global tile `dst` with TMA (a bulk async-group operation:
    then lk.sm90.tma_store_commit() and lk.sm90.tma_store_wait()). The writers of `src` must run
    lk.sm90.fence_proxy_async() and synchronise before the issuing thread stores. `reduce`
    ("add", "min", ...; element types: derive.HARDWARE_REDUCTIONS): dst = dst <reduce> src,
    element-wise and atomically per element, instead of dst = src."""
    what = "lk.sm90.tma_store"
    trace = current(what)
    _check_tiles(what, src, dst)
    problem = reduce_error(reduce, src.dtype)
    if problem is not None:
        raise TraceError(f"{what}: {problem}")
    modes, plan, origins = derive(what, src, dst)
    _check_written_extent(what, dst, modes, plan)
    tmap, tmap_attrs = tensormap_param(trace, what, dst, modes, plan)
    attrs = _common_attrs(src, dst, plan, tmap_attrs)
    for deltas, start in plan.copies:
        coords = [origins[m] + d for m, d in zip(plan.order, deltas)]
        offset = sympy.sympify(src.offset) + start
        for c in coords:
            if sympy.sympify(c).is_Integer and int(c) < 0:
                raise TmaError(f"{what}: the tile's coordinate {c} is negative; TMA stores take "
                               "non-negative coordinates")
        trace.emit("tma_store", [tmap, trace.index(offset, i32),
                                 *(trace.index(c, i32) for c in coords)], (),
                   {**attrs, "coords": tuple(coords), "offset": offset,
                    "bytes": plan.box_bytes, "reduce": reduce})


def _check_written_extent(what: str, dst: GlobalTensor, modes, plan) -> None:
    """TMA writes the innermost dimension in whole 16-byte chunks, so its extent must be a
    multiple of them: proven here, or implied by the launch's check of the next mode's stride
    (rows of exactly that extent), or else checked at every launch (an lk.assume at the user's
    line); a constant extent that is not one is a TmaError."""
    inner, e = sympy.sympify(modes.extents[plan.order[0]]), dst.dtype.nbytes
    problem = written_extent_error(inner, e)
    if problem is None:
        return
    if len(plan.order) > 1 and sympy.sympify(modes.strides[plan.order[1]]) == inner:
        return                       # the tensor map's stride rule: inner * e % 16 == 0
    if not inner.free_symbols:
        raise TmaError(f"{what}: the tensor {dst.ptr.name}: {problem}")
    per = max(WRITE_CHUNK_BYTES // e, 1)
    try:
        assume(sympy.Eq(sympy.Mod(inner, per), 0),
               why=f"TMA writes the innermost dimension of {dst.ptr.name} in "
                   f"{WRITE_CHUNK_BYTES}-byte chunks, so {what} would write past its extent "
                   f"otherwise (pad the extent to a multiple of {per} elements)")
    except TraceError:
        raise TmaError(f"{what}: the tensor {dst.ptr.name}: {problem}") from None


def tma_store_commit() -> None:
    """Close this thread's bulk async-group of TMA stores (`cp.async.bulk.commit_group`)."""
    current("lk.sm90.tma_store_commit").emit("tma_store_commit", (), (), {})


def tma_store_wait(pending: int = 0, *, writes: bool = False) -> None:
    """Wait until at most `pending` of this thread's most recent store groups are in flight:
    by default until their shared sources have been read (the tiles may be overwritten, the
    CTA may exit); `writes=True` until the global writes are done (this kernel reads them)."""
    what = "lk.sm90.tma_store_wait"
    trace = current(what)
    if isinstance(pending, bool) or not isinstance(pending, int) or \
            not 0 <= pending <= MAX_PENDING_BULK_GROUPS:
        raise TraceError(f"{what}: pending is a non-negative Python int, at most "
                         f"{MAX_PENDING_BULK_GROUPS} (groups that may stay in flight), got "
                         f"{pending!r}")
    if not isinstance(writes, bool):
        raise TraceError(f"{what}: writes is True or False, got {writes!r}")
    trace.emit("tma_store_wait", (), (), {"pending": pending, "writes": writes})


__all__ = ["tma_load", "tma_store", "tma_store_commit", "tma_store_wait", "TmaError"]
