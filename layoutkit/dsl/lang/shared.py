"""Shared tensors: buffers of the block's dynamic shared memory with a layout (a plain Layout or
a Swizzle composed with one), tiled and partitioned like global tensors, and `lk.barrier()`.

Each `lk.shared_tensor(layout, dtype)` reserves cosize(layout) elements at trace time, aligned
to 16 bytes (the widest vector access) or, for a swizzled layout, to the swizzle's period: the
XOR pattern repeats every 2**(B+M+|S|) elements, so a buffer starting at a multiple of that many
elements' bytes keeps the physical bank pattern the layout describes (Sw<3,3,3> on 16-bit
elements, CuTe's 128-byte swizzle, repeats every 1024 B). The allocations' total is the
launch's dynamic shared memory; more than the opt-in limit is a `SharedMemoryError` that lists
every allocation.

>>> import layoutkit.dsl as lk
>>> from layoutkit.algebra import ComposedLayout, Layout, Swizzle
>>> @lk.kernel(num_warps=1)
... def k(x: lk.Pointer[lk.bf16]):
...     tile = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1))),
...                             lk.bf16)
>>> [(a.nbytes, a.align) for a in k.ir(lk.Pointer[lk.bf16]).shared]
[(1024, 1024)]
"""
from __future__ import annotations

from layoutkit.algebra import ComposedLayout, Layout, LayoutError, Swizzle, composition
from layoutkit.algebra import cosize, local_tile, size
from layoutkit.algebra.sympy_gate import sympy

from ..core import bounds
from ..core.errors import SharedMemoryError, TraceError, here
from ..core.facts import within_block
from ..core.ir import SharedAllocation
from ..core.sync_trace import partition_threads
from ..core.tracer import current
from ..core.types import DType, bool_, i32
from ..core.values import TVLayout

# The per-block opt-in limit of Hopper (sm_90): 227 KB of dynamic shared memory
# (CUDA C Programming Guide, "Compute capabilities", table "Technical specifications").
MAX_SHARED_BYTES = 232448
MIN_ALIGN = 16      # bytes: the widest vector access (ld.shared.v4.b32)


def swizzle_alignment(swizzle: Swizzle | None, dtype: DType) -> int:
    """The byte alignment a buffer with this swizzle (acting on element offsets) needs.

    >>> from layoutkit.dsl.core.types import bf16, f32
    >>> swizzle_alignment(Swizzle(3, 3, 3), bf16), swizzle_alignment(Swizzle(2, 2, 3), f32)
    (1024, 512)
    """
    if swizzle is None:
        return max(MIN_ALIGN, dtype.nbytes)
    return max(MIN_ALIGN, swizzle.size() * dtype.nbytes)


