"""The SVG of a bank-conflict report: one row per phase, one column per bank.

A bank that one word of the phase uses is coloured by the (first) thread touching it and
labelled ``T{t}`` (``T{t}*`` when several threads share the word: a broadcast); a bank serving
n > 1 distinct words is red, darker with n, and labelled n: the phase needs n wavefronts there.
Each cell's tooltip lists its threads and words. Rows past ``max_phases`` are left out (the
caption says how many).
"""
from __future__ import annotations


from .banks import BANKS, BankReport, _span
from .errors import LayoutError
from .render_svg import THREAD_PALETTE, _Canvas, _cell_font, _num, escape

__all__ = ["bank_report_svg", "conflict_colour"]


def conflict_colour(words: int) -> str:
    """The fill of a bank serving ``words`` > 1 distinct words: light red at 2, dark at 32."""
    level = min(1.0, (words.bit_length() - 1) / 5)        # 2 -> 0.2, 4 -> 0.4, ... 32 -> 1
    light = round(225 - 150 * level)
    return "#%02x%02x%02x" % (255 - round(60 * level), light, light)


def _cell(phase, bank: int) -> tuple[str, str, str]:
    """(fill, label, tooltip) of one bank in one phase."""
    threads, words = phase.banks[bank], phase.words[bank]
    if not threads:
        return "#ffffff", "", f"bank {bank}: idle"
    tip = (f"bank {bank}: {words} word{'s' if words > 1 else ''}, "
           f"thread{'s' if len(threads) > 1 else ''} {_span(threads)}")
    if words > 1:
        return conflict_colour(words), str(words), tip
    t = threads[0]
    return THREAD_PALETTE[t % len(THREAD_PALETTE)], f"T{t}" + ("*" if len(threads) > 1 else ""), tip


def bank_report_svg(report: BankReport, max_phases: int = 32, title: str | None = None) -> str:
    """The SVG of ``report`` (see the module docstring), its first ``max_phases`` phases;
    ``title`` replaces the caption's first line (the report's description)."""
    if not isinstance(report, BankReport):
        raise LayoutError(f"bank_report_svg: expected a BankReport, got {report!r}")
    if type(max_phases) is not int or max_phases < 1:
        raise LayoutError(f"bank_report_svg: max_phases must be a positive int, got {max_phases!r}")
    phases = report.phases[:max_phases]
    caption = [title or report.what, report.summary()]
    if len(report.phases) > len(phases):
        caption.append(f"first {len(phases)} of {len(report.phases)} phases shown "
                       f"(max_phases={len(report.phases)} draws all)")
    caption.append("cell: the thread using the bank (* a broadcast); red n: n distinct words in "
                   "one bank, n wavefronts")
    row_labels = [f"a{p.access} w{p.warp} p{p.index}  {p.degree}-way" for p in phases]
    cols = [str(b) for b in range(BANKS)]
    shades = sorted({n for p in phases for n in p.words if n > 1})
    legend = [(conflict_colour(n), f"{n} words") for n in shades]
    canvas = _Canvas(len(phases), BANKS, caption, len(legend), row_labels, cols)
    canvas.header(f"bank conflicts: {report.what}")
    canvas.axes()
    c = canvas.cell
    cells = [[_cell(p, b) for b in range(BANKS)] for p in phases]
    canvas.parts.append('<g class="cells" stroke="#404040" stroke-width="0.5">')
    for i, row in enumerate(cells):
        for j, (fill, _, tip) in enumerate(row):
            canvas.parts.append(f'<rect x="{_num(canvas.x(j))}" y="{_num(canvas.y(i))}" '
                                f'width="{c}" height="{c}" fill="{fill}">'
                                f"<title>{escape(tip)}</title></rect>")
    canvas.parts.append("</g>")
    chars = max([len(label) for row in cells for _, label, _ in row] + [1])
    font = _cell_font(c, chars, 1, len(phases) * BANKS)
    canvas.labels([[(label,) if label else () for _, label, _ in row] for row in cells], font)
    canvas.legend(legend)
    return canvas.svg()
