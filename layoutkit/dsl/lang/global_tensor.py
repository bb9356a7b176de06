"""Global tensors: a pointer parameter with a layout (shape and strides may be symbolic) and
bounds for masking; tiling and per-thread partitioning with the layout algebra. A
`Tensor[dtype, rank]` parameter is one inside the kernel (`tensor_parameter`): its layout is the
argument's shape and strides, symbols bound to the kernel's hidden integer parameters, with the
strides that the specialization knows to be 0 or 1 as those constants.

Each tensor also carries, per mode of its bounds, a coordinate layout: the same algebra ops
(local_tile, composition with the TV layout, slicing by thread) applied to a layout that maps
an element to its coordinate along that mode. So any view knows every element's coordinate in
the original tensor, and loads/stores mask exactly the elements outside the bounds.
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.algebra import ComposedLayout, Layout, LayoutError, composition, local_tile, size
from layoutkit.algebra.sympy_gate import deferred_module

from ..core.errors import TraceError
from ..core.facts import within_block
from .shared import check_partition
from ..core.arguments import field_names
from ..core.ir import Op, Value
from ..core.tensor_args import STRIDE_BYTES, field_reader
from ..core.tracer import current, is_int_expr
from ..core.types import DType, i32, i64
from ..core.values import TVLayout

DEFAULT = object()
symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)


@dataclass(frozen=True)
class PointerArg:
    """A pointer parameter inside the kernel: its IR value, element type and whether the
    specialization knows it is 16-byte aligned."""

    value: Value
    dtype: DType
    aligned16: bool
    name: str

    @property
    def alignment(self) -> int:
        """Bytes the address is known to be a multiple of."""
        return 16 if self.aligned16 else self.dtype.nbytes

    def __repr__(self) -> str:
        return f"Pointer[{self.dtype}] {self.name}"


def _coordinate_layout(layout: Layout, mode: int) -> Layout:
    """layout's domain mapped to the (column-major, flattened) coordinate along `mode`."""
    shape = layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)
    strides = tuple(_column_major(s, 1)[0] if i == mode else _zeros(s)
                    for i, s in enumerate(shape))
    return Layout(shape, strides) if isinstance(layout.shape, tuple) else Layout(shape[0],
                                                                                strides[0])


def _column_major(shape, start):
    """(strides, next stride) of a compact column-major layout of `shape` starting at `start`.

    Unlike make_layout, a size-1 mode keeps a nonzero stride: a tile that reaches past an
    extent of 1 must see coordinates 1, 2, ... there, or its out-of-bounds elements would
    look in bounds (coordinate 0) and escape the mask."""
    if isinstance(shape, tuple):
        strides = []
        for s in shape:
            stride, start = _column_major(s, start)
            strides.append(stride)
        return tuple(strides), start
    return start, start * shape


def _zeros(shape):
    return tuple(_zeros(s) for s in shape) if isinstance(shape, tuple) else 0


