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

__all__ = ["symbols_in", "index_grid", "tv_owner_grid", "tile_extents", "grid_extents",
           "parse_window", "mode_cuts"]

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
                          f"than the {GRID_CELL_LIMIT} a drawing can show; draw a window of it "
                          "(show(layout, window=(64, 64))) or a tile (e.g. "
                          "zipped_divide(layout, tile)[0])")


def _modes(inner: Layout, what: str, thing) -> tuple[Layout, Layout | None]:
    n = len(inner)
    if n > 2:
        raise LayoutError(f"{what}: {thing} has rank {n}; a grid shows rank-1 or rank-2 layouts "
                          "(rows = mode 0, columns = mode 1): group modes first, e.g. "
                          "make_layout(L[0], make_layout(L[1], L[2]))")
    if n == 2 and type(inner.shape) is tuple:
        return inner[0], inner[1]
    return inner, None


def grid_extents(layout, what: str = "layout_svg"):
    """``(row_shape, col_shape)`` of the grid a rank-1/2 concrete layout is drawn as (the shapes
    of modes 0 and 1; col_shape is 1 for rank 1)."""
    if not isinstance(layout, (Layout, ComposedLayout)):
        raise LayoutError(f"{what}: expected a Layout or ComposedLayout, got {layout!r}")
    _require_concrete(layout, what)
    inner = layout.inner if isinstance(layout, ComposedLayout) else layout
    row_mode, col_mode = _modes(inner, what, layout)
    return row_mode.shape, 1 if col_mode is None else col_mode.shape


def _span(x, n: int, what: str, name: str) -> tuple[int, int]:
    if type(x) is int and not isinstance(x, bool):
        x = (0, x)
    if (type(x) is not tuple or len(x) != 2 or any(type(v) is not int for v in x)
            or not 0 <= x[0] < x[1]):
        raise LayoutError(f"{what}: window {name} must be a count n or a range (start, stop) with "
                          f"0 <= start < stop, got {x!r}")
    return x[0], min(x[1], n)


def parse_window(window, rows: int, cols: int, what: str) -> tuple[int, int, int, int]:
    """``(r0, r1, c0, c1)``: the rows [r0, r1) and columns [c0, c1) of a rows x cols grid that
    ``window`` selects: None (all), or ``(row_part, col_part)``, each a count n (the first n) or
    a range ``(start, stop)``; parts past the grid are cut to it."""
    if window is None:
        return 0, rows, 0, cols
    if type(window) is not tuple or len(window) != 2:
        raise LayoutError(f"{what}: window must be (rows, cols), each a count or a "
                          f"(start, stop) range, got {window!r}")
    r0, r1 = _span(window[0], rows, what, "rows")
    c0, c1 = _span(window[1], cols, what, "cols")
    if r0 >= rows or c0 >= cols:
        raise LayoutError(f"{what}: window {window!r} starts outside the {rows}x{cols} grid")
    return r0, r1, c0, c1


def mode_cuts(mode_shape, start: int, stop: int) -> dict[int, int]:
    """``{position: level}`` of the tile boundaries of a nested mode within [start, stop): the
    leaves s0, s1, ... of the mode's shape make boundaries at the multiples of s0 (level 1),
    of s0*s1 (level 2), and so on; a position keeps its highest level. Leaves of size 1 add none.

    >>> mode_cuts((2, (2, 3)), 0, 12)
    {2: 1, 4: 2, 6: 1, 8: 2, 10: 1}
    """
    leaves = [s for s in it.flatten(mode_shape) if s != 1]
    cuts: dict[int, int] = {}
    block = 1
    for level, s in enumerate(leaves[:-1], start=1):
        block *= s
        for p in range(-(-max(start, 1) // block) * block, stop, block):
            if p > start:
                cuts[p] = level
    return dict(sorted(cuts.items()))


def index_grid(layout, what: str = "layout_svg", window=None) -> list[list[int]]:
    """``grid[i][j] = layout(i, j)`` for a rank-2 layout (``layout(i)`` in one column for rank 1);
    a ComposedLayout gives its composed (e.g. swizzled) values. Concrete layouts only. With a
    ``window`` (see parse_window) only those rows and columns: grid[i][j] = layout(r0+i, c0+j)."""
    if not isinstance(layout, (Layout, ComposedLayout)):
        raise LayoutError(f"{what}: expected a Layout or ComposedLayout, got {layout!r}")
    _require_concrete(layout, what)
    inner = layout.inner if isinstance(layout, ComposedLayout) else layout
    row_mode, col_mode = _modes(inner, what, layout)
    rows = it.product(row_mode.shape)
    cols = 1 if col_mode is None else it.product(col_mode.shape)
    r0, r1, c0, c1 = parse_window(window, rows, cols, what)
    _check_cells(r1 - r0, c1 - c0, what, layout)
    # A layout is linear in its modes: L(i, j) = L0(i) + L1(j).
    row_part = [row_mode(i) for i in range(r0, r1)]
    col_part = [0] if col_mode is None else [col_mode(j) for j in range(c0, c1)]
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


TV_PAIR_LIMIT = 1 << 20  # (thread, value) pairs a TV drawing enumerates


def tv_owner_grid(layout_tv, tiler_mn, what: str = "tv_layout_svg", window=None):
    """``(grid, threads, values, shared)``: grid[m][n] is the (thread, value) owning tile cell
    (m, n) (the smallest in (thread, value) order when several own it; None when none does) and
    ``shared`` counts the cells with more than one owner. With a ``window`` (see parse_window),
    grid holds only its cells: grid[i][j] is cell (r0+i, c0+j); ``shared`` still counts all.

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
    r0, r1, c0, c1 = parse_window(window, rows, cols, what)
    _check_cells(r1 - r0, c1 - c0, what, f"the tile {it.fmt(tiler_mn)}")
    threads, values = it.product(layout_tv.shape[0]), it.product(layout_tv.shape[1])
    if threads * values > TV_PAIR_LIMIT:
        raise LayoutError(f"{what}: layout_tv {layout_tv} has {threads * values} (thread, value) "
                          f"pairs, more than the {TV_PAIR_LIMIT} a drawing enumerates")
    t_part = [layout_tv[0](t) for t in range(threads)]
    v_part = [layout_tv[1](v) for v in range(values)]
    grid = [[None] * (c1 - c0) for _ in range(r1 - r0)]
    owned = set()
    shared = set()
    for t, tp in enumerate(t_part):
        for v, vp in enumerate(v_part):
            idx = tp + vp
            if not 0 <= idx < rows * cols:
                raise LayoutError(f"{what}: layout_tv {layout_tv} maps (thread {t}, value {v}) to "
                                  f"index {idx}, outside the tile {it.fmt(tiler_mn)} of "
                                  f"{rows * cols} cells")
            if idx in owned:
                shared.add(idx)
                continue
            owned.add(idx)
            m, n = idx % rows, idx // rows
            if r0 <= m < r1 and c0 <= n < c1:
                grid[m - r0][n - c0] = (t, v)
    return grid, threads, values, len(shared)
