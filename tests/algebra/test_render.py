"""Notebook rendering of layouts: LaTeX text, SVG grids of indices, TV grids coloured by thread."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from layoutkit.algebra import (ComposedLayout, Layout, LayoutError, Swizzle, make_layout_tv,
                               symbol)
from layoutkit.algebra import render
from layoutkit.algebra.render_svg import (INDEX_PALETTE, MIN_FONT, THREAD_PALETTE,
                                          TEXT_CELL_LIMIT)

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def group(root: ET.Element, cls: str) -> ET.Element | None:
    found = [g for g in root.iter(f"{NS}g") if g.get("class") == cls]
    assert len(found) <= 1
    return found[0] if found else None


def cell_grid(root: ET.Element, attr_fn):
    """{(row, col): attr_fn(rect)} from the cell rects, rows/cols recovered from x/y."""
    rects = list(group(root, "cells"))
    xs = sorted({float(r.get("x")) for r in rects})
    ys = sorted({float(r.get("y")) for r in rects})
    return {(ys.index(float(r.get("y"))), xs.index(float(r.get("x")))): attr_fn(r) for r in rects}


def label_grid(root: ET.Element) -> dict:
    """{(row, col): label text} from the per-cell texts (lines joined), placed by the cells' x/y."""
    labels = group(root, "labels")
    if labels is None:
        return {}
    rects = list(group(root, "cells"))
    cell = float(rects[0].get("width"))
    x0 = min(float(r.get("x")) for r in rects)
    y0 = min(float(r.get("y")) for r in rects)
    out = {}
    for t in labels:
        span = t[0]
        col = int((float(span.get("x")) - x0) // cell)
        row = int((float(span.get("y")) - y0) // cell)
        out[(row, col)] = "".join(t.itertext())
    return out


# ---- layout grids ------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", [
    Layout((4, 3), (3, 1)),
    Layout(((2, 2), 3), ((1, 6), 2)),        # nested mode 0 is grouped into rows
    Layout((2, (2, 3)), (12, (1, 2))),
    Layout((6, 2), (8, 2)),
])
def test_layout_svg_cells_hold_the_layout_values(layout):
    root = parse(render.layout_svg(layout))
    rows, cols = layout[0].size(), layout[1].size()
    labels = label_grid(root)
    assert len(list(group(root, "cells"))) == rows * cols
    assert labels == {(i, j): str(layout(i, j)) for i in range(rows) for j in range(cols)}
    fills = cell_grid(root, lambda r: r.get("fill"))
    assert fills == {(i, j): INDEX_PALETTE[layout(i, j) % 8] for i in range(rows) for j in range(cols)}


def test_rank1_layout_is_one_column():
    layout = Layout(5, 3)
    labels = label_grid(parse(render.layout_svg(layout)))
    assert labels == {(i, 0): str(3 * i) for i in range(5)}