class GlobalTensor:
    """A view of global memory: `ptr` + `offset` + `layout(coordinate)` elements of dtype.

    `bounds` (one extent per mode of the original tensor, or None) masks loads and stores;
    `tv` is set on a thread's partition (then the layout is over the TV layout's values);
    `root` is the layout the tensor was made with (its tiles keep it: TMA maps the whole tensor)
    and `extents` its bounds (the tensor map's extents; a `window` narrows `bounds` only)."""

    def __init__(self, ptr: PointerArg, layout: Layout, offset, coords, bounds, tv=None,
                 root: Layout | None = None, extents=None):
        self.ptr, self.layout, self.offset = ptr, layout, offset
        self.coords, self.bounds, self.tv = coords, bounds, tv
        self.root = layout if root is None else root
        self.extents = bounds if extents is None else extents

    @property
    def dtype(self) -> DType:
        return self.ptr.dtype

    @property
    def alignment(self) -> int:
        """Bytes the base address is known to be a multiple of."""
        return self.ptr.alignment

    max_vector = 1 << 30       # no layout-imposed cap on the vector width

    @property
    def shape(self) -> tuple:
        """The extents of the view's modes (a tuple, also for one mode)."""
        shape = self.layout.shape
        return shape if isinstance(shape, tuple) else (shape,)

    @property
    def stride(self) -> tuple:
        """The strides of the view's modes, in elements (a tuple, also for one mode)."""
        stride = self.layout.stride
        return stride if isinstance(stride, tuple) else (stride,)

    def permute(self, *modes: int) -> "GlobalTensor":
        """The whole tensor with its modes reordered: mode i of the result is mode modes[i] of
        this one (CuTe's select), with the bounds along. `q.permute(1, 3, 2, 0)` of a
        (batch, seqlen, heads, head_dim) tensor is (seqlen, head_dim, heads, batch)."""
        rank = len(self.shape)
        if self.tv is not None or self.layout is not self.root or not _is_zero(self.offset):
            raise TraceError("permute reorders the modes of a whole tensor (a Tensor parameter "
                             "or lk.global_tensor), before tiling or partitioning")
        if sorted(modes) != list(range(rank)):
            raise TraceError(f"permute{modes} of a tensor of {rank} modes {self.layout}: give "
                             f"each mode 0..{rank - 1} once")
        layout = Layout(tuple(self.shape[m] for m in modes), tuple(self.stride[m] for m in modes))
        bounds = None if self.bounds is None else tuple(self.bounds[m] for m in modes)
        return global_tensor(self.ptr, layout, bounds)

    def window(self, mode: int, start, stop) -> "GlobalTensor":
        """Coordinates start .. stop-1 of `mode` of this whole tensor as a tensor of their own,
        renumbered from 0: element c along `mode` is element start + c here (start, stop
        kernel integers, e.g. lk.index_value of a packed batch's cu_seqlens; 0 <= start <=
        stop <= the mode's extent is the author's to keep). Loads and stores mask coordinates
        at or past stop (and the other modes' bounds as before). TMA copies of its tiles go
        through this tensor's map (its extents) at coordinates shifted by start: a load box
        that reaches past stop reads the elements after it (zeros past the extent), and a
        store box writes them, so a tile that crosses stop is stored with lk.store."""
        what = f"window({mode}, {start}, {stop})"
        if self.tv is not None or self.layout is not self.root or not _is_zero(self.offset):
            raise TraceError(f"{what}: a window narrows a mode of a whole tensor (a Tensor "
                             "parameter or lk.global_tensor, after any permute), before tiling "
                             "or partitioning")
        modes = list(self.layout) if isinstance(self.layout.shape, tuple) else [self.layout]
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode < len(modes):
            raise TraceError(f"{what}: mode is a Python int in 0..{len(modes) - 1} (the tensor "
                             f"{self.layout} has {len(modes)} modes), got {mode!r}")
        for name, x in (("start", start), ("stop", stop)):
            if not is_int_expr(x):
                raise TraceError(f"{what}: {name} is a kernel integer (a Python int, a "
                                 f"parameter, lk.index_value, ...), got {x!r}")
        if self.bounds is None or self.bounds[mode] is None:
            raise TraceError(f"{what}: mode {mode} of {self.layout} is unmasked (bounds "
                             f"{self.bounds}); a window masks its mode at stop")
        if isinstance(modes[mode].shape, tuple):
            raise TraceError(f"{what}: mode {mode} of {self.layout} is {modes[mode]}, not one "
                             "extent and stride; a window narrows a plain mode")
        shape = tuple(stop - start if m == mode else x.shape for m, x in enumerate(modes))
        layout = Layout(shape, tuple(x.stride for x in modes)) if len(modes) > 1 else \
            Layout(shape[0], modes[0].stride)
        coords = tuple((_coordinate_layout(layout, m), start if m == mode else 0)
                       for m in range(len(modes)))
        bounds = tuple(stop if m == mode else b for m, b in enumerate(self.bounds))
        return GlobalTensor(self.ptr, layout, start * modes[mode].stride, coords, bounds,
                            root=self.root, extents=self.extents)

    def __repr__(self) -> str:
        part = f", partition of {self.tv}" if self.tv is not None else ""
        return f"GlobalTensor({self.dtype}, {self.layout}, offset {self.offset}{part})"

    def _repr_svg_(self):
        """A notebook's picture: a partition's TV layout, else the layout's offsets; None where
        it cannot be drawn (symbolic extents, the usual case inside a kernel)."""
        from layoutkit.algebra import svg_or_none
        if self.tv is not None:
            return svg_or_none(self.tv, title=repr(self))
        return svg_or_none(self.layout, dtype_bytes=self.dtype.nbytes, title=repr(self))

    def tile(self, tiler, coord) -> "GlobalTensor":
        """The tile at `coord` of this tensor divided by `tiler` (the algebra's local_tile)."""
        if self.tv is not None:
            raise TraceError("tile() divides a whole tensor or tile, not a thread's partition")
        try:
            # past_grid: a tile past the edge is masked by the bounds, not an error
            sub, off = local_tile(self.layout, tiler, coord, past_grid=True)
            coords = tuple((local_tile(cl, tiler, coord, past_grid=True), co)
                           for cl, co in self.coords)
        except LayoutError as exc:
            raise TraceError(f"tile({tiler}, {coord}) of {self.layout}: {exc}") from None
        coords = tuple((sub_c, co + _origin(cl, tiler, coord, off_c))
                       for ((sub_c, off_c), co), (cl, _) in zip(coords, self.coords))
        return GlobalTensor(self.ptr, sub, self.offset + off, coords, self.bounds,
                            root=self.root, extents=self.extents)


    def partition(self, tv: TVLayout) -> "GlobalTensor":
        """This thread's values of the tile under the TV layout `tv` (thread = lk.thread_id())."""
        trace = current("partition")
        if not isinstance(tv, TVLayout):
            raise TraceError(f"partition takes a TVLayout (lk.tv_layout(thr, val)), got {tv!r}")
        if self.tv is not None:
            raise TraceError(f"this tensor is already a thread's partition ({self.tv})")
        tid = check_partition(trace, "partition", self.layout, tv)

        def mine(layout):
            sub, off = composition(layout, tv.layout).slice_and_offset((tid, None))
            return sub, off
        try:
            sub, off = mine(self.layout)
            coords = tuple((mine(cl), co) for cl, co in self.coords)
        except LayoutError as exc:
            raise TraceError(f"partition of {self.layout} by {tv}: {exc}") from None
        off = within_block(off, tid, tv.num_threads)
        coords = tuple((sub_c, co + within_block(off_c, tid, tv.num_threads))
                       for (sub_c, off_c), co in coords)
        return GlobalTensor(self.ptr, sub, self.offset + off, coords, self.bounds, tv,
                            root=self.root, extents=self.extents)


