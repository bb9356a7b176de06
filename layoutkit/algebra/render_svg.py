"""SVG drawings of layouts (a grid of indices) and TV layouts (a tile coloured by thread).

Pure stdlib, deterministic (same input, same bytes). Cells shrink with the grid (the grid's
longer side at most MAX_SIDE px, its width at most MAX_WIDTH: a 128x64 tile is about
1300x2600 px); per-cell text shrinks with the cell and is left out when it would be smaller than
MIN_FONT or the grid has more than TEXT_CELL_LIMIT cells (the legend stays). Nested modes are
drawn with tile boundaries (thicker lines at each level of nesting); a ``window`` draws part of
a large grid, the caption saying which part.
"""
from __future__ import annotations

import colorsys
import functools
import html

from . import int_tuple as it
from .composed import ComposedLayout
from .errors import LayoutError
from .render_grid import (grid_extents, index_grid, mode_cuts, parse_window, tile_extents,
                          tv_owner_grid)
from .swizzle import Swizzle

# XML text content: &, < and > (xml.sax.saxutils.escape's rule; html's module imports in
# ~0.1 ms where xml.sax pulls in urllib and http, ~17 ms)
escape = functools.partial(html.escape, quote=False)

__all__ = ["layout_svg", "tv_layout_svg", "THREAD_PALETTE", "THREAD_MARKS", "INDEX_PALETTE"]

MAX_SIDE = 2560        # px: a grid's longer side, before the cell size clamps below
MAX_WIDTH = 1280       # px: a grid's width (a notebook column), before the clamp
MIN_CELL, MAX_CELL = 8, 40
MIN_FONT, MAX_FONT = 4.5, 13.0
TEXT_CELL_LIMIT = 1 << 14
CHAR_WIDTH = 0.6       # monospace glyph advance, in ems


def _palette(hues: int, lightness: tuple[float, ...]) -> tuple[str, ...]:
    """hues x len(lightness) light colours: entry k has hue (7k mod hues)/hues, so that
    neighbouring entries contrast, and lightness[k // hues], so that entries one cycle of hues
    apart differ in shade."""
    out = []
    for light in lightness:
        for k in range(hues):
            r, g, b = colorsys.hls_to_rgb(((k * 7) % hues) / hues, light, 0.7)
            out.append("#%02x%02x%02x" % (round(r * 255), round(g * 255), round(b * 255)))
    return tuple(out)


# thread t is coloured THREAD_PALETTE[t % 64]: 16 hues by t % 16, 4 shades by (t // 16) % 4;
# (t // 64) % 4 picks an overlay (THREAD_MARKS): none, hatched, dotted, cross-hatched, so that
# 256 threads are told apart without their labels
THREAD_PALETTE = _palette(16, (0.84, 0.70, 0.58, 0.77))
THREAD_MARKS = ("", "hatched", "dotted", "cross-hatched")
_MARK_DEFS = (
    '<defs>'
    '<pattern id="lk-mark-1" width="6" height="6" patternUnits="userSpaceOnUse">'
    '<path d="M0,6 L6,0" stroke="#000000" stroke-opacity="0.3" stroke-width="1"/></pattern>'
    '<pattern id="lk-mark-2" width="5" height="5" patternUnits="userSpaceOnUse">'
    '<circle cx="2.5" cy="2.5" r="1" fill="#000000" fill-opacity="0.3"/></pattern>'
    '<pattern id="lk-mark-3" width="6" height="6" patternUnits="userSpaceOnUse">'
    '<path d="M0,6 L6,0 M0,0 L6,6" stroke="#000000" stroke-opacity="0.3" stroke-width="0.8"/>'
    '</pattern></defs>')
