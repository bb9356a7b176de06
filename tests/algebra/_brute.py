"""Small brute-force helpers shared by the algebra unit tests (not a test module)."""
from __future__ import annotations

import itertools

from layoutkit.algebra import Layout, size


def values(layout) -> list:
    """layout(i) for every flat index i of its domain."""
    return [layout(i) for i in range(size(layout))]


def some_layouts():
    """A fixed family of small layouts: compact, strided, with holes, stride-0, nested."""
    shapes = [4, (2, 3), (4, 2), ((2, 2), 3), (2, (3, 2))]
    out = []
    for s in shapes:
        out.append(Layout(s))
        flat = len(s) if isinstance(s, tuple) else 1
        for strides in itertools.islice(itertools.product((0, 1, 2, 6, 8), repeat=3), 0, 125, 11):
            it = iter(strides)

            def rebuild(t):
                return tuple(rebuild(v) for v in t) if isinstance(t, tuple) else next(it)
            try:
                out.append(Layout(s, rebuild(s)))
            except StopIteration:
                pass
        del flat
    return out
