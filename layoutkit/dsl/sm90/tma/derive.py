"""Pure derivation of a TMA copy from two layouts: the tensor map's dimensions and strides from
the global tensor, the box and swizzle mode from the shared tile, the copies a tile needs.

Units: tensor strides and shared offsets in elements, coordinates in elements, bytes where
named. "TMA order" lists dimensions innermost (global stride 1) first, as the tensor map and
the PTX coordinates do. The rules (hopper-ptx.md section 4, cuTensorMapEncodeTiled):

- dimension 0 of the map is the tensor's contiguous mode; every other global stride is a
  multiple of 16 bytes; a box dimension is 1..256 elements and the inner one spans a multiple
  of 16 bytes;
- TMA writes a box densely, dimension 0 fastest; with a 32/64/128-byte swizzle the 16-byte
  chunks of each row move by the row's address bits, which on element offsets of a b-byte
  type is Swizzle(1|2|3, 4 - log2(b), 3), and the inner box spans exactly the swizzle's bytes
  (wider rows are several boxes);
- the shared address of a box is 128-byte aligned and, with a swizzle, starts a swizzle period
  (so the swizzle of the buffer's offsets and the hardware's address-bit swizzle agree).

>>> from layoutkit.algebra import Layout
>>> plan = plan_copies(2, contiguous=1, tile_extents=(128, 64),
...                    shared=(Layout(128, 64), Layout(64, 1)), swizzle=Swizzle(3, 3, 3),
...                    offset=0)
>>> plan.order, plan.box, plan.swizzle, plan.copies, plan.box_bytes
((1, 0), (64, 128), '128B', (((0, 0), 0),), 16384)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from layoutkit.algebra import Layout, LayoutError, Swizzle, coalesce, composition, flatten, size
from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx.isa import smem_swizzle
from layoutkit.ptx.isa.tma import REDUCE_TYPES
from layoutkit.ptx.isa.tma import SHARED_ALIGN as SMEM_ALIGN
from layoutkit.ptx.tensormap import INNER_BOX_MULTIPLE as INNER_MULTIPLE
from layoutkit.ptx.tensormap import MAX_BOX, MAX_RANK, STRIDE_MULTIPLE

from ...core.errors import TraceError
from ...core.facts import provably_divisible
from ...core.types import DTYPES, DType

# The hardware's limits (box extents, rank, stride and inner-box multiples, the shared address
# alignment) and its swizzle modes are the ptx layer's (layoutkit.ptx.tensormap, isa.tma,
# isa.smem_swizzle); this module derives a copy from layouts under them.
MAX_COPIES = 1024             # a tile that needs more boxes than this is refused (loop instead)
# TMA writes a tensor's innermost dimension in 16-byte chunks: an H200 reduction wrote the
# whole last chunk past an extent that ends inside one (tests/gpu/test_dsl_tma_reduce_gpu.py)
WRITE_CHUNK_BYTES = 16
TMA_SWIZZLES = tuple(m for m in smem_swizzle.MODES if m != "none")     # "32B", "64B", "128B"


class TmaError(TraceError):
    """A TMA copy the hardware cannot do with these layouts (names the layout, value and rule)."""


def tma_swizzle(mode: str, element_bytes: int) -> Swizzle | None:
    """The Swizzle on element offsets that TMA's swizzle `mode` applies to `element_bytes` data.

    >>> str(tma_swizzle("128B", 2)), str(tma_swizzle("64B", 4)), tma_swizzle("none", 2)
    ('Sw<3,3,3>', 'Sw<2,2,3>', None)
    """
    bits = smem_swizzle.bits(mode)
    if not bits:
        return None
    chunk = smem_swizzle.CHUNK_BYTES // element_bytes         # elements per 16-byte chunk
    return Swizzle(bits, chunk.bit_length() - 1, smem_swizzle.XOR_SHIFT)


def swizzle_mode(swizzle: Swizzle | None, element_bytes: int, what: str) -> str:
    """The TMA swizzle mode ('none', '32B', '64B', '128B') whose pattern is `swizzle` on element
    offsets of `element_bytes` data, or a TmaError listing the ones TMA has."""
    if swizzle is None:
        return "none"
    for mode in TMA_SWIZZLES:
        if swizzle == tma_swizzle(mode, element_bytes):
            return mode
    choices = ", ".join(f"{tma_swizzle(mode, element_bytes)} ({mode})" for mode in TMA_SWIZZLES)
    raise TmaError(f"{what}: the shared layout's swizzle {swizzle} is not a TMA swizzle for "
                   f"{element_bytes}-byte elements; TMA writes {choices} or no swizzle")


@dataclass(frozen=True)
class TensorModes:
    """The global tensor as a tensor map sees it: per mode of the tensor, its extent and its
    single stride (elements; sympy expressions in the kernel's integer parameters)."""

    extents: tuple
    strides: tuple

    @property
    def contiguous(self) -> int | None:
        """The mode of stride 1 (TMA's dimension 0), or None."""
        for m, s in enumerate(self.strides):
            if sympy.sympify(s) == 1:
                return m
        return None


def tensor_modes(root: Layout, bounds, what: str) -> TensorModes:
    """Extents (the tensor's bounds) and strides of each top-level mode of `root`; a mode must
    be one stride (coalesce to a single mode), since a tensor-map dimension has one stride."""
    modes = list(root) if isinstance(root.shape, tuple) else [root]
    strides = []
    for m, mode in enumerate(modes):
        try:
            flat = coalesce(mode)
        except LayoutError as exc:
            raise TmaError(f"{what}: mode {m} of the tensor layout {root}: {exc}") from None
        if isinstance(flat.shape, tuple):
            raise TmaError(f"{what}: mode {m} of the tensor layout {root} is {mode}, which is not "
                           "one stride; a TMA tensor-map dimension has a single stride (split the "
                           "mode into separate modes of the layout)")
        strides.append(flat.stride if flat.shape != 1 else _size_one_stride(mode))
    if len(modes) > MAX_RANK:
        raise TmaError(f"{what}: the tensor {root} has {len(modes)} modes; a TMA tensor map has at "
                       f"most {MAX_RANK} dimensions")
    return TensorModes(tuple(bounds), tuple(strides))


def _size_one_stride(mode: Layout):
    leaves = flatten(mode)
    strides = leaves.stride if isinstance(leaves.stride, tuple) else (leaves.stride,)
    nonzero = [s for s in strides if s != 0]
    return nonzero[0] if nonzero else 0


def tile_to_modes(coord_layouts, tile_shape, what: str) -> tuple[list, tuple]:
    """For each top-level mode j of a tile (shape `tile_shape`), the tensor mode its elements
    walk (None for a mode of size 1), and each tensor mode's extent inside the tile.

    `coord_layouts[m]` maps the tile's elements to their coordinate along tensor mode m, offset
    removed. A TMA box needs each tile mode to walk one tensor mode, contiguously from 0."""
    shape = tile_shape if isinstance(tile_shape, tuple) else (tile_shape,)
    extents = [1] * len(coord_layouts)
    walks = []
    for j, n in enumerate(shape):
        n = size(n)
        if not isinstance(n, int):
            raise TmaError(f"{what}: the tile's mode {j} has extent {n}; a TMA box has constant "
                           "extents (tile with integers)")
        walked = []
        for m, layout in enumerate(coord_layouts):
            part = layout[j] if isinstance(layout.shape, tuple) else layout
            flat = coalesce(part)
            stride = flat.stride if not isinstance(flat.stride, tuple) else None
            if stride == 0 or size(flat) == 1:
                continue
            if stride != 1:
                raise TmaError(f"{what}: the tile's mode {j} steps tensor mode {m} as {part}; a "
                               "TMA box covers consecutive coordinates of each mode (tile the "
                               "tensor with a tuple of extents, one per mode)")
            walked.append(m)
        if n > 1 and len(walked) != 1:
            raise TmaError(f"{what}: the tile's mode {j} walks tensor modes {walked}; each mode of "
                           "a TMA tile walks exactly one mode of the tensor")
        if walked:
            m = walked[0]
            if extents[m] != 1:
                raise TmaError(f"{what}: two modes of the tile walk tensor mode {m}; a TMA box "
                               "has one extent per tensor mode")
            extents[m] = n
        walks.append(walked[0] if walked else None)
    return walks, tuple(extents)


@dataclass(frozen=True)
class CopyPlan:
    """The boxes one tile copy needs. `order`: tensor modes in TMA order (innermost first);
    `box`: extents in that order; `swizzle`: TMA mode name; `copies`: per box, its coordinate
    deltas (TMA order) from the tile's origin and its shared element offset from the tile's
    start; `box_bytes`: bytes of one box (one slice with multicast). `slice`: None, or
    (dimension, parts, shared elements per slice) when each box is cut into `parts` slices
    along that TMA dimension, slice p at coordinate delta p * box[dimension] and shared offset
    p * (elements per slice)."""

    order: tuple
    box: tuple
    swizzle: str
    copies: tuple
    box_bytes: int
    slice: tuple | None = None

    @property
    def total_bytes(self) -> int:
        """Bytes the whole tile moves into (or out of) one CTA's shared memory."""
        parts = 1 if self.slice is None else self.slice[1]
        return self.box_bytes * parts * len(self.copies)


def _first_piece(layout: Layout):
    flat = coalesce(layout)
    shapes = flat.shape if isinstance(flat.shape, tuple) else (flat.shape,)
    strides = flat.stride if isinstance(flat.stride, tuple) else (flat.stride,)
    return shapes[0], strides[0]


def _largest_divisor(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def plan_copies(element_bytes: int, *, contiguous: int | None, tile_extents, shared,
                swizzle: Swizzle | None, offset, what: str = "TMA copy",
                split: int = 1) -> CopyPlan:
    """Derive the boxes that copy a tile between global memory and a shared layout.

    `tile_extents[m]`: the tile's extent along tensor mode m; `shared[m]`: a Layout from the
    coordinate along mode m (0..extent-1) to the shared element offset (before the swizzle),
    summed over modes; `offset`: the tile's element offset in its buffer (int or sympy);
    `contiguous`: the tensor mode of global stride 1. `split` > 1 cuts every box into that many
    slices along its outermost dimension (multicast: one slice per CTA). Raises TmaError when
    TMA cannot write that shared layout."""
    e = element_bytes
    mode = swizzle_mode(swizzle, e, what)
    span = smem_swizzle.span(mode) or None
    if contiguous is None:
        raise TmaError(f"{what}: no mode of the global tensor has stride 1; TMA's innermost "
                       "dimension must be contiguous in global memory")
    layouts = {m: coalesce(s) for m, s in enumerate(shared)}
    n0, stride0 = _first_piece(layouts[contiguous])
    if tile_extents[contiguous] == 1 or stride0 != 1:
        raise TmaError(f"{what}: the global tensor is contiguous along mode {contiguous}, but "
                       f"the shared tile lays that mode out as {shared[contiguous]}; TMA writes "
                       "the global tensor's contiguous mode innermost (stride 1) in shared "
                       "memory (a transposed copy needs another layout of the global tensor)")
    order, box, rests, w = [], [], {}, 1
    current = contiguous
    while current is not None:
        n, _ = _first_piece(layouts[current])
        if not order and span is not None:
            b = span // e
            if n % b:
                raise TmaError(f"{what}: with the {mode} swizzle a TMA box row is {b} elements "
                               f"({span} bytes), but the shared tile's contiguous run along mode "
                               f"{contiguous} is {n} elements ({shared[contiguous]}); lay the "
                               f"tile out in {b}-element-wide column blocks")
        else:
            b = _largest_divisor(n, MAX_BOX)
        extent = tile_extents[current]
        order.append(current)
        box.append(b)
        rests[current] = composition(layouts[current], Layout(extent // b, b))
        w *= b
        current = next((m for m in layouts if m not in order and tile_extents[m] > 1
                        and _first_piece(layouts[m])[1] == w), None)
    if span is not None and len(order) == 1:
        other = next((m for m in layouts if m != contiguous and tile_extents[m] > 1), None)
        if other is not None:
            raise TmaError(f"{what}: with the {mode} swizzle a TMA box is rows of {box[0]} "
                           f"elements ({span} bytes) {box[0]} elements apart, but no other mode "
                           f"of the shared tile steps by {w} (mode {other} is laid out as "
                           f"{shared[other]}); lay the tile out in {box[0]}-element-wide column "
                           "blocks of consecutive rows")
    if box[0] * e % INNER_MULTIPLE:
        raise TmaError(f"{what}: the box's inner extent is {box[0]} elements = {box[0] * e} bytes; "
                       f"TMA moves rows of a multiple of {INNER_MULTIPLE} bytes")
    for m in layouts:                     # modes with no contiguous run: boxes of extent 1
        if m not in order:
            order.append(m)
            box.append(1)
            rests[m] = layouts[m]
    reps = [rests[m] for m in order]
    counts = [size(r) for r in reps]
    count = 1
    for c in counts:
        count *= c
    if count > MAX_COPIES:
        raise TmaError(f"{what}: the tile needs {count} TMA boxes of {tuple(box)}; refuse more "
                       f"than {MAX_COPIES} (the shared layout is not box-shaped enough)")
    copies = []
    for index in itertools.product(*(range(c) for c in counts)):
        coords = tuple(i * b for i, b in zip(index, box))
        start = sum(int(r(i)) for r, i in zip(reps, index))
        copies.append((coords, start))
    box_elems = 1
    for b in box:
        box_elems *= b
    _check_disjoint(copies, box_elems, what)
    sliced = None
    if split > 1:
        sliced = _slice(box, split, what)
        box = list(box)
        box[sliced[0]] //= split
        box_elems //= split
    starts = [s for _, s in copies]
    if sliced is not None:
        starts = [s + p * sliced[2] for s in starts for p in range(split)]
    _check_alignment(starts, offset, e, span, what)
    return CopyPlan(tuple(order), tuple(box), mode, tuple(copies), box_elems * e, sliced)


def _slice(box, parts: int, what: str) -> tuple:
    """(dimension, parts, shared elements per slice) of cutting the box into `parts` slices
    along its outermost dimension of extent > 1."""
    k = max(i for i, b in enumerate(box) if b > 1)
    if box[k] % parts:
        raise TmaError(f"{what}: multicast to {parts} CTAs slices the box {tuple(box)} (TMA "
                       f"order) along its outermost dimension of {box[k]} elements, which "
                       f"{parts} does not divide")
    w = 1
    for b in box[:k]:
        w *= b
    return k, parts, w * (box[k] // parts)


# The (op, element type) pairs of isa.tma.REDUCE_TYPES that the DSL emits: those an H200 ran
# as the interpreter models them (tests/gpu/test_dsl_tma_reduce_gpu.py and its probes,
# 2026-12-02). PTX lists more: i64 xor raised an illegal instruction there (so i64 and / or
# are not tried) and u32 xor did not finish its run (tests/gpu/tma_reduce_probe_checks.py).
HARDWARE_REDUCTIONS = {
    "add": ("i32", "u32", "f16", "bf16", "f32"), "min": ("i32", "i64", "u32", "f16", "bf16"),
    "max": ("i32", "i64", "u32", "f16", "bf16"), "inc": ("u32",), "dec": ("u32",),
    "and": ("i32", "u32"), "or": ("i32", "u32"), "xor": ("i32",),
}


def written_extent_error(extent, element_bytes: int) -> str | None:
    """Why TMA cannot write (store or reduce into) a tensor whose innermost extent is `extent`
    elements of `element_bytes`, or None: the extent must provably span whole 16-byte chunks.

    >>> written_extent_error(104, 2) is None, written_extent_error(100, 2).split(",")[0]
    (True, 'its contiguous mode has extent 100')
    """
    per = max(WRITE_CHUNK_BYTES // element_bytes, 1)
    if provably_divisible(sympy.sympify(extent), per):
        return None
    return (f"its contiguous mode has extent {extent}, which is not provably a multiple of "
            f"{per} elements ({WRITE_CHUNK_BYTES} bytes); TMA writes that dimension in "
            f"{WRITE_CHUNK_BYTES}-byte chunks, so it would also write the elements past the "
            f"extent up to the end of the last chunk (the H200 does): make the tensor's "
            f"extent a multiple of {per} (pad it; the padding is written), or store the "
            "ragged part with lk.store")


def reduce_dtypes(op: str, table=None) -> tuple[str, ...]:
    """The element types (DSL names) whose tensors the TMA reduction `op` accepts: those whose
    PTX type the ptx layer's table (isa.tma.REDUCE_TYPES) lists for it and, unless `table` is
    "ptx", that HARDWARE_REDUCTIONS enables.

    >>> reduce_dtypes("xor", "ptx"), reduce_dtypes("xor"), reduce_dtypes("inc")
    (('i32', 'i64', 'u32'), ('i32',), ('u32',))
    """
    return tuple(t.name for t in DTYPES.values() if t.ptx in REDUCE_TYPES[op] and
                 (table == "ptx" or t.name in HARDWARE_REDUCTIONS[op]))


def reduce_error(reduce, dtype: DType) -> str | None:
    """Why `reduce` (a TMA store's reduce=) is not a reduction of `dtype` tensors, or None when
    it is one (or None: a plain store)."""
    if reduce is None:
        return None
    ops = ", ".join(map(repr, REDUCE_TYPES))
    if not isinstance(reduce, str) or reduce not in REDUCE_TYPES:
        return f"reduce= is None (a plain store) or one of {ops}, got {reduce!r}"
    legal = reduce_dtypes(reduce)
    if dtype.name in legal:
        return None
    mine = [op for op in REDUCE_TYPES if dtype.name in reduce_dtypes(op)]
    others = f"{dtype} tensors reduce with {', '.join(map(repr, mine))}" if mine else \
        f"no TMA reduction takes {dtype} tensors"
    reduces = f"{', '.join(legal)} tensors" if legal else "no tensors"
    where = "PTX ISA, cp.reduce.async.bulk.tensor"
    if dtype.name in reduce_dtypes(reduce, "ptx"):
        crashed = dtype.nbytes == 8 and reduce in ("and", "or", "xor")
        where = (f"PTX lists {reduce!r} of {dtype}, but the DSL enables only the pairs a GPU "
                 "ran correctly" + ("; i64 xor raised an illegal instruction on the H200"
                                    if crashed else ""))
    return (f"reduce={reduce!r} does not reduce {dtype} tensors: {reduce!r} reduces "
            f"{reduces}, and {others} ({where})")


def _check_disjoint(copies, box_elems: int, what: str) -> None:
    starts = sorted(s for _, s in copies)
    for a, b in zip(starts, starts[1:]):
        if b - a < box_elems:
            raise TmaError(f"{what}: two TMA boxes of the tile would overlap in shared memory "
                           f"(at element offsets {a} and {b}, boxes of {box_elems} elements); "
                           "the shared layout maps two tile elements to one place")


def _check_alignment(starts, offset, e: int, span, what: str) -> None:
    align = SMEM_ALIGN if span is None else max(SMEM_ALIGN, smem_swizzle.PERIOD_ROWS * span)
    elems = align // e
    for start in starts:
        at = sympy.sympify(offset) + start
        if not provably_divisible(at, elems):
            reason = "the swizzle period (so the hardware's swizzle matches the layout's)" \
                if span is not None else "TMA's 128-byte shared-address rule"
            raise TmaError(f"{what}: a TMA box starts at element offset {at} of its buffer "
                           f"({e}-byte elements), which is not provably a multiple of {elems} "
                           f"elements = {align} bytes, {reason}")


__all__ = ["TmaError", "TensorModes", "CopyPlan", "tensor_modes", "tile_to_modes", "plan_copies",
           "tma_swizzle", "swizzle_mode", "HARDWARE_REDUCTIONS", "WRITE_CHUNK_BYTES",
           "written_extent_error", "reduce_dtypes",
           "reduce_error", "MAX_BOX",
           "SMEM_ALIGN", "STRIDE_MULTIPLE"]
