"""docs/algebra_tour.ipynb runs in CI: every code cell executes, in order, in one namespace (as
a kernel would run them), its own asserts hold, and the outputs stored in the notebook are the
outputs the cells produce today (pictures included: the SVGs are deterministic).

nbconvert and jupyter are not dependencies; this executes the cells itself. After a change to
the notebook or to the pictures, rewrite the stored outputs with

    python3 -m tests.algebra.test_notebook --update
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import sys
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "algebra_tour.ipynb"


def load(path: Path = NOTEBOOK) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb.get("nbformat") == 4, f"{path.name}: not an nbformat-4 notebook"
    assert isinstance(nb.get("metadata"), dict) and isinstance(nb.get("cells"), list)
    for i, cell in enumerate(nb["cells"]):
        assert cell.get("cell_type") in ("code", "markdown"), f"cell {i}: {cell.get('cell_type')}"
        assert isinstance(cell.get("source"), list) and isinstance(cell.get("metadata"), dict)
        if cell["cell_type"] == "code":
            assert "outputs" in cell and "execution_count" in cell, f"cell {i} lacks outputs"
    return nb


def source(cell: dict) -> str:
    return "".join(cell["source"])


def _lines(text: str) -> list[str]:
    """nbformat's multi-line string: a list of lines, each keeping its newline."""
    return text.splitlines(keepends=True)


def _display(value, count: int) -> dict:
    data = {"text/plain": _lines(repr(value))}
    svg = getattr(value, "_repr_svg_", None)
    if callable(svg):
        text = svg()
        if text is not None:
            data["image/svg+xml"] = _lines(text)
    return {"output_type": "execute_result", "execution_count": count, "data": data,
            "metadata": {}}


def run_cell(code: str, namespace: dict, count: int, name: str) -> list[dict]:
    """Execute one cell as IPython does (the value of a last expression is displayed, unless
    the line ends in ';') and return its nbformat outputs."""
    tree = ast.parse(code, filename=name)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, name, "exec"), namespace)
        value = eval(compile(last, name, "eval"), namespace) if last is not None else None
    outputs = []
    if out.getvalue():
        outputs.append({"output_type": "stream", "name": "stdout", "text": _lines(out.getvalue())})
    if value is not None:
        outputs.append(_display(value, count))
    return outputs


def execute(nb: dict):
    """Yield (index, cell, fresh outputs, execution count) for each code cell, in order."""
    namespace: dict = {"__name__": "__main__"}
    count = 0
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        count += 1
        yield i, cell, run_cell(source(cell), namespace, count, f"<notebook cell {i}>"), count


def test_the_tour_executes_and_its_stored_outputs_are_current():
    nb = load()
    stale = []
    ran = 0
    for i, cell, outputs, count in execute(nb):
        ran += 1
        if cell["outputs"] != outputs or cell["execution_count"] != count:
            stale.append(i)
    assert ran >= 10, "the tour lost its code cells"
    assert not stale, (f"cells {stale} of {NOTEBOOK.name} print or show something else than "
                       "their stored outputs: python3 -m tests.algebra.test_notebook --update")


def test_the_tour_covers_swizzles_bank_conflicts_and_tv_pictures():
    text = "\n".join(source(c) for c in load()["cells"])
    for needle in ("Swizzle(3, 3, 3)", "bank_conflicts(", "make_layout_tv(", "dtype_bytes=",
                   "zipped_divide(", "window=", "local_partition(", "assert "):
        assert needle in text, f"the tour no longer shows {needle}"


def update(path: Path = NOTEBOOK) -> None:
    nb = load(path)
    for _, cell, outputs, count in execute(nb):
        cell["outputs"], cell["execution_count"] = outputs, count
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(__doc__)
    update()
