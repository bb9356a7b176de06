"""The notebook views of issue 18: bank-group colours, tile boundaries, windows on large grids,
up to 256 threads told apart, TV objects, bank-conflict pictures, and show()'s dispatch."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from layoutkit.algebra import (ComposedLayout, Layout, LayoutError, Swizzle, bank_conflicts,
                               make_layout_tv, show, symbol, zipped_divide)
from layoutkit.algebra import render
from layoutkit.algebra.render_banks import bank_report_svg, conflict_colour
from layoutkit.algebra.render_svg import BOUNDARY_WIDTHS, INDEX_PALETTE, THREAD_PALETTE

NS = "{http://www.w3.org/2000/svg}"
SW128 = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1)))


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def group(root, cls):
    found = [g for g in root.iter(f"{NS}g") if g.get("class") == cls]
    assert len(found) <= 1
    return found[0] if found else None


def geometry(root):
    """(x0, y0, cell) of the grid, from the cell rects."""
    rects = list(group(root, "cells"))
    return (min(float(r.get("x")) for r in rects), min(float(r.get("y")) for r in rects),
            float(rects[0].get("width")))


def at(root, x, y):
    x0, y0, cell = geometry(root)
    return int(round((y - y0) / cell)), int(round((x - x0) / cell))


def cells(root, fn=lambda r: r.get("fill")):
    x0, y0, cell = geometry(root)
    return {at(root, float(r.get("x")), float(r.get("y"))): fn(r) for r in group(root, "cells")}


def labels(root):
    x0, y0, cell = geometry(root)
    out = {}
    for t in group(root, "labels"):
        span = t[0]
        out[(int((float(span.get("y")) - y0) // cell), int((float(span.get("x")) - x0) // cell))] = \
            "".join(t.itertext())
    return out


def caption(root):
    return [t.text for t in root if t.tag == f"{NS}text"]


def cuts(root):
    """({row: stroke width}, {col: stroke width}) of the tile boundary lines."""
    g = group(root, "tiles")
    rows, cols = {}, {}
    for line in ([] if g is None else g):
        x1, y1, x2, y2 = (float(line.get(k)) for k in ("x1", "y1", "x2", "y2"))
        if y1 == y2:
            rows[at(root, x1, y1)[0]] = float(line.get("stroke-width"))
        else:
            cols[at(root, x1, y1)[1]] = float(line.get("stroke-width"))
    return rows, cols


# ---- shared-memory colours ---------------------------------------------------------------------

def test_dtype_bytes_colours_by_16_byte_chunk_so_the_swizzle_shows():
    root = parse(show(SW128, dtype_bytes=2).svg)
    fills = cells(root)
    assert fills == {(i, j): INDEX_PALETTE[(SW128(i, j) * 2 // 16) % 8]
                     for i in range(8) for j in range(64)}
    assert "16-byte chunk" in caption(root)[1] and "banks 4c..4c+3" in caption(root)[1]
    # Swizzled: column 0's chunk moves from row to row (8 colours); plain: one colour.
    assert len({fills[(i, 0)] for i in range(8)}) == 8
    plain = cells(parse(show(Layout((8, 64), (64, 1)), dtype_bytes=2).svg))
    assert len({plain[(i, 0)] for i in range(8)}) == 1
    f32 = cells(parse(show(Layout((4, 32), (32, 1)), dtype_bytes=4).svg))
    assert f32[(0, 3)] == f32[(0, 0)] != f32[(0, 4)]          # 4 floats per 16-byte chunk


def test_a_swizzled_layout_defaults_to_colouring_by_the_unit_its_swizzle_permutes():
    root = parse(render.layout_svg(SW128))
    assert cells(root) == {(i, j): INDEX_PALETTE[(SW128(i, j) // 8) % 8]
                           for i in range(8) for j in range(64)}
    assert caption(root)[1].endswith("(index // 8) mod 8, the unit Sw<3,3,3> permutes")
    assert render.layout_svg(SW128, color_block=1) != render.layout_svg(SW128)


# ---- tile boundaries ---------------------------------------------------------------------------

def test_nested_modes_get_tile_boundaries_thicker_at_each_level():
    L = Layout(((2, (2, 3)), (3, 4)))
    rows, cols = cuts(parse(render.layout_svg(L)))
    thin, mid = BOUNDARY_WIDTHS[:2]
    assert rows == {2: thin, 4: mid, 6: thin, 8: mid, 10: thin}
    assert cols == {3: thin, 6: thin, 9: thin}
    assert cuts(parse(render.layout_svg(Layout((8, 12))))) == ({}, {})


def test_a_zipped_divide_is_drawn_with_its_tiles():
    Z = zipped_divide(Layout((12, 8)), (3, 4))               # ((3,4),(4,2))
    rows, cols = cuts(parse(show(Z).svg))
    assert set(rows) == {3, 6, 9} and set(cols) == {4}


def test_tile_argument_adds_boundaries_one_level_up():
    rows, cols = cuts(parse(show(Layout((8, 12)), tile=(4, 6)).svg))
    assert rows == {4: BOUNDARY_WIDTHS[0]} and cols == {6: BOUNDARY_WIDTHS[0]}
    rows, _ = cuts(parse(show(Layout(((2, 4), 2)), tile=(4, 1)).svg))
    assert rows == {2: BOUNDARY_WIDTHS[0], 4: BOUNDARY_WIDTHS[1], 6: BOUNDARY_WIDTHS[0]}


# ---- large grids -------------------------------------------------------------------------------

def test_show_draws_a_window_of_a_large_layout_and_says_so():
    L = Layout((256, 8), (8, 1))
    root = parse(show(L).svg)
    assert len(list(group(root, "cells"))) == 128 * 8
    assert "window: rows 0..127 of 256, columns 0..7 of 8" in caption(root)[2]
    assert len(list(group(root, "elided"))) == 1             # the cut below
    assert L._repr_svg_() == show(L).svg


def test_a_window_picks_any_part_and_keeps_true_coordinates():
    L = Layout((512, 256), (256, 1))                          # too large to draw whole
    with pytest.raises(LayoutError, match="131072 cells"):
        render.layout_svg(L)
    root = parse(render.layout_svg(L, window=((100, 110), (250, 253))))
    assert labels(root) == {(i, j): str(L(100 + i, 250 + j)) for i in range(10) for j in range(3)}
    assert len(list(group(root, "elided"))) == 4              # cut on all four sides
    texts = "".join(root.itertext())
    assert "rows 100..109 of 512, columns 250..252 of 256" in texts
    assert "100" in texts and "252" in texts                  # the axes count from the window
    root = parse(render.layout_svg(L, window=((500, 600), (250, 300))))   # cut to the grid
    assert len(list(group(root, "cells"))) == 12 * 6 and len(list(group(root, "elided"))) == 2


def test_wide_layouts_fit_a_notebook_column():
    width = float(parse(show(Layout((8, 64), (64, 1))).svg).get("width"))
    assert width < 1400                                       # was 2600 px before the width cap


@pytest.mark.parametrize("window, message", [
    ((0, 4), r"window rows must be a count n or a range"),
    (((300, 400), 4), r"starts outside the 256x8 grid"),
    ("top", r"window must be \(rows, cols\)"),
    (((4, 2), 4), r"0 <= start < stop"),
])
def test_window_errors(window, message):
    with pytest.raises(LayoutError, match=message):
        show(Layout((256, 8)), window=window)


# ---- TV layouts --------------------------------------------------------------------------------

def owners(root):
    return {k: tuple(map(int, v[1:].split("V"))) for k, v in labels(root).items()}


def test_256_threads_differ_by_colour_and_mark():
    tiler, tv = make_layout_tv(Layout((8, 32), (32, 1)), Layout((1, 2)))
    root = parse(show(tv, tiler).svg)
    own = owners(root)
    fills = cells(root)
    marks = {}
    for r in group(root, "marks"):
        marks[at(root, float(r.get("x")), float(r.get("y")))] = r.get("fill")
    look = {}
    for pos, (t, v) in own.items():
        assert fills[pos] == THREAD_PALETTE[t % 64]
        assert marks.get(pos) == (None if t < 64 else f"url(#lk-mark-{t // 64})")
        look.setdefault((fills[pos], marks.get(pos)), set()).add(t)
    assert len(look) == 256 and all(len(ts) == 1 for ts in look.values())
    assert ("threads 64-127 hatched, 128-191 dotted, 192-255 cross-hatched"
            in caption(root)[2])


def test_64_threads_need_no_marks_and_32_no_warp_lines():
    tiler, tv = make_layout_tv(Layout((8, 8), (8, 1)), Layout((1, 2)))
    root = parse(show(tv, tiler).svg)
    assert group(root, "marks") is None and group(root, "warps") is not None
    tiler, tv = make_layout_tv(Layout((4, 8), (8, 1)), Layout((1, 4)))
    assert group(parse(show(tv, tiler).svg), "warps") is None


def test_warp_lines_separate_exactly_the_cells_of_different_warps():
    tiler, tv = make_layout_tv(Layout((16, 8), (8, 1)), Layout((1, 2)))   # 128 threads
    root = parse(show(tv, tiler).svg)
    own = owners(root)
    x0, y0, cell = geometry(root)
    drawn = set()
    for line in group(root, "warps"):
        x1, y1, x2, y2 = (float(line.get(k)) for k in ("x1", "y1", "x2", "y2"))
        i, j = at(root, x1, y1)
        drawn.add(("h", i, j) if y1 == y2 else ("v", i, j))
    M, N = tiler
    expected = {("h", i, j) for i in range(1, M) for j in range(N)
                if own[(i, j)][0] // 32 != own[(i - 1, j)][0] // 32}
    expected |= {("v", i, j) for i in range(M) for j in range(1, N)
                 if own[(i, j)][0] // 32 != own[(i, j - 1)][0] // 32}
    assert drawn == expected and drawn


def test_a_tv_object_shows_like_its_layout_and_tile():
    tiler, tv = make_layout_tv(Layout((4, 8), (8, 1)), Layout((1, 4)))

    class TVLayout:                                           # the DSL's shape of one
        layout, tile = tv, tuple(tiler)
    assert show(TVLayout()).svg == show(tv, tiler).svg
    assert render.svg_or_none(TVLayout(), title="T") == show(tv, tiler, title="T").svg
    assert caption(parse(show(tv, tiler, title="RegisterTensor(f32, ...)").svg))[0] == \
        "RegisterTensor(f32, ...)"


def test_a_tall_tv_tile_is_windowed():
    tiler, tv = make_layout_tv(Layout((256, 1)), Layout((1, 4)))      # 256 x 4
    root = parse(show(tv, tiler).svg)
    own = owners(root)
    assert len(own) == 128 * 4 and all(tv(t, v) == i + 256 * j for (i, j), (t, v) in own.items())
    own = owners(parse(show(tv, tiler, window=((200, 256), 4)).svg))
    assert all(tv(t, v) == 200 + i + 256 * j for (i, j), (t, v) in own.items())


# ---- bank-conflict pictures --------------------------------------------------------------------

_, BY_COLUMNS = make_layout_tv(Layout((8, 8), (1, 8)), Layout((1, 8)))


def test_bank_picture_of_a_conflict_free_pattern_names_each_banks_thread():
    report = bank_conflicts(SW128, BY_COLUMNS, dtype_bytes=2, access_bytes=16)
    svg = show(report).svg
    assert svg == report._repr_svg_() == report.svg() == bank_report_svg(report)
    root = parse(svg)
    assert len(list(group(root, "cells"))) == 8 * 32
    got = labels(root)
    fills = cells(root)
    for i, phase in enumerate(report.phases):
        for b in range(32):
            (t,) = phase.banks[b]
            assert got[(i, b)] == f"T{t}" and fills[(i, b)] == THREAD_PALETTE[t % 64]
    tips = cells(root, lambda r: r.find(f"{NS}title").text)
    assert tips[(0, 0)] == "bank 0: 1 word, thread 0"


def test_bank_picture_of_a_conflict_shows_its_degree_in_red():
    report = bank_conflicts(Layout((8, 64), (64, 1)), BY_COLUMNS, dtype_bytes=2, access_bytes=16)
    root = parse(report.svg())
    got, fills = labels(root), cells(root)
    tips = cells(root, lambda r: r.find(f"{NS}title").text)
    assert got[(1, 4)] == "8" and fills[(1, 4)] == conflict_colour(8)
    assert tips[(1, 4)] == "bank 4: 8 words, threads 8-15"
    assert fills[(1, 0)] == "#ffffff" and (1, 0) not in got and tips[(1, 0)] == "bank 0: idle"
    assert "a0 w0 p1  8-way" in "".join(root.itertext())
    legend = ["".join(t.itertext()) for t in group(root, "legend").iter(f"{NS}text")]
    assert legend == ["8 words"]


def test_broadcast_cells_are_starred_and_phases_past_the_cap_are_left_out():
    report = bank_conflicts(Layout(32, 1), Layout((32, 1), (0, 0)), dtype_bytes=4)
    assert labels(parse(report.svg()))[(0, 0)] == "T0*"
    big = bank_conflicts(Layout((32, 32), (32, 1)), Layout((32, 32), (1, 32)), dtype_bytes=4)
    root = parse(big.svg(max_phases=4))
    assert len(list(group(root, "cells"))) == 4 * 32
    assert "first 4 of 32 phases shown" in "".join(root.itertext())
    assert show(big, max_phases=4).svg == big.svg(max_phases=4)
    assert caption(parse(show(big, title="smem tile").svg))[0] == "smem tile"
    assert conflict_colour(2) != conflict_colour(4) != conflict_colour(32)


# ---- show: dispatch and errors -----------------------------------------------------------------

def test_svg_or_none_is_none_only_when_nothing_can_be_drawn():
    M = symbol("M", 64)
    assert render.svg_or_none(Layout((M, 8))) is None
    assert render.svg_or_none(Layout((2, 2, 2))) is None
    assert render.svg_or_none("tensor") is None
    assert render.svg_or_none(SW128, dtype_bytes=2) == show(SW128, dtype_bytes=2).svg


@pytest.mark.parametrize("call, message", [
    (lambda: show(SW128, dtype_bytes=2, color_block=8), r"color_block or dtype_bytes, not both"),
    (lambda: show(SW128, dtype_bytes=3), r"dtype_bytes must be 1, 2, 4, 8 or 16, got 3"),
    (lambda: show(Layout((4, 4)), tile=(0, 2)), r"tile must be \(rows, cols\) of positive ints"),
    (lambda: show(3), r"show takes a layout.*BankReport; got \(int\)"),
    (lambda: show(*make_layout_tv(Layout(4), Layout(2)), dtype_bytes=2),
     r"show of a TV layout: dtype_bytes=2 does not apply \(a TV layout takes window, title\)"),
    (lambda: show(Layout(4), max_phases=3), r"show of a layout: max_phases=3 does not apply"),
    (lambda: show(bank_conflicts(Layout(32), Layout((32, 1)), dtype_bytes=4), window=(2, 2)),
     r"show of a bank report: window=\(2, 2\) does not apply"),
    (lambda: show(Layout((symbol("M", 8), 8))), r"show: \(M,8\).*symbolic.*subs"),
    (lambda: bank_report_svg(Layout(4)), r"expected a BankReport"),
    (lambda: bank_conflicts(SW128, BY_COLUMNS, dtype_bytes=2, access_bytes=16).svg(max_phases=0),
     r"max_phases must be a positive int"),
])
def test_show_errors(call, message):
    with pytest.raises(LayoutError, match=message):
        call()