BOUNDARY_WIDTHS = (1.5, 2.5, 3.5)  # stroke of a tile boundary of nesting level 1, 2, 3+
INDEX_PALETTE = _palette(8, (0.84,))  # index i is coloured INDEX_PALETTE[(i // block) % 8]


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _cell_size(rows: int, cols: int) -> int:
    return max(MIN_CELL, min(MAX_CELL, MAX_SIDE // max(rows, cols), MAX_WIDTH // cols))


def _cell_font(cell: int, chars: int, lines: int, cells: int) -> float | None:
    """The font size for ``lines`` lines of ``chars`` characters in a cell, or None (no text)."""
    if cells > TEXT_CELL_LIMIT:
        return None
    font = min(MAX_FONT, 0.84 * cell / (CHAR_WIDTH * chars), 0.84 * cell / (1.1 * lines))
    return None if font < MIN_FONT else font


def _text_width(text: str, font: float) -> float:
    return len(text) * CHAR_WIDTH * font


class _Canvas:
    """A grid of rows x cols cells with row/column numbers, a caption above, a legend below."""

    def __init__(self, rows: int, cols: int, caption: list[str], legend_entries: int,
                 row_labels: list[str] | None = None, col_labels: list[str] | None = None):
        self.rows, self.cols = rows, cols
        self.cell = _cell_size(rows, cols)
        self.axis_font = min(11.0, max(6.0, self.cell * 0.45))
        self.caption = caption
        self.caption_font = 12.0
        self.axis_step = 1 if self.cell >= 11 else -(-11 // self.cell)
        self.row_labels = row_labels or [str(i) for i in range(rows)]
        self.col_labels = col_labels or [str(j) for j in range(cols)]
        self.left = max(_text_width(t, self.axis_font) for t in self.row_labels) + 8
        self.top = len(caption) * self.caption_font * 1.4 + self.axis_font + 10
        self.grid_w, self.grid_h = cols * self.cell, rows * self.cell
        caption_w = max((_text_width(c, self.caption_font) for c in caption), default=0)
        self.width = max(self.left + self.grid_w + 8, caption_w + 16, 320.0)
        self.legend_columns = max(1, min(8, int((self.width - 16) // 110)))
        self.legend_y = self.top + self.grid_h + 12
        self.height = self.legend_y + -(-legend_entries // self.legend_columns) * 16 + 4
        self.parts: list[str] = []

    def x(self, col: int) -> float:
        return self.left + col * self.cell

    def y(self, row: int) -> float:
        return self.top + row * self.cell

    def header(self, title: str) -> None:
        w, h = _num(self.width), _num(self.height)
        self.parts.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
                          f'viewBox="0 0 {w} {h}" font-family="monospace">')
        self.parts.append(f"<title>{escape(title)}</title>")
        self.parts.append(f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>')
        y = 4 + self.caption_font
        for line in self.caption:
            self.parts.append(f'<text x="8" y="{_num(y)}" font-size="{_num(self.caption_font)}">'
                              f"{escape(line)}</text>")
            y += self.caption_font * 1.4

    def axes(self) -> None:
        f, c = self.axis_font, self.cell
        self.parts.append(f'<g font-size="{_num(f)}" fill="#555555">')
        for j in range(0, self.cols, self.axis_step):
            self.parts.append(f'<text x="{_num(self.x(j) + c / 2)}" y="{_num(self.top - 4)}" '
                              f'text-anchor="middle">{escape(self.col_labels[j])}</text>')
        for i in range(0, self.rows, self.axis_step):
            self.parts.append(f'<text x="{_num(self.left - 4)}" y="{_num(self.y(i) + c / 2 + f * 0.35)}" '
                              f'text-anchor="end">{escape(self.row_labels[i])}</text>')
        self.parts.append("</g>")

    def marks(self, kinds: list[list[int]]) -> None:
        """Overlay patterns (THREAD_MARKS[k]) on the cells whose kind k is not 0."""
        if not any(k for row in kinds for k in row):
            return
        c = self.cell
        self.parts.append(_MARK_DEFS)
        self.parts.append('<g class="marks" stroke="none">')
        for i, row in enumerate(kinds):
            for j, k in enumerate(row):
                if k:
                    self.parts.append(f'<rect x="{_num(self.x(j))}" y="{_num(self.y(i))}" '
                                      f'width="{c}" height="{c}" fill="url(#lk-mark-{k})"/>')
        self.parts.append("</g>")

    def boundaries(self, row_cuts: dict[int, int], col_cuts: dict[int, int]) -> None:
        """Tile boundaries: a line above row i (left of column j) of width by its level."""
        if not row_cuts and not col_cuts:
            return
        x0, x1, y0, y1 = self.left, self.left + self.grid_w, self.top, self.top + self.grid_h
        self.parts.append('<g class="tiles" stroke="#000000" stroke-linecap="square">')
        for i, level in row_cuts.items():
            w = BOUNDARY_WIDTHS[min(level, len(BOUNDARY_WIDTHS)) - 1]
            self.parts.append(f'<line x1="{_num(x0)}" y1="{_num(self.y(i))}" x2="{_num(x1)}" '
                              f'y2="{_num(self.y(i))}" stroke-width="{w}"/>')
        for j, level in col_cuts.items():
            w = BOUNDARY_WIDTHS[min(level, len(BOUNDARY_WIDTHS)) - 1]
            self.parts.append(f'<line x1="{_num(self.x(j))}" y1="{_num(y0)}" x2="{_num(self.x(j))}" '
                              f'y2="{_num(y1)}" stroke-width="{w}"/>')
        self.parts.append("</g>")

    def segments(self, cls: str, edges: list[tuple[str, int, int]], width: float) -> None:
        """Cell edges: ("h", i, j) the top edge of cell (i, j), ("v", i, j) its left edge."""
        if not edges:
            return
        c = self.cell
        self.parts.append(f'<g class="{cls}" stroke="#000000" stroke-width="{width}" '
                          'stroke-linecap="square">')
        for kind, i, j in edges:
            x, y = self.x(j), self.y(i)
            x2, y2 = (x + c, y) if kind == "h" else (x, y + c)
            self.parts.append(f'<line x1="{_num(x)}" y1="{_num(y)}" x2="{_num(x2)}" y2="{_num(y2)}"/>')
        self.parts.append("</g>")

    def elided(self, above: bool, below: bool, left: bool, right: bool) -> None:
        """Dashed red edges on the sides where a window cuts the grid."""
        x0, x1, y0, y1 = self.left, self.left + self.grid_w, self.top, self.top + self.grid_h
        lines = [(x0, y0, x1, y0)] * above + [(x0, y1, x1, y1)] * below
        lines += [(x0, y0, x0, y1)] * left + [(x1, y0, x1, y1)] * right
        if not lines:
            return
        self.parts.append('<g class="elided" stroke="#c00000" stroke-width="2" '
                          'stroke-dasharray="4,3">')
        for a, b, c, d in lines:
            self.parts.append(f'<line x1="{_num(a)}" y1="{_num(b)}" x2="{_num(c)}" y2="{_num(d)}"/>')
        self.parts.append("</g>")

    def cells(self, fills: list[list[str]]) -> None:
        c = self.cell
        self.parts.append('<g class="cells" stroke="#404040" stroke-width="0.5">')
        for i, row in enumerate(fills):
            for j, fill in enumerate(row):
                self.parts.append(f'<rect x="{_num(self.x(j))}" y="{_num(self.y(i))}" width="{c}" '
                                  f'height="{c}" fill="{fill}"/>')
        self.parts.append("</g>")

    def labels(self, texts: list[list[tuple[str, ...]]], font: float | None) -> None:
        """Per-cell text, one or more lines centred in the cell."""
        if font is None:
            return
        c = self.cell
        self.parts.append(f'<g class="labels" font-size="{_num(font)}" text-anchor="middle">')
        for i, row in enumerate(texts):
            for j, lines in enumerate(row):
                if not lines:
                    continue
                cx = _num(self.x(j) + c / 2)
                y0 = self.y(i) + c / 2 - (len(lines) - 1) * font * 0.575 + font * 0.35
                spans = "".join(f'<tspan x="{cx}" y="{_num(y0 + k * font * 1.15)}">{escape(s)}</tspan>'
                                for k, s in enumerate(lines))
                self.parts.append(f"<text>{spans}</text>")
        self.parts.append("</g>")

    def legend(self, entries: list[tuple[str, str]]) -> None:
        """Swatches with text, legend_columns to a line, below the grid."""
        columns = self.legend_columns
        col_w = (self.width - 16) / columns
        self.parts.append('<g class="legend" font-size="10">')
        for k, (fill, text) in enumerate(entries):
            x = 8 + (k % columns) * col_w
            y = self.legend_y + (k // columns) * 16
            self.parts.append(f'<rect x="{_num(x)}" y="{_num(y)}" width="12" height="12" '
                              f'fill="{fill}" stroke="#404040" stroke-width="0.5"/>')
            self.parts.append(f'<text x="{_num(x + 16)}" y="{_num(y + 10)}">{escape(text)}</text>')
        self.parts.append("</g>")

    def svg(self) -> str:
        return "\n".join(self.parts + ["</svg>"]) + "\n"


def _colouring(layout, color_block, dtype_bytes):
    """(index -> palette slot, the caption's words for it)."""
    if dtype_bytes is not None:
        if color_block is not None:
            raise LayoutError("layout_svg: give color_block or dtype_bytes, not both")
        if type(dtype_bytes) is not int or dtype_bytes not in (1, 2, 4, 8, 16):
            raise LayoutError(f"layout_svg: dtype_bytes must be 1, 2, 4, 8 or 16, got {dtype_bytes!r}")
        return (lambda v: (v * dtype_bytes // 16) % 8,
                f"16-byte chunk of its 128-byte line, (index*{dtype_bytes} // 16) mod 8: "
                "chunk c is banks 4c..4c+3")
    unit = ""
    if color_block is None:
        color_block = 1
        outer = layout.outer if isinstance(layout, ComposedLayout) else None
        if isinstance(outer, Swizzle) and outer.bits > 0 and outer.base > 0:
            color_block, unit = 1 << outer.base, f", the unit {outer} permutes"
    if type(color_block) is not int or color_block < 1:
        raise LayoutError(f"layout_svg: color_block must be a positive int, got {color_block!r}")
    colour = "index" if color_block == 1 else f"index // {color_block}"
    return (lambda v: (v // color_block) % 8), f"({colour}) mod 8{unit}"


def _cuts(shape_, start: int, stop: int, every) -> dict[int, int]:
    """Tile boundaries of a mode of shape_ within [start, stop), relative to start; ``every``
    (an int or None) adds boundaries at its multiples one level above the mode's own."""
    cuts = mode_cuts(shape_, start, stop)
    if every is not None:
        level = max(cuts.values(), default=0) + 1
        for p in range(-(-(start + 1) // every) * every, stop, every):
            cuts[p] = max(cuts.get(p, 0), level)
    return {p - start: level for p, level in sorted(cuts.items())}


def _window_caption(r0, r1, rows, c0, c1, cols) -> list[str]:
    if (r0, r1, c0, c1) == (0, rows, 0, cols):
        return []
    return [f"window: rows {r0}..{r1 - 1} of {rows}, columns {c0}..{c1 - 1} of {cols} "
            f"(pass window=((start, stop), (start, stop)) for another part)"]


def _check_tile(tile):
    if tile is None:
        return None, None
    if (type(tile) is not tuple or len(tile) != 2
            or any(type(t) is not int or isinstance(t, bool) or t < 1 for t in tile)):
        raise LayoutError(f"layout_svg: tile must be (rows, cols) of positive ints, got {tile!r}")
    return tile


def layout_svg(layout, *, color_block: int | None = None, dtype_bytes: int | None = None,
               tile=None, window=None, title: str | None = None) -> str:
    """An SVG grid of a rank-1/2 Layout or ComposedLayout (rows = mode 0, columns = mode 1), each
    cell holding its index (the swizzled offset, for a swizzled layout).

    Colour: with ``dtype_bytes`` (the element size) each cell is coloured by the 16-byte chunk of
    its 128-byte line, ``(index * dtype_bytes // 16) % 8``: chunk c is banks 4c..4c+3, so a
    swizzle shows as chunks changing place from row to row; else by ``(index // color_block) %
    8``, color_block defaulting to the unit a ComposedLayout's swizzle permutes (2**M for
    Sw<B,M,S>) and to 1 otherwise.

    Boundaries: a nested mode, e.g. mode 0 of shape (2,(2,3)), gets lines between its tiles
    (thin every 2 rows, thicker every 4); ``tile=(tm, tn)`` adds lines every tm rows and tn
    columns. ``window=(rows, cols)`` draws only part of the grid, each part a count n (the
    first n) or a (start, stop) range; the caption says which part and dashed red edges mark
    the cuts. ``title`` replaces the first caption line (the layout).

    Raises LayoutError for symbolic layouts (substitute values with ``.subs`` first), rank > 2,
    or more than 65536 cells to draw.

    >>> from layoutkit.algebra import Layout
    >>> svg = layout_svg(Layout((2, 3), (3, 1)))
    >>> svg.startswith('<svg') and svg.count('<rect') - 1   # the background is a rect too
    6
    >>> svg = layout_svg(Layout(((2, 2), 3), ((1, 6), 2)))   # mode 0 nested: a line after row 1
    >>> svg.count('<line')
    1
    """
    colour_of, colour_text = _colouring(layout, color_block, dtype_bytes)
    tm, tn = _check_tile(tile)
    row_shape, col_shape = grid_extents(layout, "layout_svg")
    rows, cols = it.product(row_shape), it.product(col_shape)
    r0, r1, c0, c1 = parse_window(window, rows, cols, "layout_svg")
    grid = index_grid(layout, "layout_svg", window)
    chars = max(len(str(v)) for row in grid for v in row)
    caption = [title or str(layout), f"{rows} x {cols} grid; cell colour = {colour_text}"]
    caption += _window_caption(r0, r1, rows, c0, c1, cols)
    canvas = _Canvas(r1 - r0, c1 - c0, caption, 0, [str(i) for i in range(r0, r1)],
                     [str(j) for j in range(c0, c1)])
    canvas.header(f"layout {layout}")
    canvas.axes()
    canvas.cells([[INDEX_PALETTE[colour_of(v)] for v in row] for row in grid])
    font = _cell_font(canvas.cell, chars, 1, len(grid) * len(grid[0]))
    canvas.labels([[(str(v),) for v in row] for row in grid], font)
    canvas.boundaries(_cuts(row_shape, r0, r1, tm), _cuts(col_shape, c0, c1, tn))
    canvas.elided(r0 > 0, r1 < rows, c0 > 0, c1 < cols)
    return canvas.svg()


def _thread_legend(threads: int) -> list[tuple[str, str]]:
    n = len(THREAD_PALETTE)
    entries = []
    for k in range(min(n, threads)):
        members = list(range(k, threads, n))
        shown = ",".join(f"T{t}" for t in members[:4]) + (",..." if len(members) > 4 else "")
        entries.append((THREAD_PALETTE[k], shown))
    return entries


def _tile_modes(tiler_mn):
    shape_ = it.normalize(tiler_mn, "tv_layout_svg tiler_mn")
    if type(shape_) is not tuple:
        return shape_, 1
    return shape_[0], shape_[1] if len(shape_) > 1 else 1


def _warp_edges(grid) -> list[tuple[str, int, int]]:
    """The cell edges between cells of different warps (owner thread // 32; None: unowned)."""
    def warp(o):
        return None if o is None else o[0] // 32
    edges = []
    for i, row in enumerate(grid):
        for j, o in enumerate(row):
            if i and warp(grid[i - 1][j]) != warp(o):
                edges.append(("h", i, j))
            if j and warp(row[j - 1]) != warp(o):
                edges.append(("v", i, j))
    return edges


def _marks_caption(threads: int) -> list[str]:
    if threads <= len(THREAD_PALETTE):
        return []
    n = len(THREAD_PALETTE)
    groups = [f"{lo}-{min(threads, lo + n) - 1} {THREAD_MARKS[(lo // n) % len(THREAD_MARKS)]}"
              for lo in range(n, threads, n)][:len(THREAD_MARKS) - 1]
    return [f"colour = thread mod {n}; threads " + ", ".join(groups)]


def tv_layout_svg(layout_tv, tiler_mn, *, window=None, title: str | None = None) -> str:
    """An SVG of the tile ``tiler_mn`` (rows = M, columns = N), each cell coloured by the thread
    that owns it (``THREAD_PALETTE[t % 64]``, overlaid with THREAD_MARKS[(t // 64) % 4] so that
    up to 256 threads differ without labels) and labelled ``T{t}`` over ``V{v}``; ``layout_tv``
    maps (thread, value) to the tile's column-major index, as make_layout_tv returns it.

    Thick lines separate cells of different warps (threads 32w..32w+31); a nested tiler_mn gets
    tile boundaries as in layout_svg, and ``window`` and ``title`` work as there.

    A cell owned by several (thread, value) pairs shows the smallest; the caption counts them.
    Cells no pair owns stay white. Raises LayoutError for a symbolic or non-rank-2 layout_tv, an
    index outside the tile, or more than 65536 cells to draw.
    """
    grid, threads, values, shared = tv_owner_grid(layout_tv, tiler_mn, "tv_layout_svg", window)
    rows, cols = tile_extents(tiler_mn, "tv_layout_svg")
    r0, r1, c0, c1 = parse_window(window, rows, cols, "tv_layout_svg")
    caption = [title or f"layout_tv {layout_tv}",
               f"tile {rows} x {cols}; {threads} threads x {values} values"
               + (f"; {shared} cells have several owners (lowest shown)" if shared else "")
               + ("; thick lines: warp boundaries" if threads > 32 else "")]
    caption += _marks_caption(threads) + _window_caption(r0, r1, rows, c0, c1, cols)
    legend = _thread_legend(threads)
    canvas = _Canvas(r1 - r0, c1 - c0, caption, len(legend), [str(i) for i in range(r0, r1)],
                     [str(j) for j in range(c0, c1)])
    canvas.header(f"TV layout {layout_tv} over tile {rows} x {cols}")
    canvas.axes()
    n = len(THREAD_PALETTE)
    canvas.cells([["#ffffff" if o is None else THREAD_PALETTE[o[0] % n]
                   for o in row] for row in grid])
    canvas.marks([[0 if o is None else (o[0] // n) % len(THREAD_MARKS) for o in row]
                  for row in grid])
    chars = max(len(f"T{threads - 1}"), len(f"V{values - 1}"))
    font = _cell_font(canvas.cell, chars, 2, len(grid) * len(grid[0]))
    canvas.labels([[() if o is None else (f"T{o[0]}", f"V{o[1]}") for o in row] for row in grid], font)
    row_shape, col_shape = _tile_modes(tiler_mn)
    canvas.boundaries(_cuts(row_shape, r0, r1, None), _cuts(col_shape, c0, c1, None))
    if threads > 32:
        canvas.segments("warps", _warp_edges(grid), 2.5)
    canvas.elided(r0 > 0, r1 < rows, c0 > 0, c1 < cols)
    canvas.legend(legend)
    return canvas.svg()
