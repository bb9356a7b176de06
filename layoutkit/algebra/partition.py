"""local_tile and local_partition on layouts: a tensor's slice is (sub-layout, offset)."""
from __future__ import annotations

from . import int_tuple as it
from .composed import ComposedLayout
from .divide import zipped_divide
from .errors import LayoutError
from .layout import Layout, make_layout

__all__ = ["local_tile", "local_partition"]


def _dice(proj, t, what: str):
    """The entries of t where proj is not None (None is CuTe's X: drop that mode)."""
    if proj is None:
        return t
    if type(proj) is not tuple or type(t) is not tuple or len(proj) != len(t):
        raise LayoutError(f"{what}: projection {proj!r} does not match {t!r}")
    return tuple(v for p, v in zip(proj, t) if p is not None)


def _modes(layout):
    return list(layout) if type(layout.shape) is tuple else [layout]


def _select(layout, crd_tile, crd_rest):
    """Slice the zipped layout ((tile),(rest)): crd_* are None (keep) or coordinates."""
    z = layout
    tile, rest = z[0], z[1]
    kept, offset = [], 0
    for part, crd in ((tile, crd_tile), (rest, crd_rest)):
        if crd is None:
            kept += _modes(part)
            continue
        modes = _modes(part)
        if type(crd) is tuple:
            if len(crd) > len(modes):
                raise LayoutError(f"coordinate {crd!r} has more modes than {part}")
            crd = crd + (None,) * (len(modes) - len(crd))
            sub, off = make_layout(*modes).slice_and_offset(crd)
            kept += _modes(sub) if len(sub) else []
        else:
            off = part(crd)
        offset = off if offset == 0 else it.add(offset, off)
    return make_layout(*kept), offset


def _split(layout):
    if isinstance(layout, ComposedLayout):
        return layout.inner, layout
    return layout, None


def _wrap(sub, offset, composed):
    if composed is None:
        return sub, offset
    return ComposedLayout(composed.outer, it.add(composed.offset, offset), sub), 0


def local_tile(layout, tiler, coord, proj=None):
    """The tile at ``coord`` of ``zipped_divide(layout, tiler)``: returns ``(tile_layout, offset)``
    where ``offset`` is the index of the tile's first element (a tensor adds it to its pointer).

    A tuple coord may be shorter than the rest mode: the remaining rest modes are kept (CuTe's
    ``append<R1>(coord, _)``). ``proj`` (a tuple with None for CuTe's X) drops tiler/coord modes.
    For a ComposedLayout the offset moves into its offset (returned offset is 0), as in CuTe.

    >>> tile, off = local_tile(Layout((8, 6)), (4, 3), (1, 1))
    >>> str(tile), off
    ('(4,3):(1,8)', 28)
    """
    inner, composed = _split(layout)
    tiler = _dice(proj, tiler, "local_tile") if proj is not None else tiler
    coord = _dice(proj, coord, "local_tile") if proj is not None else coord
    sub, off = _select(zipped_divide(inner, tiler), None, coord)
    return _wrap(sub, off, composed)


def local_partition(layout, tile: Layout, index, proj=None):
    """The elements thread ``index`` owns when ``tile`` (a layout of threads) is repeated over
    ``layout``: ``(layout_of_my_elements, offset)``. Thread index maps to its coordinate in
    ``tile`` (CuTe's get_flat_coord), which selects within each tile of zipped_divide.

    >>> part, off = local_partition(Layout((16, 64)), Layout((2, 16), (16, 1)), 17)
    >>> str(part), off
    ('(8,4):(2,256)', 17)
    """
    if not isinstance(tile, Layout):
        raise LayoutError(f"local_partition: tile must be a Layout, got {tile!r}")
    if proj is not None:
        tile = make_layout(*_dice(proj, tuple(tile), "local_partition"))
    inner, composed = _split(layout)
    hier = it.idx2crd(index, tile.shape, tile.stride)
    if type(tile.shape) is tuple:
        flat = tuple(it.crd2idx(c, s) for c, s in zip(hier, tile.shape))
    else:
        flat = hier
    sub, off = _select(zipped_divide(inner, it.product_each(tile.shape)), flat, None)
    return _wrap(sub, off, composed)
