"""Notebook display of layouts: LaTeX (``shape:stride`` and a small index table) and SVG grids.

``layout_latex(L)`` and ``layout_svg(L)`` back ``Layout._repr_latex_``/``_repr_svg_``;
``tv_layout_svg(layout_tv, tiler_mn)`` draws a thread-value layout over its tile; ``show(...)``
wraps either drawing in a ``Figure`` that a notebook displays and that can be saved to a file.
Pure stdlib (plus sympy for typesetting symbols); no CUDA.

>>> from layoutkit.algebra import Layout, make_layout_tv
>>> fig = show(*make_layout_tv(Layout((4, 8), (8, 1)), Layout((1, 4), (1, 1))))
>>> fig.svg.count(">T31</tspan>"), fig.svg.count(">V3</tspan>")   # thread 31's 4 cells; value 3 of 32 threads
(4, 32)
"""
from __future__ import annotations

from .composed import ComposedLayout
from .errors import LayoutError
from .layout import Layout
from .render_latex import layout_latex
from .render_svg import layout_svg, tv_layout_svg

__all__ = ["layout_latex", "layout_svg", "tv_layout_svg", "show", "Figure", "svg_or_none"]


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


def show(*args, color_block: int = 1) -> Figure:
    """A displayable drawing of a layout or a TV layout:

    - ``show(layout)``: the grid of indices of a Layout or ComposedLayout (see layout_svg);
    - ``show(layout_tv, tiler_mn)`` or ``show(tiler_mn, layout_tv)`` (so that
      ``show(*make_layout_tv(thr, val))`` works): the tile coloured by thread (tv_layout_svg).
    """
    if len(args) == 1 and isinstance(args[0], (Layout, ComposedLayout)):
        return Figure(layout_svg(args[0], color_block=color_block))
    if len(args) == 2:
        a, b = args
        if isinstance(a, Layout) and _is_tile_shape(b):
            return Figure(tv_layout_svg(a, b))
        if isinstance(b, Layout) and _is_tile_shape(a):
            return Figure(tv_layout_svg(b, a))
    kinds = ", ".join(type(a).__name__ for a in args)
    raise LayoutError(f"show takes a layout, or a TV layout and its tile shape (in either order), "
                      f"got ({kinds})")


def svg_or_none(layout) -> str | None:
    """layout_svg(layout), or None when the layout cannot be drawn (symbolic, rank > 2, too many
    cells): the ``_repr_svg_`` contract, under which a notebook falls back to the LaTeX/text."""
    try:
        return layout_svg(layout)
    except LayoutError:
        return None