def allocate(what: str, nbytes: int, align: int, name: str | None = None) -> SharedAllocation:
    """Reserve `nbytes` (aligned to `align`) of the kernel's shared memory at trace time, under
    `name` (new in the kernel; default smem<N>)."""
    trace = current(what)
    fn = trace.fn
    taken = {a.name: a for a in fn.shared}
    if name is None:
        name = next(f"smem{i}" for i in range(len(fn.shared), 2 * len(fn.shared) + 1)
                    if f"smem{i}" not in taken)
    elif name in taken:
        first = taken[name]
        where = f" at {first.location.file}:{first.location.line}" if first.location else ""
        raise TraceError(f"{what}: the shared buffer name {name!r} is already taken "
                         f"({first.what}{where}); each shared buffer and barrier array takes a "
                         "name of its own")
    offset = -(-fn.shared_bytes // align) * align
    alloc = SharedAllocation(name, nbytes, align, offset, what, here())
    fn.shared.append(alloc)
    if fn.shared_bytes > MAX_SHARED_BYTES:
        listing = "\n".join("      " + a.describe() for a in fn.shared)
        raise SharedMemoryError(
            f"{what}: the kernel's shared memory would total {fn.shared_bytes} bytes, over the "
            f"{MAX_SHARED_BYTES}-byte (227 KB) per-block limit of sm_90; allocations:\n{listing}")
    return alloc


class SharedTensor:
    """A view of a shared buffer: element c is at `swizzle(offset + layout(c))` of `alloc`
    (offsets in elements; no swizzle when `swizzle` is None). `tv` is set on a thread's
    partition, whose layout is then over the TV layout's values."""

    bounds = None          # shared tiles are whole: no masking
    coords = ()
    _start = None          # the buffer's own offset (set on a whole buffer)
    parent = None          # on a thread's partition: the tile it partitions

    def __init__(self, alloc: SharedAllocation, dtype: DType, swizzle, layout: Layout, offset,
                 tv: TVLayout | None = None):
        self.alloc, self.dtype, self.swizzle = alloc, dtype, swizzle
        self.layout, self.offset, self.tv = layout, offset, tv

    @property
    def alignment(self) -> int:
        """Bytes the buffer's start is a multiple of."""
        return self.alloc.align

    @property
    def max_vector(self) -> int:
        """Elements a swizzle keeps contiguous: 2**M (its low M bits are never changed)."""
        return 1 << self.swizzle.base if self.swizzle is not None else 1 << 30

    def __repr__(self) -> str:
        sw = f"{self.swizzle} o " if self.swizzle is not None else ""
        part = f", partition of {self.tv}" if self.tv is not None else ""
        return f"SharedTensor({self.dtype}, {sw}{self.layout}, offset {self.offset}{part})"

    def _repr_svg_(self):
        """A notebook's picture: a partition's TV layout, else the tile's offsets (through its
        swizzle) coloured by 16-byte chunk; None where it cannot be drawn (symbolic)."""
        from layoutkit.algebra import ComposedLayout, svg_or_none
        if self.tv is not None:
            return svg_or_none(self.tv, title=repr(self))
        offset = self.offset if type(self.offset) is int else 0
        layout = self.layout if self.swizzle is None else \
            ComposedLayout(self.swizzle, offset, self.layout)
        return svg_or_none(layout, dtype_bytes=self.dtype.nbytes, title=repr(self))

    def view(self, layout) -> "SharedTensor":
        """The same buffer seen through another layout (a Layout or a swizzled ComposedLayout,
        e.g. the transposed one); it must stay inside the buffer."""
        if self._start is None:
            raise TraceError("view() re-lays a whole shared buffer, not a tile or a partition")
        swizzle, start, inner, elements = _parse("SharedTensor.view", layout)
        if elements * self.dtype.nbytes > self.alloc.nbytes:
            raise TraceError(f"SharedTensor.view: {layout} spans {elements} elements, the buffer "
                             f"{self.alloc.name} holds {self.alloc.nbytes // self.dtype.nbytes}")
        return SharedTensor(self.alloc, self.dtype, swizzle, inner, start)

    @property
    def T(self) -> "SharedTensor":  # noqa: N802 - numpy's name for the transposed view
        """The same rank-2 tile with its two modes swapped (a K x N tile seen as N x K: the N-major
        B operand of lk.sm90.wgmma); trailing modes of size 1 (a ring stage's) are dropped."""
        if self.tv is not None:
            raise TraceError(f"SharedTensor.T: transpose a whole tile, not a thread's partition "
                             f"(got {self!r})")
        modes = list(self.layout) if isinstance(self.layout.shape, tuple) else [self.layout]
        while len(modes) > 2 and size(modes[-1]) == 1:
            modes.pop()
        if len(modes) != 2:
            raise TraceError(f"SharedTensor.T: the tile is rank 2, got layout {self.layout}")
        rows, cols = modes
        return SharedTensor(self.alloc, self.dtype, self.swizzle,
                            Layout((cols.shape, rows.shape), (cols.stride, rows.stride)),
                            self.offset)

    def __getitem__(self, coord) -> "SharedTensor":
        """CuTe's slice: `ring[:, :, stage]` fixes the modes given an index (an int or a kernel
        integer) and keeps the `:` ones, e.g. one stage of a (BM, BK, STAGES) ring buffer."""
        if self.tv is not None:
            raise TraceError("slicing ([...]) selects from a whole tensor or tile, not a "
                             "thread's partition")
        coord = coord if isinstance(coord, tuple) else (coord,)
        if any(isinstance(c, slice) and c != slice(None) for c in coord):
            raise TraceError(f"SharedTensor[{coord}]: each index is ':' (keep the mode) or one "
                             "index; ranges are tiles (use .tile)")
        keep = tuple(None if isinstance(c, slice) else c for c in coord)
        what = f"{self.alloc.name}[{_show_index(coord)}]"
        checked = _check_indices(what, self, keep)
        try:
            sub, off = self.layout.slice_and_offset(keep)
        except LayoutError as exc:
            raise TraceError(f"SharedTensor[{coord}] of {self.layout}: {exc}") from None
        view = SharedTensor(self.alloc, self.dtype, self.swizzle, sub, self.offset + off)
        return view if checked else _inside(what, view)

    def tile(self, tiler, coord) -> "SharedTensor":
        """The tile at `coord` of this tensor divided by `tiler` (the algebra's local_tile)."""
        if self.tv is not None:
            raise TraceError("tile() divides a whole tensor or tile, not a thread's partition")
        what = f"{self.alloc.name}.tile({tiler}, {coord})"
        checked = _check_tile(what, self, tiler, coord)
        try:
            sub, off = local_tile(self.layout, tiler, coord)
        except LayoutError as exc:
            raise TraceError(f"tile({tiler}, {coord}) of {self.layout}: {exc}") from None
        view = SharedTensor(self.alloc, self.dtype, self.swizzle, sub, self.offset + off)
        return view if checked else _inside(what, view)

    def partition(self, tv: TVLayout) -> "SharedTensor":
        """This thread's values of the tile under the TV layout `tv` (thread = lk.thread_id())."""
        trace = current("partition")
        tid = check_partition(trace, "partition", self.layout, tv)
        try:
            sub, off = composition(self.layout, tv.layout).slice_and_offset((tid, None))
        except LayoutError as exc:
            raise TraceError(f"partition of {self.layout} by {tv}: {exc}") from None
        off = within_block(off, tid, tv.num_threads)
        view = SharedTensor(self.alloc, self.dtype, self.swizzle, sub, self.offset + off, tv)
        view.parent = self
        return view


def check_partition(trace, what: str, layout: Layout, tv):
    """The tile of `layout` has the TV layout's tile shape and tv covers the block's threads
    or, inside a warp role, the role's (then thread 0 is the role's first); returns the
    thread index to partition by."""
    if not isinstance(tv, TVLayout):
        raise TraceError(f"{what} takes a TVLayout (lk.tv_layout(thr, val)), got {tv!r}")
    bounds.require_tv(tv)
    shape = layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)
    tile_shape = tuple(size(s) for s in shape)
    if len(tile_shape) != len(tv.tile) or any(sympy.simplify(a - b) != 0
                                              for a, b in zip(tile_shape, tv.tile)):
        raise TraceError(f"{what}: the tile has shape {tile_shape} but the TV layout {tv} covers "
                         f"a tile of shape {tv.tile}")
    block_threads = 32 * trace.fn.num_warps
    if tv.num_threads == block_threads:
        return trace.special("thread_idx", 0)
    tid, threads, scope = partition_threads(trace)
    if tv.num_threads != threads:
        raise TraceError(f"{what}: the TV layout {tv} has {tv.num_threads} threads but {scope}"
                         + (f" (and the block {block_threads})" if threads != block_threads
                            else ""))
    return tid


