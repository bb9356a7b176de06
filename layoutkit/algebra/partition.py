"""local_tile and local_partition on layouts: a tensor's slice is (sub-layout, offset)."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .composed import ComposedLayout
from .divide import zipped_divide
from .layout import Layout, make_layout, slice_offset

__all__ = ["local_tile", "local_partition"]


def _dice(proj, t, what: str, arg: str):
    """The entries of t where proj is not None (None is CuTe's X: drop that mode)."""
    if proj is None:
        return t
    if type(proj) is not tuple:
        domain.fail(what, "proj", proj, "must be a tuple with None (CuTe's X) for each mode to "
                    "drop and any other value for each mode to keep")
    if type(t) is not tuple or len(proj) != len(t):
        domain.fail(what, arg, t, f"must be a tuple of {len(proj)} entries, one per entry of "
                    f"proj = {domain.show(proj)}")
    return tuple(v for p, v in zip(proj, t) if p is not None)


def _modes(layout):
    return list(layout) if type(layout.shape) is tuple else [layout]


def _select(layout, crd_tile, crd_rest, op: str, arg: str, bounded: bool = True):
    """Slice the zipped layout ((tile),(rest)): crd_* are None (keep) or coordinates, checked
    against the mode they select in (a tuple may be shorter: the remaining modes are kept);
    ``bounded=False``: entries may go past their mode (CuTe's linear extension)."""
    z = layout
    tile, rest = z[0], z[1]
    kept, offset = [], 0
    for part, crd in ((tile, crd_tile), (rest, crd_rest)):
        if crd is None:
            kept += _modes(part)
            continue
        modes = _modes(part)
        if type(crd) is tuple or type(crd) is list:
            if len(crd) > len(modes):
                domain.fail(op, arg, crd, f"has {len(crd)} entries but the grid "
                            f"{it.fmt(part.shape)} has {len(modes)} modes")
            crd = domain.coordinate(tuple(crd), tuple(m.shape for m in modes[:len(crd)]), op, arg,
                                    note=_grid_note(part), bounded=bounded)
            crd = crd + (None,) * (len(modes) - len(crd))
            sub, off = slice_offset(make_layout(*modes), crd)
            kept += _modes(sub) if len(sub) else []
        else:
            off = part(domain.entry(crd, part.shape, op, arg, top=not bounded,
                                    note=_grid_note(part)))
        offset = off if offset == 0 else it.add(offset, off)
    return make_layout(*kept), offset


def _grid_note(part):
    """The range error's note naming the tile grid, made only for a message."""
    return lambda: f"; the grid is {it.fmt(part.shape)}"


def _split(layout, op: str):
    if isinstance(layout, ComposedLayout):
        return layout.inner, layout
    if not isinstance(layout, Layout):
        domain.fail(op, "layout", layout, "must be a Layout or a ComposedLayout")
    return layout, None


def _wrap(sub, offset, composed):
    if composed is None:
        return sub, offset
    return ComposedLayout(composed.outer, it.add(composed.offset, offset), sub), 0


def local_tile(layout, tiler, coord, proj=None, *, past_grid: bool = False):
    """The tile at ``coord`` of ``zipped_divide(layout, tiler)``: returns ``(tile_layout, offset)``
    where ``offset`` is the index of the tile's first element (a tensor adds it to its pointer).

    A tuple coord may be shorter than the rest mode: the remaining rest modes are kept (CuTe's
    ``append<R1>(coord, _)``). ``proj`` (a tuple with None for CuTe's X) drops tiler/coord modes.
    For a ComposedLayout the offset moves into its offset (returned offset is 0), as in CuTe.

    Domain: ``coord`` selects a tile of the grid ``shape(zipped_divide(layout, tiler)[1])``: an
    int is a flat index of the grid (CuTe's inner_partition with a non-tuple coord), a tuple
    gives one coordinate per grid mode; either must lie inside the grid (a tile past the last
    raises LayoutError). Symbolic coordinates (a block index) are checked for being integers
    that are not provably negative; their upper bound is a run-time fact. ``past_grid=True``
    lets a coordinate name a tile past the grid's last one (entries >= 0 still), placed by the
    layout's linear extension as CuTe's arithmetic does: for a caller that masks such a tile
    against the tensor's bounds (the DSL's global tensors).

    >>> tile, off = local_tile(Layout((8, 6)), (4, 3), (1, 1))
    >>> str(tile), off
    ('(4,3):(1,8)', 28)
    """
    inner, composed = _split(layout, "local_tile")
    tiler = domain.tiler(tiler, "local_tile", allow_none=False)
    tiler = _dice(proj, tiler, "local_tile", "tiler") if proj is not None else tiler
    coord = _dice(proj, coord, "local_tile", "coord") if proj is not None else coord
    if coord is None:
        domain.fail("local_tile", "coord", coord, "must be an integer or a tuple of integers "
                    "(a tile of the grid)")
    sub, off = _select(zipped_divide(inner, tiler), None, coord, "local_tile", "coord",
                       bounded=not past_grid)
    return _wrap(sub, off, composed)


def local_partition(layout, tile: Layout, index, proj=None):
    """The elements thread ``index`` owns when ``tile`` (a layout of threads) is repeated over
    ``layout``: ``(layout_of_my_elements, offset)``. Thread index maps to its coordinate in
    ``tile`` (CuTe's get_flat_coord), which selects within each tile of zipped_divide.

    Domain: ``index`` is a thread of the tile, ``0 .. size(tile) - 1`` (thread 100 of a
    16-thread tile raises LayoutError); a symbolic index (a thread id) must be an integer
    expression that is not provably negative.

    >>> part, off = local_partition(Layout((16, 64)), Layout((2, 16), (16, 1)), 17)
    >>> str(part), off
    ('(8,4):(2,256)', 17)
    """
    if not isinstance(tile, Layout):
        domain.fail("local_partition", "tile", tile, "must be a Layout (of threads)")
    if proj is not None:
        tile = make_layout(*_dice(proj, tuple(tile), "local_partition", "tile"))
    inner, composed = _split(layout, "local_partition")
    index = domain.entry(index, tile.shape, "local_partition", "index",
                         note=lambda: f": a thread of the tile {tile}")
    hier = it.idx2crd(index, tile.shape, tile.stride)
    if type(tile.shape) is tuple:
        flat = tuple(it.crd2idx(c, s) for c, s in zip(hier, tile.shape))
    else:
        flat = hier
    sub, off = _select(zipped_divide(inner, it.product_each(tile.shape)), flat, None,
                       "local_partition", "index")
    return _wrap(sub, off, composed)
