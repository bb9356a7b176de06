"""The products: reproduce a layout (the block) over another (the tiler)."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .coalesce import by_mode
from .complement import complement
from .composed import acts_on_inner
from .composition import composition
from .divide import as_layout_tiler, tile_unzip
from .errors import LayoutError
from .layout import Layout, cosize, make_layout, rank, size

__all__ = ["logical_product", "zipped_product", "tiled_product", "flat_product",
           "blocked_product", "raked_product", "tile_to_shape", "append_modes"]


@acts_on_inner
def logical_product(block: Layout, tiler) -> Layout:
    """``(block, complement(block, size(block)*cosize(tiler)) ∘ tiler)``: mode 0 is the block,
    mode 1 places copies of it as the tiler says.

    A tuple tiler works mode by mode, keeping block's modes beyond it (CuTe's C++). An int n
    is the tiler n:1 (pycute's int case calls logical_divide by mistake; we follow C++).

    >>> str(logical_product(Layout((2, 2), (4, 1)), Layout(6, 1)))
    '((2,2),(2,3)):((4,1),(2,8))'
    """
    if tiler is None:
        return block
    tiler = domain.tiler(tiler, "logical_product")
    if type(tiler) is tuple:
        return by_mode(logical_product, block, tiler, True, "logical_product")
    tiler = as_layout_tiler(tiler, "logical_product")
    rest = complement(block, it.mul(size(block), cosize(tiler)))
    return make_layout(block, composition(rest, tiler))


@acts_on_inner
def zipped_product(block: Layout, tiler) -> Layout:
    """logical_product with blocks gathered in mode 0 and the products in mode 1."""
    tiler = domain.tiler(tiler, "zipped_product", allow_none=False)
    return tile_unzip(logical_product(block, tiler), tiler)


@acts_on_inner
def tiled_product(block: Layout, tiler) -> Layout:
    """zipped_product with mode 1 unpacked: ``((BlockM,BlockN,...),RestM,RestN,...)``."""
    z = zipped_product(block, tiler)
    return make_layout(z[0], *z[1])


@acts_on_inner
def flat_product(block: Layout, tiler) -> Layout:
    """zipped_product with both modes unpacked."""
    z = zipped_product(block, tiler)
    return make_layout(*z[0], *z[1])


def append_modes(layout: Layout, r: int) -> Layout:
    """layout padded with 1:0 modes to rank r (CuTe's append<R>); an int shape stays for r == 1."""
    n = rank(layout)
    if n == r:
        return layout
    if n > r:
        raise LayoutError(f"cannot pad {layout} (rank {n}) to rank {r}")
    modes = list(layout) + [Layout._new(1, 0)] * (r - n)
    return make_layout(*modes)


def _zip_layouts(a: Layout, b: Layout, r: int) -> Layout:
    """((a0,b0),(a1,b1),...) for rank-r a, b (CuTe's zip); for r == 1 the single pair is
    ((a, b)), where a 1-tuple operand stands for its one mode and an int shape (even one that
    the product split into a tuple) for itself."""
    if r == 1:
        def one(t):
            return t[0] if type(t) is tuple and len(t) == 1 else t
        return Layout._new(((one(a.shape), one(b.shape)),), ((one(a.stride), one(b.stride)),))
    return Layout._new(tuple(zip(a.shape, b.shape)), tuple(zip(a.stride, b.stride)))


def _rank_sensitive(block, tiler, raked: bool):
    tiler = as_layout_tiler(tiler, "raked_product" if raked else "blocked_product")
    r = max(rank(block), rank(tiler))
    result = logical_product(append_modes(block, r), append_modes(tiler, r))
    return _zip_layouts(result[1], result[0], r) if raked else _zip_layouts(result[0], result[1], r)


@acts_on_inner
def blocked_product(block: Layout, tiler) -> Layout:
    """Mode i of the result is (block mode i, tiler mode i): the tiler's elements are blocks
    laid out contiguously. rank = max(rank(block), rank(tiler)).

    >>> str(blocked_product(Layout((2, 2), (1, 2)), Layout((2, 3), (3, 1))))
    '((2,2),(2,3)):((1,12),(2,4))'
    """
    return _rank_sensitive(block, tiler, False)


@acts_on_inner
def raked_product(block: Layout, tiler) -> Layout:
    """Mode i of the result is (tiler mode i, block mode i): the blocks are interleaved.

    >>> str(raked_product(Layout((2, 2), (1, 2)), Layout((2, 3), (3, 1))))
    '((2,2),(3,2)):((12,1),(4,2))'
    """
    return _rank_sensitive(block, tiler, True)


def _ordered_layout(shape_: tuple, order) -> Layout:
    if order is None:
        return Layout(shape_)
    order = domain.int_tuple(order, "tile_to_shape", "order")
    if type(order) is not tuple or len(order) != len(shape_) or any(type(o) is tuple for o in order):
        raise LayoutError(f"tile_to_shape: order {it.fmt(order)} must be a flat tuple of "
                          f"{len(shape_)} ints")
    strides = [0] * len(shape_)
    cur = 1
    for i in sorted(range(len(shape_)), key=lambda i: order[i]):
        strides[i] = 0 if shape_[i] == 1 else cur
        cur = it.mul(cur, shape_[i])
    return Layout._new(tuple(shape_), tuple(strides))


@acts_on_inner
def tile_to_shape(block: Layout, trg_shape, order=None) -> Layout:
    """blocked_product of block with the layout of (target / block) per mode, so that the result
    has the target shape's per-mode sizes. ``order`` (a flat tuple, CuTe's ModeOrder) says which
    mode the copies advance along first; default column-major.

    >>> str(tile_to_shape(Layout((2, 2), (1, 2)), (4, 6)))
    '((2,2),(2,3)):((1,4),(2,8))'
    """
    trg_shape = domain.shape(trg_shape, "tile_to_shape", "target")
    r = rank(trg_shape)
    if rank(block) > r:
        raise LayoutError(f"tile_to_shape: {block} has rank {rank(block)} > rank {r} of "
                          f"target {it.fmt(trg_shape)}")
    padded = append_modes(block, r)
    block_shape = it.product_each(padded.shape)
    target = it.product_each(trg_shape)
    for t, b in zip(target, block_shape):
        it.require(it.divides(b, t), lambda: f"block extent {it.fmt(b)} divides target extent "
                   f"{it.fmt(t)}", lambda: f"tile_to_shape({block}, {it.fmt(trg_shape)})",
                   (it.divides, [b, t]))
    reps = tuple(it.exact_div(t, b, "tile_to_shape") for t, b in zip(target, block_shape))
    return blocked_product(padded, _ordered_layout(reps, order))
