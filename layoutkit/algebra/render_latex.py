"""LaTeX for layouts: ``shape:stride`` (symbols typeset by sympy) and, for a small rank-1/2
layout with a concrete shape, its index table as an array (rows = mode 0, columns = mode 1)."""
from __future__ import annotations

from . import int_tuple as it
from .composed import ComposedLayout
from .errors import LayoutError
from .layout import Layout
from .render_grid import index_grid, symbols_in
from .swizzle import Swizzle

__all__ = ["layout_latex", "int_tuple_latex", "TABLE_MAX_SIDE"]

TABLE_MAX_SIDE = 32  # rows and columns of the largest index table worth typesetting


def _leaf(x) -> str:
    if type(x) is int:
        return str(x)
    import sympy
    return sympy.latex(x)


def int_tuple_latex(t) -> str:
    """``(4,(2,3))`` with symbolic leaves typeset: ``(\\frac{M}{64},1)``."""
    if type(t) is tuple:
        return "(" + ",".join(int_tuple_latex(v) for v in t) + ")"
    return _leaf(t)


def _function_latex(f) -> str:
    if isinstance(f, Swizzle):
        return rf"\mathrm{{Sw}}\langle {f.bits},{f.base},{f.shift}\rangle"
    if isinstance(f, ComposedLayout):
        return (rf"{_function_latex(f.outer)} \circ {_leaf(f.offset)} \circ "
                rf"{_function_latex(f.inner)}")
    return f"{int_tuple_latex(f.shape)}:{int_tuple_latex(f.stride)}"


def _table_shape(inner: Layout):
    """(rows, cols, row mode, column mode or None) when a table fits, else None."""
    if len(inner) > 2:
        return None
    if len(inner) == 2 and type(inner.shape) is tuple:
        row_mode, col_mode = inner[0], inner[1]
    else:
        row_mode, col_mode = inner, None
    rows = it.product(row_mode.shape)
    cols = 1 if col_mode is None else it.product(col_mode.shape)
    if type(rows) is not int or type(cols) is not int:
        return None
    if rows > TABLE_MAX_SIDE or cols > TABLE_MAX_SIDE:
        return None
    return rows, cols, row_mode, col_mode


def _table(layout) -> list[list[str]] | None:
    inner = layout.inner if isinstance(layout, ComposedLayout) else layout
    fits = _table_shape(inner)
    if fits is None:
        return None
    rows, cols, row_mode, col_mode = fits
    if isinstance(layout, ComposedLayout):
        if symbols_in(layout):
            return None  # a swizzle of a symbolic offset has no closed form
        return [[str(v) for v in row] for row in index_grid(layout, "layout_latex")]
    # Concrete shape, possibly symbolic strides: entries are expressions L0(i) + L1(j).
    row_part = [row_mode(i) for i in range(rows)]
    col_part = [0] if col_mode is None else [col_mode(j) for j in range(cols)]
    return [[_leaf(it.add(r, c)) for c in col_part] for r in row_part]


def layout_latex(layout) -> str:
    """Display-math LaTeX of a Layout or ComposedLayout: its ``shape:stride`` (a ComposedLayout
    as ``Sw<B,M,S> ∘ offset ∘ inner``) and, when the shape is concrete, the rank at most 2 and
    each side at most 32, the index table with row (mode 0) and column (mode 1) coordinates.

    >>> from layoutkit.algebra import Layout, symbol
    >>> print(layout_latex(Layout((2, 2), (1, 2))))
    $$(2,2):(1,2) \\qquad \\begin{array}{r|rr} & 0 & 1 \\\\ \\hline 0 & 0 & 2 \\\\ 1 & 1 & 3 \\end{array}$$
    >>> M = symbol("M", 128)
    >>> print(layout_latex(Layout((M, 64), (64, 1))))
    $$(M,64):(64,1)$$
    """
    if not isinstance(layout, (Layout, ComposedLayout)):
        raise LayoutError(f"layout_latex: expected a Layout or ComposedLayout, got {layout!r}")
    head = _function_latex(layout)
    table = _table(layout)
    if table is None:
        return f"$${head}$$"
    cols = len(table[0])
    lines = [" & " + " & ".join(str(j) for j in range(cols))]
    lines += [f"{i} & " + " & ".join(row) for i, row in enumerate(table)]
    body = r" \\ \hline ".join([lines[0], r" \\ ".join(lines[1:])])
    return rf"$${head} \qquad \begin{{array}}{{r|{'r' * cols}}}{body} \end{{array}}$$"