def _modes(layout: Layout) -> list:
    return list(layout) if isinstance(layout.shape, tuple) else [layout]


def _show_index(coord: tuple) -> str:
    return ", ".join(":" if isinstance(c, slice) else str(c) for c in coord)


def _check_indices(what: str, view: SharedTensor, keep: tuple) -> bool:
    """Each index of a slice lies inside its mode: 0 <= i < size(mode). True when every index
    was checked (then the slice lies inside `view`, itself inside its buffer)."""
    modes = _modes(view.layout)
    if len(keep) != len(modes):
        return False                             # the algebra names the mismatch
    trace = bounds.active_trace()
    checked = True
    for m, (i, mode) in enumerate(zip(keep, modes)):
        n = size(mode)
        if i is None:
            continue
        if isinstance(i, tuple) or type(n) is not int:
            checked = False
            continue
        rule = (f"mode {m} of the shared tensor {view.layout} (buffer {view.alloc.name}), "
                f"whose extent {n} allows indices 0..{n - 1}")
        bounds.require_within(
            trace, i, 0, n - 1,
            lambda r: f"{what}: index {i}{_ranging(i, r)} is outside {rule}",
            lambda r: f"{what}: could not prove that index {i} is inside {rule}; from the "
                      f"declared facts it ranges over {bounds.show_range(*r)}")
    return checked


def _ranging(expr, r) -> str:
    return "" if type(expr) is int or r[0] == r[1] else f" (range {bounds.show_range(*r)})"


