"""Bounds masks survive extents of 1: a tile reaching past a size-1 mode must still be masked."""
from __future__ import annotations

import re

import layoutkit as lk
from tests.dsl.kernels import row_sums


def test_tile_past_an_extent_of_one_is_masked():
    # n == 1 specialises n to the constant 1; the (1, 32) tile then covers columns 0..31 of a
    # one-column matrix, and only lane 0 may load (a GPU run once read 31 columns past the end).
    ptx = row_sums.ptx(lk.Pointer[lk.f32], lk.Pointer[lk.f32], 1, 1)
    loads = [line for line in ptx.splitlines() if "ld.global" in line]
    assert loads and all(re.match(r"\s*@%p\d+ ld\.global", line) for line in loads), loads
