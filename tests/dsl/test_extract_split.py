"""Extractor.split groups the threads of a mask by their row of per-thread columns: every
distinct row once, in lexicographic order, with exactly the threads that have it."""
import types

import numpy as np
from hypothesis import given, settings, strategies as st

from layoutkit.dsl.check.extract import Extractor


def fresh():
    """An extractor's state as split needs it: an empty cache of splits (each call its own,
    so the cache's answer is checked too when a case repeats a question)."""
    return types.SimpleNamespace(_splits={}, _split=lambda *a: Extractor._split(None, *a))


def reference(mask, columns):
    """The groups by a dict of rows, sorted (what split must give)."""
    idx = np.nonzero(mask)[0]
    cols = [np.broadcast_to(c, idx.shape) for c in columns]
    groups: dict = {}
    for j, t in enumerate(idx):
        groups.setdefault(tuple(int(c[j]) for c in cols), []).append(int(t))
    return [(sorted(ts), row) for row, ts in sorted(groups.items())]


@st.composite
def masks_and_columns(draw):
    mask = np.array(draw(st.lists(st.booleans(), min_size=1, max_size=200)))
    count = int(mask.sum())
    values = st.integers(-(1 << 40), 1 << 40)
    column = st.one_of(values.map(np.int64),                       # a scalar: every thread
                       values.map(lambda v: np.full(count, v)),    # one value, as a column
                       st.lists(st.sampled_from([-3, 0, 7, 1 << 33]), min_size=count,
                                max_size=count).map(lambda v: np.array(v, dtype=np.int64)))
    return mask, draw(st.lists(column, min_size=1, max_size=4))


@settings(max_examples=150, deadline=None)
@given(masks_and_columns())
def test_split_groups_threads_by_row(case):
    mask, columns = case
    state = fresh()
    for _ in range(2):                  # computed, then served from the cache
        got = [(np.nonzero(sub)[0].tolist(), row)
               for sub, row in Extractor.split(state, mask, columns)]
        assert got == reference(mask, columns)


def test_split_worked_example():
    mask = np.array([True, True, False, True, True])
    got = [(sub.tolist(), row) for sub, row in
           Extractor.split(fresh(), mask, [np.array([2, 1, 2, 1]), np.int64(5)])]
    assert got == [([False, True, False, False, True], (1, 5)),
                   ([True, False, False, True, False], (2, 5))]
