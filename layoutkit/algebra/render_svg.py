"""SVG drawings of layouts (a grid of indices) and TV layouts (a tile coloured by thread).

Pure stdlib, deterministic (same input, same bytes). Cells shrink with the grid (a 128x64 tile
is about 1300x2600 px); per-cell text shrinks with the cell and is left out when it would be
smaller than MIN_FONT or the grid has more than TEXT_CELL_LIMIT cells (the legend stays).
"""
from __future__ import annotations

import colorsys
from xml.sax.saxutils import escape

from .errors import LayoutError
from .render_grid import index_grid, tv_owner_grid

__all__ = ["layout_svg", "tv_layout_svg", "THREAD_PALETTE", "INDEX_PALETTE"]

MAX_SIDE = 2560        # px: a grid's longer side, before the cell size clamps below
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


# thread t is coloured THREAD_PALETTE[t % 64]: 16 hues by t % 16, 4 shades by (t // 16) % 4
THREAD_PALETTE = _palette(16, (0.84, 0.70, 0.58, 0.77))
INDEX_PALETTE = _palette(8, (0.84,))  # index i is coloured INDEX_PALETTE[(i // block) % 8]


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _cell_size(rows: int, cols: int) -> int:
    return max(MIN_CELL, min(MAX_CELL, MAX_SIDE // max(rows, cols)))


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

    def __init__(self, rows: int, cols: int, caption: list[str], legend_entries: int):
        self.rows, self.cols = rows, cols
        self.cell = _cell_size(rows, cols)
        self.axis_font = min(11.0, max(6.0, self.cell * 0.45))
        self.caption = caption
        self.caption_font = 12.0
        self.axis_step = 1 if self.cell >= 11 else -(-11 // self.cell)
        self.left = _text_width(str(rows - 1), self.axis_font) + 8
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
                              f'text-anchor="middle">{j}</text>')
        for i in range(0, self.rows, self.axis_step):
            self.parts.append(f'<text x="{_num(self.left - 4)}" y="{_num(self.y(i) + c / 2 + f * 0.35)}" '
                              f'text-anchor="end">{i}</text>')
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


def layout_svg(layout, *, color_block: int = 1) -> str:
    """An SVG grid of a rank-1/2 Layout or ComposedLayout (rows = mode 0, columns = mode 1), each
    cell holding its index (the swizzled offset, for a swizzled layout). Cells are coloured by
    ``(index // color_block) % 8``: with color_block = the elements of a 16-byte vector, a
    swizzle's permutation of vectors shows as a colour pattern.

    Raises LayoutError for symbolic layouts (substitute values with ``.subs`` first), rank > 2,
    or more than 65536 cells.

    >>> from layoutkit.algebra import Layout
    >>> svg = layout_svg(Layout((2, 3), (3, 1)))
    >>> svg.startswith('<svg') and svg.count('<rect') - 1   # the background is a rect too
    6
    """
    if type(color_block) is not int or color_block < 1:
        raise LayoutError(f"layout_svg: color_block must be a positive int, got {color_block!r}")
    grid = index_grid(layout, "layout_svg")
    rows, cols = len(grid), len(grid[0])
    chars = max(len(str(v)) for row in grid for v in row)
    colour = "index" if color_block == 1 else f"index // {color_block}"
    canvas = _Canvas(rows, cols, [str(layout), f"{rows} x {cols} grid; cell colour = ({colour}) mod 8"], 0)
    canvas.header(f"layout {layout}")
    canvas.axes()
    canvas.cells([[INDEX_PALETTE[(v // color_block) % 8] for v in row] for row in grid])
    font = _cell_font(canvas.cell, chars, 1, rows * cols)
    canvas.labels([[(str(v),) for v in row] for row in grid], font)
    return canvas.svg()


def _thread_legend(threads: int) -> list[tuple[str, str]]:
    n = len(THREAD_PALETTE)
    entries = []
    for k in range(min(n, threads)):
        members = list(range(k, threads, n))
        shown = ",".join(f"T{t}" for t in members[:4]) + (",..." if len(members) > 4 else "")
        entries.append((THREAD_PALETTE[k], shown))
    return entries


def tv_layout_svg(layout_tv, tiler_mn) -> str:
    """An SVG of the tile ``tiler_mn`` (rows = M, columns = N), each cell coloured by the thread
    that owns it (``THREAD_PALETTE[t % 64]``) and labelled ``T{t}`` over ``V{v}``; ``layout_tv``
    maps (thread, value) to the tile's column-major index, as make_layout_tv returns it.

    A cell owned by several (thread, value) pairs shows the smallest; the caption counts them.
    Cells no pair owns stay white. Raises LayoutError for a symbolic or non-rank-2 layout_tv, an
    index outside the tile, or more than 65536 cells.
    """
    grid, threads, values, shared = tv_owner_grid(layout_tv, tiler_mn, "tv_layout_svg")
    rows, cols = len(grid), len(grid[0])
    caption = [f"layout_tv {layout_tv}",
               f"tile {rows} x {cols}; {threads} threads x {values} values"
               + (f"; {shared} cells have several owners (lowest shown)" if shared else "")]
    legend = _thread_legend(threads)
    canvas = _Canvas(rows, cols, caption, len(legend))
    canvas.header(f"TV layout {layout_tv} over tile {rows} x {cols}")
    canvas.axes()
    canvas.cells([["#ffffff" if o is None else THREAD_PALETTE[o[0] % len(THREAD_PALETTE)]
                   for o in row] for row in grid])
    chars = max(len(f"T{threads - 1}"), len(f"V{values - 1}"))
    font = _cell_font(canvas.cell, chars, 2, rows * cols)
    canvas.labels([[() if o is None else (f"T{o[0]}", f"V{o[1]}") for o in row] for row in grid], font)
    canvas.legend(legend)
    return canvas.svg()