def global_tensor(ptr: PointerArg, layout: Layout, bounds=DEFAULT) -> GlobalTensor:
    """A global tensor of `ptr`'s dtype: element at coordinate c is `ptr[layout(c)]`.

    `bounds`: one extent per mode of `layout` that loads/stores mask against (default: the
    layout's own shape, so a ragged last tile is masked); None for no masking. An extent may be
    None for a broadcast mode (stride 0): every coordinate along it names the same element, so
    it is read unmasked (a per-row scale as an (M, N) view with strides (1, 0): one load per
    row, whatever the columns)."""
    if not isinstance(ptr, PointerArg):
        raise TraceError(f"global_tensor: the first argument is a Pointer parameter of the "
                         f"kernel (or a Tensor parameter's .ptr), got {ptr!r}")
    if isinstance(layout, ComposedLayout) or not isinstance(layout, Layout):
        raise TraceError(f"global_tensor: the layout is a Layout (shape:stride), got {layout!r}")
    modes = list(layout) if isinstance(layout.shape, tuple) else [layout]
    if bounds is DEFAULT:
        bounds = tuple(size(m) for m in modes)
    elif bounds is not None:
        bounds = tuple(bounds) if isinstance(bounds, (tuple, list)) else (bounds,)
        if len(bounds) != len(modes):
            raise TraceError(f"global_tensor: bounds {bounds} has {len(bounds)} extents but "
                             f"the layout {layout} has {len(modes)} modes")
        for i, (bound, mode) in enumerate(zip(bounds, modes)):
            if bound is None and not _is_zero(mode.stride):
                raise TraceError(f"global_tensor: bounds[{i}] is None, but mode {i} of "
                                 f"{layout} has stride {mode.stride}; only a broadcast mode "
                                 "(stride 0: one element for every coordinate) may be unmasked")
    coords = () if bounds is None else tuple((_coordinate_layout(layout, m), 0)
                                             for m in range(len(modes)))
    return GlobalTensor(ptr, layout, 0, coords, bounds)


