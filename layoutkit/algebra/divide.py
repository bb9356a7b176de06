"""The divides: split a layout into tiles (the tiler's image) and the rest."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .coalesce import _flat_coalesce_int, by_mode, coalesce
from .complement import complement
from .composed import acts_on_inner
from .composition import compose_flat, composition
from .errors import LayoutError
from .layout import Layout, make_layout

__all__ = ["logical_divide", "zipped_divide", "tiled_divide", "flat_divide", "tile_unzip",
           "as_layout_tiler"]


def as_layout_tiler(t, op: str):
    """A Layout tiler as given; an extent n means the layout n:1."""
    if isinstance(t, Layout):
        return t
    if type(t) is tuple or type(t) is list:
        domain.fail(op, "tiler", t, f"must be a Layout or an extent ({op} takes no by-mode "
                    f"tuple; for a shape write Layout({domain.show(t)}))")
    return Layout._new(domain.extent(t, op, "tiler"), 1)


@acts_on_inner
def logical_divide(layout: Layout, tiler) -> Layout:
    """``layout ∘ (tiler, complement(tiler, shape(coalesce(layout))))``: a rank-2 layout whose
    mode 0 is the tile (the elements the tiler picks) and mode 1 iterates over the tiles.

    A tuple tiler divides mode by mode; modes of layout beyond the tiler are kept unchanged
    (CuTe's C++ and pycute agree here; composition with a short tiler drops them instead).
    None in a tiler leaves that mode unchanged. An int n is the tiler n:1.

    >>> str(logical_divide(Layout((4, 2, 3), (2, 1, 8)), Layout(4, 2)))
    '((2,2),(2,3)):((4,1),(2,8))'
    >>> str(logical_divide(Layout((8, 6)), (4, 3)))
    '((4,2),(3,2)):((1,4),(8,24))'
    """
    if tiler is None:
        return layout
    tiler = domain.tiler(tiler, "logical_divide")
    if type(tiler) is tuple:
        return by_mode(logical_divide, layout, tiler, True, "logical_divide")
    tiler = as_layout_tiler(tiler, "logical_divide")
    shapes, strides = it.flatten(layout.shape), it.flatten(layout.stride)
    if shapes[-1] != 1 and all(type(x) is int for x in shapes) and \
            all(type(d) is int for d in strides):
        # all-int path: coalesce once; with a last leaf != 1 it is also composition's coalesce_x
        flat = _flat_coalesce_int(shapes, strides)
        rest = complement(tiler, flat.shape)
        return compose_flat(flat, layout, Layout._new((tiler.shape, rest.shape),
                                                      (tiler.stride, rest.stride)))
    cotarget = coalesce(layout).shape
    return composition(layout, make_layout(tiler, complement(tiler, cotarget)))


def _zip2_by(t, guide, name: str):
    if type(guide) is tuple:
        if type(t) is not tuple or len(t) < len(guide):
            raise LayoutError(f"{name}: tiler has more modes than the layout")
        split = [_zip2_by(t[i], g, name) for i, g in enumerate(guide)]
        return (tuple(s[0] for s in split), tuple(s[1] for s in split) + t[len(guide):])
    if guide is None:
        raise LayoutError(f"{name}: None (CuTe's _) is not allowed in a zipped/tiled tiler")
    return t


def tile_unzip(layout: Layout, tiler) -> Layout:
    """Gather the (tile, rest) pairs at the leaves of tiler: ((A,a),(B,b),c) -> ((A,B),(a,b,c))."""
    return Layout._new(_zip2_by(layout.shape, tiler, "tile_unzip"),
                       _zip2_by(layout.stride, tiler, "tile_unzip"))


@acts_on_inner
def zipped_divide(layout: Layout, tiler) -> Layout:
    """logical_divide with the tiles gathered in mode 0 and the rests in mode 1:
    ``((TileM,TileN,...),(RestM,RestN,...))``.

    >>> str(zipped_divide(Layout((8, 6)), (4, 3)))
    '((4,3),(2,2)):((1,8),(4,24))'
    """
    tiler = domain.tiler(tiler, "zipped_divide", allow_none=False)
    return tile_unzip(logical_divide(layout, tiler), tiler)


@acts_on_inner
def tiled_divide(layout: Layout, tiler) -> Layout:
    """zipped_divide with the rest mode unpacked: ``((TileM,TileN,...),RestM,RestN,...)``.

    >>> str(tiled_divide(Layout((8, 6)), (4, 3)))
    '((4,3),2,2):((1,8),4,24)'
    """
    z = zipped_divide(layout, tiler)
    return make_layout(z[0], *z[1])


@acts_on_inner
def flat_divide(layout: Layout, tiler) -> Layout:
    """zipped_divide with both modes unpacked: ``(TileM,TileN,...,RestM,RestN,...)``.

    >>> str(flat_divide(Layout((8, 6)), (4, 3)))
    '(4,3,2,2):(1,8,4,24)'
    """
    z = zipped_divide(layout, tiler)
    return make_layout(*z[0], *z[1])
