"""DSL kernels run on the CPU interpreter match numpy: elementwise math, loops and branches,
reductions, convert_layout (shuffles and shared round trips), swizzled shared tiles."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutkit.algebra import Swizzle
from layoutkit.dsl.interpreter import from_bf16, interpret, to_bf16

from ..block_kernels import (BLOCKED, STRIDED, WARP_BLOCKED, WARP_LOCAL, convert_roundtrip,
                             row_stats, transpose_tile)
from ..kernels import axpb, axpb_bf16, row_sums
from .kernels import int_math, swizzled_roundtrip


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 700), st.sampled_from([1, 2, 4]),
       st.floats(-4, 4, width=32), st.floats(-4, 4, width=32), st.integers(0, 2 ** 16))
def test_axpb_matches_numpy(n, values, a, b, seed):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, dtype=np.float32)
    grid = -(-n // (128 * values))
    interpret(axpb, grid, x, y, n, a, b, values, seed=seed)
    np.testing.assert_array_equal(y, x * np.float32(a) + np.float32(b))


def test_bf16_fma_and_rounding_match_numpy():
    n = 1500
    x = to_bf16(np.random.default_rng(1).standard_normal(n) * 8)
    y = np.zeros(n, dtype=np.uint16)
    interpret(axpb_bf16, 2, x, y, n, 1.5, -0.25)
    exact = from_bf16(x).astype(np.float64) * 1.5 - 0.25             # fma: one rounding
    np.testing.assert_array_equal(y, to_bf16(exact.astype(np.float32)))


def test_runtime_loop_and_branch():
    m, n = 3, 70
    x = np.random.default_rng(2).standard_normal((m, n)).astype(np.float32)
    y = np.zeros((m, 32), dtype=np.float32)
    interpret(row_sums, 4, x, y, m, n)                 # block 3 is past m: the if skips it
    lanes = np.zeros((m, 32), dtype=np.float32)
    for j in range(0, n, 32):
        chunk = np.zeros((m, 32), dtype=np.float32)
        chunk[:, :min(32, n - j)] = x[:, j:j + 32]
        lanes = lanes + chunk
    np.testing.assert_array_equal(y, lanes)


def test_integer_wraparound_and_truncating_division():
    x = np.array([(-1) ** i * (i * 40503 + 2 ** 20) for i in range(64)], dtype=np.int32)
    y = np.zeros(64, dtype=np.int32)
    interpret(int_math, 1, x, y, -3)
    with np.errstate(over="ignore"):
        wrapped = (x.astype(np.int64) * 65537 + 7).astype(np.int32).astype(np.int64)
    np.testing.assert_array_equal(y, np.trunc(wrapped / -3).astype(np.int64))


@pytest.mark.parametrize("rows, k", [(8, 4), (1, 4)])
def test_reductions_across_lanes_and_warps(rows, k):
    m, n = rows * 2, 256 * k // rows - 3
    x = np.random.default_rng(3).standard_normal((m, n)).astype(np.float32)
    mx, sm = np.zeros(m, np.float32), np.zeros(m, np.float32)
    interpret(row_stats, 2, x, mx, sm, m, n, rows, k, seed=5)
    np.testing.assert_array_equal(mx, x.max(axis=1))
    np.testing.assert_allclose(sm, x.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("src, dst", [(BLOCKED, STRIDED), (STRIDED, BLOCKED),
                                      (WARP_LOCAL, WARP_BLOCKED), (WARP_BLOCKED, BLOCKED)])
def test_convert_layout_moves_every_value(src, dst):
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(256, dtype=np.float32)
    interpret(convert_roundtrip, 1, x, y, src, dst, seed=7)
    np.testing.assert_array_equal(y, x)


def test_transpose_through_a_swizzled_tile():
    m, n = 64, 128
    x = to_bf16(np.random.default_rng(4).standard_normal((m, n)))
    y = np.zeros((n, m), dtype=np.uint16)
    interpret(transpose_tile, (1, 2), x, y, m, n)
    np.testing.assert_array_equal(y, x.T)


def test_shared_swizzle_is_applied_to_element_offsets():
    x = np.arange(8 * 64, dtype=np.uint16).reshape(8, 64)
    same, raw = np.zeros_like(x), np.zeros_like(x)
    interpret(swizzled_roundtrip, 1, x, same, (3, 3, 3))
    np.testing.assert_array_equal(same, x)
    interpret(swizzled_roundtrip, 1, x, raw, None)               # the bytes as they lie
    sw = Swizzle(3, 3, 3)
    physical = np.zeros(8 * 64, dtype=np.uint16)
    for q in range(8 * 64):
        physical[sw(q)] = x.reshape(-1)[q]
    np.testing.assert_array_equal(raw.reshape(-1), physical)
    wrong = np.zeros_like(x)
    interpret(swizzled_roundtrip, 1, x, wrong, (2, 3, 3))         # another swizzle: garbled
    assert (wrong != x).any()
