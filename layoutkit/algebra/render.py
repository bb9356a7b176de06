"""Notebook display of layouts: LaTeX (``shape:stride`` and a small index table) and SVG grids.

``layout_latex(L)`` and ``layout_svg(L)`` back ``Layout._repr_latex_``/``_repr_svg_``;
``tv_layout_svg(layout_tv, tiler_mn)`` draws a thread-value layout over its tile;
``bank_report_svg(report)`` a bank-conflict report; ``show(...)`` picks the drawing for what it
is given and wraps it in a ``Figure`` that a notebook displays and that can be saved to a file.
Pure stdlib (plus sympy for typesetting symbols); no CUDA.

>>> from layoutkit.algebra import Layout, make_layout_tv
>>> fig = show(*make_layout_tv(Layout((4, 8), (8, 1)), Layout((1, 4), (1, 1))))
>>> fig.svg.count(">T31</tspan>"), fig.svg.count(">V3</tspan>")   # thread 31's 4 cells; value 3 of 32 threads
(4, 32)
"""
from __future__ import annotations

from . import int_tuple as it
from .banks import BankReport
from .composed import ComposedLayout
from .errors import LayoutError
from .layout import Layout
from .render_banks import bank_report_svg
from .render_grid import grid_extents, tile_extents
from .render_latex import layout_latex
from .render_svg import layout_svg, tv_layout_svg

__all__ = ["layout_latex", "layout_svg", "tv_layout_svg", "bank_report_svg", "show", "Figure",
           "svg_or_none", "SHOW_LIMIT"]

SHOW_LIMIT = 128  # rows and columns show() draws of a larger grid unless given a window


class Figure:
    """An SVG drawing: ``fig.svg`` is the text; a notebook displays it; ``fig.save(path)``."""

    __slots__ = ("svg",)

    def __init__(self, svg: str):
        self.svg = svg

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.svg)

    def __repr__(self):
        return f"<Figure: SVG of {len(self.svg)} characters>"


def _is_tile_shape(x) -> bool:
    return isinstance(x, (int, tuple)) and not isinstance(x, bool)


def _default_window(rows: int, cols: int, window):
    """The window show() draws: the caller's, else the top-left SHOW_LIMIT x SHOW_LIMIT."""
    if window is not None or (rows <= SHOW_LIMIT and cols <= SHOW_LIMIT):
        return window
    return (min(rows, SHOW_LIMIT), min(cols, SHOW_LIMIT))


def _layout_figure(layout, window, title, color_block, dtype_bytes, tile) -> Figure:
    row_shape, col_shape = grid_extents(layout, "show")
    window = _default_window(it.product(row_shape), it.product(col_shape), window)
    return Figure(layout_svg(layout, color_block=color_block, dtype_bytes=dtype_bytes, tile=tile,
                             window=window, title=title))


def _tv_figure(layout_tv, tiler_mn, window, title) -> Figure:
    rows, cols = tile_extents(tiler_mn, "show")
    window = _default_window(rows, cols, window)
    return Figure(tv_layout_svg(layout_tv, tiler_mn, window=window, title=title))


def _tv_parts(x):
    """(layout_tv, tile) of a TV-layout object (attributes ``layout``, a rank-2 Layout, and
    ``tile``, its tile shape: the DSL's TVLayout), else None."""
    layout, tile = getattr(x, "layout", None), getattr(x, "tile", None)
    if isinstance(layout, Layout) and _is_tile_shape(tile):
        return layout, tile
    return None


def _classify(args):
    """(kind, parts) of show's positional arguments, or None."""
    if len(args) == 1 and isinstance(args[0], (Layout, ComposedLayout)):
        return "layout", args
    if len(args) == 1 and isinstance(args[0], BankReport):
        return "bank report", args
    if len(args) == 1 and _tv_parts(args[0]) is not None:
        return "TV layout", _tv_parts(args[0])
    if len(args) == 2:
        a, b = args
        if isinstance(a, Layout) and _is_tile_shape(b):
            return "TV layout", (a, b)
        if isinstance(b, Layout) and _is_tile_shape(a):
            return "TV layout", (b, a)
    return None