def test_swizzled_layout_shows_swizzled_offsets_coloured_by_vector():
    sw = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1)))
    root = parse(render.layout_svg(sw, color_block=8))
    labels = label_grid(root)
    assert labels == {(i, j): str(sw(i, j)) for i in range(8) for j in range(64)}
    assert labels[(1, 0)] == "72" and labels[(1, 8)] == "64"   # row 1: vectors 0 and 1 swapped
    fills = cell_grid(root, lambda r: r.get("fill"))
    assert all(fills[(i, j)] == INDEX_PALETTE[(sw(i, j) // 8) % 8] for i in range(8) for j in range(64))


def test_composed_layout_with_a_layout_outer_and_offset():
    c = ComposedLayout(Layout((4, 4), (4, 1)), 2, Layout((2, 3), (1, 2)))
    labels = label_grid(parse(render.layout_svg(c)))
    assert labels == {(i, j): str(c(i, j)) for i in range(2) for j in range(3)}


def test_svg_is_deterministic_and_the_repr_hooks_use_it():
    layout = Layout((8, 8), (1, 8))
    first = render.layout_svg(layout)
    assert render.layout_svg(Layout((8, 8), (1, 8))) == first
    assert layout._repr_svg_() == first
    sw = ComposedLayout(Swizzle(2, 0, 2), 0, Layout((4, 4), (4, 1)))
    assert sw._repr_svg_() == render.layout_svg(sw)


def test_large_layout_scales_cells_and_drops_text_past_the_limit():
    big = Layout((128, 64), (64, 1))
    root = parse(render.layout_svg(big))
    assert len(list(group(root, "cells"))) == 128 * 64
    assert float(group(root, "labels").get("font-size")) >= MIN_FONT
    assert float(root.get("height")) < 3500            # cells shrink to fit
    huge = Layout((256, 128), (128, 1))
    assert 256 * 128 > TEXT_CELL_LIMIT
    root = parse(render.layout_svg(huge))
    assert group(root, "labels") is None
    assert len(list(group(root, "cells"))) == 256 * 128


# ---- TV grids ----------------------------------------------------------------------------------

def test_tv_svg_labels_every_cell_with_its_owner_and_colours_by_thread():
    tiler, tv = make_layout_tv(Layout((4, 8), (8, 1)), Layout((1, 4), (1, 1)))
    root = parse(render.tv_layout_svg(tv, tiler))
    M, N = tiler
    labels = label_grid(root)
    fills = cell_grid(root, lambda r: r.get("fill"))
    assert len(labels) == M * N == 32 * 4
    seen = set()
    for (m, n), text in labels.items():
        t, v = map(int, text[1:].split("V"))
        assert tv(t, v) == m + n * M
        assert fills[(m, n)] == THREAD_PALETTE[t % len(THREAD_PALETTE)]
        seen.add((t, v))
    assert seen == {(t, v) for t in range(32) for v in range(4)}


def test_thread_colours_are_distinct_within_64_threads_and_the_legend_lists_them():
    assert len(set(THREAD_PALETTE)) == len(THREAD_PALETTE) == 64
    tiler, tv = make_layout_tv(Layout((8, 16), (16, 1)), Layout((1, 2), (1, 1)))
    root = parse(render.tv_layout_svg(tv, tiler))
    legend = group(root, "legend")
    texts = ["".join(t.itertext()) for t in legend.iter(f"{NS}text")]
    swatches = [r.get("fill") for r in legend.iter(f"{NS}rect")]
    assert swatches == list(THREAD_PALETTE) and texts[0] == "T0,T64" and texts[63] == "T63,T127"


def test_tv_cells_with_several_owners_show_the_lowest_and_are_counted():
    # 4 threads, thread mode stride 0 past 2: threads 2, 3 replicate threads 0, 1.
    tv = Layout(((2, 2), 2), ((1, 0), 2))
    svg = render.tv_layout_svg(tv, (2, 2))
    labels = label_grid(parse(svg))
    assert labels == {(0, 0): "T0V0", (1, 0): "T1V0", (0, 1): "T0V1", (1, 1): "T1V1"}
    assert "4 cells have several owners" in svg


def test_tv_cells_nobody_owns_stay_white_and_unlabelled():
    svg = render.tv_layout_svg(Layout((2, 1), (1, 0)), (2, 2))
    root = parse(svg)
    assert label_grid(root) == {(0, 0): "T0V0", (1, 0): "T1V0"}
    fills = cell_grid(root, lambda r: r.get("fill"))
    assert fills[(0, 1)] == fills[(1, 1)] == "#ffffff"


def test_tv_128x64_tile_is_readable():
    tiler, tv = make_layout_tv(Layout((32, 4), (1, 32)), Layout((4, 16), (1, 4)))
    assert tiler == (128, 64)
    svg = render.tv_layout_svg(tv, tiler)
    root = parse(svg)
    assert len(group(root, "labels")) == 128 * 64
    assert float(group(root, "labels").get("font-size")) >= 7
    assert svg == render.tv_layout_svg(tv, tiler)


def test_show_accepts_both_argument_orders_and_saves(tmp_path):
    tiler, tv = make_layout_tv(Layout((2, 2)), Layout((1, 2)))
    fig = render.show(tiler, tv)
    assert fig._repr_svg_() == render.show(tv, tiler).svg == render.tv_layout_svg(tv, tiler)
    assert render.show(Layout(4, 2)).svg == render.layout_svg(Layout(4, 2))
    fig.save(tmp_path / "tv.svg")
    assert (tmp_path / "tv.svg").read_text() == fig.svg


# ---- errors ------------------------------------------------------------------------------------

def test_symbolic_layout_svg_asks_for_concrete_extents():
    M = symbol("M", 128)
    L = Layout((M, 64), (64, 1))
    with pytest.raises(LayoutError, match=r"\(M,64\):\(64,1\).*symbolic.*concrete.*subs"):
        render.layout_svg(L)
    assert render.svg_or_none(L) is None
    assert render.layout_svg(L.subs({"M": 128})) == render.layout_svg(Layout((128, 64), (64, 1)))


@pytest.mark.parametrize("call, message", [
    (lambda: render.layout_svg(Layout((2, 2, 2))), r"rank 3.*group modes"),
    (lambda: render.layout_svg(Layout((512, 256))), r"131072 cells.*65536"),
    (lambda: render.layout_svg((4, 2)), r"expected a Layout"),
    (lambda: render.layout_svg(Layout(4), color_block=0), r"color_block.*positive"),
    (lambda: render.tv_layout_svg(Layout((4, 2), (1, 4)), (4, 1)), r"\(thread 0, value 1\).*index 4.*outside"),
    (lambda: render.tv_layout_svg(Layout(8), (8,)), r"rank 1.*\(thread, value\)"),
    (lambda: render.tv_layout_svg(Layout((2, 2)), (symbol("M", 4), 2)), r"symbolic"),
    (lambda: render.tv_layout_svg(Layout((2, 2), (symbol("K", 2), 1)), (4, 4)), r"K.*concrete"),
    (lambda: render.tv_layout_svg(Layout((2, 2)), (2, 2, 2)), r"3 modes"),
    (lambda: render.tv_layout_svg(Layout((2, 2)), "tile"), r"tiler_mn must be a tile shape"),
    (lambda: render.show(Layout(2), Layout(2)), r"show takes a layout"),
])
def test_errors_name_the_input_and_the_rule(call, message):
    with pytest.raises(LayoutError, match=message):
        call()


# ---- LaTeX -------------------------------------------------------------------------------------

def test_latex_has_shape_stride_and_the_index_table():
    L = Layout((2, 3), (3, 1))
    text = L._repr_latex_()
    assert text == render.layout_latex(L)
    assert text.startswith("$$(2,3):(3,1)") and text.endswith("$$")
    body = text[text.index(r"\hline") + len(r"\hline"):text.index(r"\end{array}")]
    rows = [r.split("&") for r in body.split(r"\\")]
    assert [[c.strip() for c in r] for r in rows] == [["0", "0", "1", "2"], ["1", "3", "4", "5"]]


def test_latex_of_symbols_typesets_them_and_tables_symbolic_strides():
    M, K = symbol("M", 128), symbol("K", 64)
    assert render.layout_latex(Layout((M, K), (K, 1))) == "$$(M,K):(K,1)$$"
    assert render.layout_latex(Layout(M / 64, 1)) == r"$$\frac{M}{64}:1$$"
    text = render.layout_latex(Layout((2, 2), (K, 1)))
    assert r"0 & 0 & 1 \\ 1 & K & K + 1" in text


def test_latex_of_a_swizzled_layout_and_large_or_high_rank_layouts():
    sw = ComposedLayout(Swizzle(1, 0, 1), 0, Layout((2, 2), (2, 1)))
    text = render.layout_latex(sw)
    assert text.startswith(r"$$\mathrm{Sw}\langle 1,0,1\rangle \circ 0 \circ (2,2):(2,1)")
    assert r"0 & 0 & 1 \\ 1 & 3 & 2" in text
    assert render.layout_latex(Layout((64, 64))) == "$$(64,64):(1,64)$$"
    assert render.layout_latex(Layout((2, 2, 2))) == "$$(2,2,2):(1,2,4)$$"
    M = symbol("M", 8)
    assert "array" not in render.layout_latex(ComposedLayout(Swizzle(1, 0, 1), M, Layout((2, 2))))
    with pytest.raises(LayoutError, match="expected a Layout"):
        render.layout_latex("(2,2):(1,2)")
