"""The concrete grids that the renderers draw: a layout's index table, a TV layout's owners.

A layout is drawn as a rank-2 table (nested modes grouped): row i, column j holds ``L(i, j)``,
i ranging over size(mode 0) and j over size(mode 1); a rank-1 layout is one column. A TV layout
(``layout_tv``: (thread, value) -> column-major index into a tile of shape ``tiler_mn``) is drawn
as the tile, each cell holding the (thread, value) that owns it.
"""
from __future__ import annotations

from . import int_tuple as it
from .composed import ComposedLayout
from .errors import LayoutError
from .layout import Layout

__all__ = ["symbols_in", "index_grid", "tv_owner_grid", "tile_extents"]

GRID_CELL_LIMIT = 1 << 16  # 256 x 256: beyond this a drawing is unreadable and megabytes long


def symbols_in(layout) -> list[str]:
    """The names of the symbolic leaves of a Layout or ComposedLayout (empty: fully concrete)."""
    parts = []
    if isinstance(layout, ComposedLayout):
        parts += [layout.offset]
        if isinstance(layout.outer, Layout):
            layout = Layout._new((layout.outer.shape, layout.inner.shape),
                                 (layout.outer.stride, layout.inner.stride))
        else:
            layout = layout.inner
    parts += list(it.flatten(layout.shape)) + list(it.flatten(layout.stride))
    names = set()
    for x in parts:
        if type(x) is not int:
            names |= {str(s) for s in getattr(x, "free_symbols", ())}
    return sorted(names)


def _require_concrete(layout, what: str) -> None:
    names = symbols_in(layout)
    if names:
        example = ", ".join(f"{n!r}: ..." for n in names)
        raise LayoutError(f"{what}: {layout} has symbolic extents or strides ({', '.join(names)}); "
                          f"a grid needs concrete extents: substitute values first, e.g. "
                          f"layout.subs({{{example}}})")


def _check_cells(rows: int, cols: int, what: str, thing) -> None:
    if rows * cols > GRID_CELL_LIMIT:
        raise LayoutError(f"{what}: {thing} is a grid of {rows}x{cols} = {rows * cols} cells, more "
                          f"than the {GRID_CELL_LIMIT} a drawing can show; draw a tile of it "
                          "(e.g. zipped_divide(layout, tile)[0])")


def _modes(inner: Layout, what: str, thing) -> tuple[Layout, Layout | None]:
    n = len(inner)
    if n > 2:
        raise LayoutError(f"{what}: {thing} has rank {n}; a grid shows rank-1 or rank-2 layouts "
                          "(rows = mode 0, columns = mode 1): group modes first, e.g. "
                          "make_layout(L[0], make_layout(L[1], L[2]))")
    if n == 2 and type(inner.shape) is tuple:
        return inner[0], inner[1]
    return inner, None


def index_grid(layout, what: str = "layout_svg") -> list[list[int]]:
    """``grid[i][j] = layout(i, j)`` for a rank-2 layout (``layout(i)`` in one column for rank 1);
    a ComposedLayout gives its composed (e.g. swizzled) values. Concrete layouts only."""
    if not isinstance(layout, (Layout, ComposedLayout)):
        raise LayoutError(f"{what}: expected a Layout or ComposedLayout, got {layout!r}")
    _require_concrete(layout, what)
    inner = layout.inner if isinstance(layout, ComposedLayout) else layout
    row_mode, col_mode = _modes(inner, what, layout)
    rows = it.product(row_mode.shape)
    cols = 1 if col_mode is None else it.product(col_mode.shape)
    _check_cells(rows, cols, what, layout)
    # A layout is linear in its modes: L(i, j) = L0(i) + L1(j).
    row_part = [row_mode(i) for i in range(rows)]
    col_part = [0] if col_mode is None else [col_mode(j) for j in range(cols)]
    if isinstance(layout, ComposedLayout):
        outer, offset = layout.outer, layout.offset
        return [[outer(offset + r + c) for c in col_part] for r in row_part]
    return [[r + c for c in col_part] for r in row_part]


def tile_extents(tiler_mn, what: str) -> tuple[int, int]:
    """(M, N) of a tile shape: an int M, a tuple (M,) or (M, N) of int/nested extents."""
    try:
        shape_ = it.normalize(tiler_mn, f"{what} tiler_mn")
    except LayoutError:
        raise LayoutError(f"{what}: tiler_mn must be a tile shape such as (128, 64), "
                          f"got {tiler_mn!r}") from None
    extents = it.product_each(shape_)
    if len(extents) > 2:
        raise LayoutError(f"{what}: tiler_mn {it.fmt(shape_)} has {len(extents)} modes; "
                          "a TV grid shows a rank-1 or rank-2 tile")
    for e in extents:
        if type(e) is not int:
            raise LayoutError(f"{what}: tiler_mn {it.fmt(shape_)} is symbolic; a grid needs "
                              "concrete extents")
        if e < 1:
            raise LayoutError(f"{what}: tiler_mn {it.fmt(shape_)} has a non-positive extent")
    return extents[0], extents[1] if len(extents) == 2 else 1


def tv_owner_grid(layout_tv, tiler_mn, what: str = "tv_layout_svg"):
    """``(grid, threads, values, shared)``: grid[m][n] is the (thread, value) owning tile cell
    (m, n) (the smallest in (thread, value) order when several own it; None when none does) and
    ``shared`` counts the cells with more than one owner.

    Raises LayoutError when layout_tv is not rank 2 or maps a (thread, value) outside the tile.
    """
    if not isinstance(layout_tv, Layout):
        raise LayoutError(f"{what}: layout_tv must be a Layout mapping (thread, value) to a tile "
                          f"index, got {layout_tv!r}")
    _require_concrete(layout_tv, what)
    if len(layout_tv) != 2 or type(layout_tv.shape) is not tuple:
        raise LayoutError(f"{what}: layout_tv {layout_tv} has rank {len(layout_tv)}; a TV layout "
                          "has two modes, (thread, value)")
    rows, cols = tile_extents(tiler_mn, what)
    _check_cells(rows, cols, what, f"the tile {it.fmt(tiler_mn)}")
    threads, values = it.product(layout_tv.shape[0]), it.product(layout_tv.shape[1])
    t_part = [layout_tv[0](t) for t in range(threads)]
    v_part = [layout_tv[1](v) for v in range(values)]
    grid = [[None] * cols for _ in range(rows)]
    shared = set()
    for t, tp in enumerate(t_part):
        for v, vp in enumerate(v_part):
            idx = tp + vp
            if not 0 <= idx < rows * cols:
                raise LayoutError(f"{what}: layout_tv {layout_tv} maps (thread {t}, value {v}) to "
                                  f"index {idx}, outside the tile {it.fmt(tiler_mn)} of "
                                  f"{rows * cols} cells")
            m, n = idx % rows, idx // rows
            if grid[m][n] is None:
                grid[m][n] = (t, v)
            else:
                shared.add(idx)
    return grid, threads, values, len(shared)