_OPTIONS = {"layout": ("window", "title", "color_block", "dtype_bytes", "tile"),
            "TV layout": ("window", "title"), "bank report": ("title", "max_phases")}


def show(*args, window=None, title: str | None = None, color_block: int | None = None,
         dtype_bytes: int | None = None, tile=None, max_phases: int | None = None) -> Figure:
    """A displayable drawing (a ``Figure``) of what it is given:

    - ``show(layout)``, a Layout or ComposedLayout: the grid of its indices (layout_svg), with
      ``dtype_bytes`` coloured by 16-byte chunk / bank group (a shared-memory layout; swizzles
      show as chunks moving from row to row), else by ``color_block`` (default: the unit its
      swizzle permutes); ``tile=(tm, tn)`` draws tile boundaries (nested modes get them anyway);
    - ``show(layout_tv, tiler_mn)`` or ``show(tiler_mn, layout_tv)`` (so that
      ``show(*make_layout_tv(thr, val))`` works), or ``show(tv)`` of an object with ``layout``
      and ``tile`` attributes (the DSL's TVLayout): the tile coloured by thread (tv_layout_svg);
    - ``show(report)``, a BankReport (``bank_conflicts(smem, tv, dtype_bytes=...,
      access_bytes=...)``): phases x banks, conflicts in red (bank_report_svg), its first
      ``max_phases`` (default 32) phases.

    A grid larger than SHOW_LIMIT (128) rows or columns is drawn through a window, the top-left
    128 x 128 unless ``window=(rows, cols)`` (each a count or a (start, stop) range) picks
    another part; ``title`` replaces the caption's first line. Raises LayoutError for anything
    else, naming what it got, and for a keyword that does not apply to it (a TV layout has no
    ``dtype_bytes``).

    >>> from layoutkit.algebra import Layout, ComposedLayout, Swizzle
    >>> fig = show(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1))), dtype_bytes=2)
    >>> "16-byte chunk" in fig.svg, fig.svg.count("<rect") - 1
    (True, 512)
    >>> "window: rows 0..127 of 256" in show(Layout((256, 8))).svg
    True
    """
    found = _classify(args)
    if found is None:
        kinds = ", ".join(type(a).__name__ for a in args)
        raise LayoutError(f"show takes a layout, a TV layout and its tile shape (in either "
                          f"order), an object with .layout and .tile, or a BankReport; got "
                          f"({kinds})")
    kind, parts = found
    given = {"window": window, "title": title, "color_block": color_block,
             "dtype_bytes": dtype_bytes, "tile": tile, "max_phases": max_phases}
    extra = [f"{k}={v!r}" for k, v in given.items() if v is not None and k not in _OPTIONS[kind]]
    if extra:
        raise LayoutError(f"show of a {kind}: {', '.join(extra)} does not apply (a {kind} takes "
                          f"{', '.join(_OPTIONS[kind])})")
    if kind == "layout":
        return _layout_figure(parts[0], window, title, color_block, dtype_bytes, tile)
    if kind == "bank report":
        return Figure(bank_report_svg(parts[0], max_phases=32 if max_phases is None else max_phases,
                                      title=title))
    return _tv_figure(*parts, window, title)


def svg_or_none(*args, **kwargs) -> str | None:
    """``show(*args, **kwargs).svg``, or None when it cannot be drawn (symbolic, rank > 2, too
    many cells): the ``_repr_svg_`` contract, under which a notebook falls back to the
    LaTeX/text. A DSL tensor's ``_repr_svg_`` calls this (see docs/algebra.md)."""
    try:
        return show(*args, **kwargs).svg
    except LayoutError:
        return None