def _check_tile(what: str, view: SharedTensor, tiler, coord) -> bool:
    """A by-mode tile (a tuple of int tile sizes) lies inside its tensor: along each mode,
    tile c of size t covers indices c*t .. c*t+t-1 of the mode's extent n (0 <= c < n // t).
    True when every mode was checked (then the tile lies inside `view`)."""
    modes = _modes(view.layout)
    tiler = tiler if isinstance(tiler, tuple) else (tiler,)
    coord = coord if isinstance(coord, tuple) else (coord,)
    if not (len(tiler) == len(coord) == len(modes)) or \
            any(type(t) is not int or t < 1 for t in tiler):
        return False                             # other tilers: the reach check decides
    trace = bounds.active_trace()
    checked = True
    for m, (t, c, mode) in enumerate(zip(tiler, coord, modes)):
        n = size(mode)
        if type(n) is not int or isinstance(c, tuple) or not (type(c) is int or
                                                            isinstance(c, sympy.Basic)):
            checked = False
            continue
        rule = (f"the mode's extent {n} (shared tensor {view.layout}, buffer "
                f"{view.alloc.name}); a shared tile is never masked, it lies inside its tensor: "
                + (f"along mode {m} its tiles of {t} are 0..{n // t - 1}" if n >= t else
                   f"a tile of {t} is larger than mode {m}"))

        def covers(r, t=t):
            lo = "-inf" if r[0] is None else r[0] * t
            hi = "inf" if r[1] is None else r[1] * t + t - 1
            return f"{lo}..{hi}"
        bounds.require_within(
            trace, c, 0, n // t - 1,
            lambda r: f"{what}: tile {c} covers indices {covers(r)} of mode {m}, past {rule}",
            lambda r: f"{what}: could not prove that tile {c} lies inside mode {m}: from the "
                      f"declared facts it covers indices {covers(r)}, against {rule}")
    return checked


def _inside(what: str, view: SharedTensor) -> SharedTensor:
    """`view`, after proving that every element it reaches lies in its buffer (closed form:
    offset + the layout's lowest and highest index; strides are >= 0, so those are offset and
    offset + cosize - 1). A swizzle moves an element only inside its aligned block of
    2**(base + bits) elements (more for a negative shift), so below the buffer's last whole
    block the swizzled element stays inside it too."""
    layout = view.layout
    if not all(type(x) is int for x in bounds.leaves(layout.shape) +
               bounds.leaves(layout.stride)):
        bounds.undecided(f"{what}: could not prove that the view {layout} lies inside the shared "
                         f"buffer {view.alloc.name}: its shape and strides are not all integers")
        return view
    low, high, _, _ = bounds.extremes(layout)
    elements = view.alloc.nbytes // view.dtype.nbytes
    limit = elements
    sw = view.swizzle
    if sw is not None:
        block = 1 << (sw.base - min(0, sw.shift) + sw.bits)
        limit = elements // block * block
        offset = view.offset
        if type(offset) is int and limit <= offset + high < elements and \
                all(sw(x) < elements for x in range(limit, offset + high + 1)):
            return view                      # the partial last block, at most `block` checks
    name = view.alloc.name
    offset = view.offset

    def reach(r):
        lo = "-inf" if r[0] is None else r[0] + low
        hi = "inf" if r[1] is None else r[1] + high
        return f"{lo}..{hi}"
    holds = f"the shared buffer {name} holds {elements} elements (0..{elements - 1})"
    bounds.require_within(
        bounds.active_trace(), offset, -low, limit - 1 - high,
        lambda r: f"{what}: the view {layout} at offset {offset} reaches elements {reach(r)}, "
                  f"but {holds}; a view of a shared buffer lies inside it",
        lambda r: f"{what}: could not prove that the view {layout} at offset {offset} lies "
                  f"inside the buffer: from the declared facts it reaches elements {reach(r)}, "
                  f"and {holds}")
    return view