def _is_zero(x) -> bool:
    if isinstance(x, tuple):
        return all(_is_zero(e) for e in x)
    return isinstance(x, int) and x == 0 or getattr(x, "is_zero", False) is True


def tensor_parameter(trace, index: int, p, fact: tuple, ptr: PointerArg,
                     location) -> GlobalTensor:
    """A Tensor parameter `p` (argument `index`, key entry `fact`) inside the kernel: the
    GlobalTensor of `ptr` whose layout is shape:strides (one mode stays a plain mode, as
    Layout(n) does), masked by its shape. Each extent and stride is an integer parameter (i32,
    or i64 where the key's `narrow` fact fails) declared after the pointer, with its `field`
    ('shape' or 'stride', mode) and a `read` function of the launch's arguments; a stride the
    key says is 0 or 1 is that constant, the others symbols with the key's divisibility
    (layoutkit.dsl.core.tensor_args)."""
    rank, itype = p.annotation.rank, i32 if fact[1] else i64
    unit = STRIDE_BYTES // p.annotation.dtype.nbytes
    fields = ([], [])
    for k, (name, f) in enumerate(zip(field_names(p), fact[2:])):
        field, mode = ("shape", k) if k < rank else ("stride", k - rank)
        value = trace.fn.new_value(itype)
        trace.fn.params.append(Op("param", (), (value,), {
            "name": name, "index": index, "field": (field, mode),
            "read": field_reader(index, field, mode)}, (), location))
        if f in ("0", "1"):
            fields[k >= rank].append(int(f))
        else:
            divisor = 1 if f == "+" else 16 if field == "shape" else unit
            fields[k >= rank].append(trace.bind(symbolic.symbol(name, divisor), value))
    shape, strides = fields
    if rank == 1:
        return global_tensor(ptr, Layout(shape[0], strides[0]))
    return global_tensor(ptr, Layout(tuple(shape), tuple(strides)))


def _origin(coordinate_layout: Layout, tiler, coord, folded):
    """The coordinate of a tile's first element along one mode: sum of coord_i * tiler_i *
    stride_i for a by-mode tiler of integers. local_tile's offset (`folded`) is the same except
    past a static extent of 1, whose rest mode the algebra gives stride 0; there tile 1 must
    still start at coordinate tiler_i (out of bounds: masked, and TMA must not see 0)."""
    strides = coordinate_layout.stride
    tiler = tiler if isinstance(tiler, tuple) else (tiler,)
    coord = coord if isinstance(coord, tuple) else (coord,)
    strides = strides if isinstance(strides, tuple) else (strides,)
    if not (len(tiler) == len(coord) == len(strides)
            and all(is_int_expr(x) for x in (*tiler, *coord, *strides))):
        return folded
    return sum(c * t * d for c, t, d in zip(coord, tiler, strides))
