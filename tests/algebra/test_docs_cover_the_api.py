"""docs/algebra.md shows every public name of layoutkit.algebra in a doctested example."""
from __future__ import annotations

import re
from pathlib import Path

import layoutkit.algebra as la

DOC = Path(__file__).resolve().parents[2] / "docs" / "algebra.md"


def doctest_text() -> str:
    """The contents of the page's ```python blocks (what pytest runs as doctests)."""
    return "\n".join(re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S))


def test_every_public_name_is_in_a_doctested_example():
    text = doctest_text()
    missing = [n for n in la.__all__ if not re.search(rf"\b{re.escape(n)}\b", text)]
    assert not missing, f"docs/algebra.md has no doctested example of {missing}"


def test_the_page_lists_every_public_name_in_its_table():
    table = DOC.read_text().split("## Layouts are functions")[0]
    missing = [n for n in la.__all__ if f"`{n}`" not in table]
    assert not missing, f"the table at the top of docs/algebra.md misses {missing}"