def _parse(what: str, layout):
    """(swizzle or None, offset, inner Layout, elements spanned) of a shared layout."""
    swizzle, offset = None, 0
    if isinstance(layout, ComposedLayout):
        if not isinstance(layout.outer, Swizzle):
            raise TraceError(f"{what}: a composed shared layout is Swizzle o offset o Layout, "
                             f"got {layout}")
        swizzle, offset, inner = layout.outer, layout.offset, layout.inner
    elif isinstance(layout, Layout):
        inner = layout
    else:
        raise TraceError(f"{what}: the layout is a Layout or a swizzled ComposedLayout, got "
                         f"{layout!r}")
    try:
        elements = cosize(inner)
    except LayoutError as exc:
        raise TraceError(f"{what}: {layout} has no integer size ({exc})") from None
    if not isinstance(elements, int) or not isinstance(offset, int) or offset < 0:
        raise TraceError(f"{what}: a shared layout has integer shapes, strides and a "
                         f"non-negative offset, got {layout}")
    negative = bounds.negative_stride(inner)
    if negative is not None:
        raise TraceError(f"{what}: the layout {layout} has the negative stride {negative[1]} "
                         f"(stride leaf {negative[0]}); a shared tensor's strides are >= 0 (a "
                         "stride of 0 repeats an element), so that no offset it computes lies "
                         "below the buffer's start")
    if swizzle is not None:
        elements = layout.cosize()       # closed form for a compact inner (the algebra)
    return swizzle, offset, inner, elements


def shared_tensor(layout, dtype: DType, *, name: str | None = None,
                  align: int | None = None) -> SharedTensor:
    """A new shared buffer of `dtype` elements laid out by `layout`: a Layout of int shape and
    stride, or ComposedLayout(Swizzle(B, M, S), offset, Layout) (the swizzle acts on element
    offsets). It holds cosize(layout) elements. `align`: a larger byte alignment than the
    layout needs (a power of two; e.g. 128 for an unswizzled TMA tile)."""
    what = "lk.shared_tensor"
    current(what)
    if not isinstance(dtype, DType) or dtype == bool_:
        raise TraceError(f"{what}: the element type is a DType such as lk.bf16, got {dtype!r}")
    if align is not None and (isinstance(align, bool) or not isinstance(align, int) or
                              align < 1 or align & (align - 1)):
        raise TraceError(f"{what}: align= is a power-of-two number of bytes, got {align!r}")
    swizzle, offset, inner, elements = _parse(what, layout)
    align = max(swizzle_alignment(swizzle, dtype), align or 1)
    alloc = allocate(what, elements * dtype.nbytes, align, name)
    tensor = SharedTensor(alloc, dtype, swizzle, inner, offset)
    tensor._start = offset
    return tensor


def shared_access(trace, alloc: SharedAllocation, dtype: DType, swizzle, offset, vec: int,
                  data=None) -> tuple:
    """Emit a shared load (data None; returns the vec values) or store of `data` at element
    `offset` (a kernel integer expression, before the swizzle) of `alloc`. A constant part
    of the offset that is a multiple of the swizzle period becomes the instruction's
    displacement (the swizzle commutes with adding whole periods)."""
    index, attrs = shared_access_attrs(trace, alloc, swizzle, offset, vec)
    if data is None:
        return trace.emit("shared_load", [index], [dtype] * vec, attrs)
    trace.emit("shared_store", [index, *data], (), attrs)
    return ()


def shared_access_attrs(trace, alloc: SharedAllocation, swizzle, offset, vec: int) -> tuple:
    """(i32 index value, attrs) of a shared access of `vec` values at element `offset` of
    `alloc` (shared_access's; also the peer accesses of lk.sm90.dsmem_*)."""
    disp, rest = sympy.sympify(offset).as_coeff_Add()
    if not disp.is_Integer:
        disp, rest = sympy.Integer(0), sympy.sympify(offset)
    disp = int(disp)
    if swizzle is not None:
        period = swizzle.size()
        rest, disp = rest + disp % period, disp - disp % period
    attrs = {"buffer": alloc.name, "base": alloc.offset, "vec": vec, "disp": disp,
             "swizzle": None if swizzle is None else (swizzle.bits, swizzle.base, swizzle.shift)}
    return trace.index(rest, i32), attrs


def barrier() -> None:
    """A block-wide barrier (`bar.sync 0`): every thread waits until all threads of the block
    arrive, and shared-memory writes before it are visible to reads after it. Every thread
    must reach it: inside lk.if_ (or a loop with thread-dependent bounds) it is an error."""
    trace = current("lk.barrier()")
    trace.require_uniform("lk.barrier()")
    trace.emit("barrier", (), ())


__all__ = ["SharedTensor", "shared_tensor", "barrier", "allocate", "swizzle_alignment",
           "check_partition", "shared_access", "shared_access_attrs", "MAX_SHARED_BYTES"]
