"""The sm_80 matrix path on the CPU interpreter: one mma.sync fed by cp.async + ldmatrix is
exact, ragged cp.async zero-fills, the mma_gemm recipe matches float64 on ragged shapes and
both B layouts with race checking on, and a pipeline that reads a stage before waiting for
its copies is a RaceError at the read's line (the static check refuses it first: the exact
diagnostic is in tests/misuse/test_cp_async_protocol.py)."""
import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import RaceError, from_bf16, interpret, to_bf16
from layoutkit.tools.recipe_runner import load_recipe

from . import source_lines
from .mma_kernels import ATOMS, COPY_MK, one_mma, ragged_copy

gemm = load_recipe("recipes/mma_gemm.py")


@pytest.mark.parametrize("kmajor", [False, True])
def test_one_mma_is_exact(kmajor):
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float32)
    b = rng.integers(-4, 5, (16, 8)).astype(np.float32)
    c = np.full((16, 8), np.nan, np.float32)
    interpret(one_mma, 1, to_bf16(a), to_bf16(b.T.copy() if kmajor else b), c, kmajor)
    assert np.array_equal(c, a @ b)


@pytest.mark.parametrize("m, n", [(20, 32), (5, 21)])
def test_ragged_copy_zero_fills_and_copies(m, n):
    x = to_bf16(np.random.default_rng(m).standard_normal((m, n)))
    y = np.zeros_like(x)
    interpret(ragged_copy, 1, x, y, m, n)
    rows, cols = min(m, 16), min(n, 16)
    assert np.array_equal(y[:rows, :cols], x[:rows, :cols])
    assert not y[rows:].any() and not y[:, cols:].any()


# one full tile (every warp's fragments stored) in one k step; K-major B over two column tiles
# and a ragged k step after a full one (the ragged N-major (40, 72, 40) over two k steps and
# K-major (33, 20, 24) problems: mma_gemm.check_cpu, which tests/dsl/interpreter/
# test_recipes_cpu.py runs)
@pytest.mark.parametrize("m, n, k, kmajor", [(128, 128, 32, False), (33, 130, 48, True)])
def test_gemm_recipe_matches_float64(m, n, k, kmajor):
    rng = np.random.default_rng(m + n + k)
    a = to_bf16(rng.standard_normal((m, k)))
    b = to_bf16(rng.standard_normal((k, n)))
    want = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    c = np.zeros((m, n), np.uint16)
    kernel, grid, constexprs = gemm._launch_args(m, n, gemm.DEFAULT, kmajor)
    interpret(kernel, grid, a, b.T.copy() if kmajor else b, c, m, n, k, **constexprs)
    err = np.abs(from_bf16(c) - want).max() / np.abs(want).max()
    assert err < 2 ** -7


@lk.kernel(num_warps=1)
def reads_before_waiting(a: lk.Pointer[lk.bf16], c: lk.Pointer[lk.f32]):
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    lk.sm80.cp_async(s.partition(COPY_MK), lk.global_tensor(a, Layout((16, 16), (16, 1)))
                     .partition(COPY_MK))
    lk.sm80.cp_async_commit()
    frag = lk.sm80.ldmatrix(s.partition(ATOMS.a))  # TOO EARLY
    lk.sm80.cp_async_wait(0)
    lk.store(lk.global_tensor(c, Layout((16, 16), (16, 1))).partition(ATOMS.a),
             lk.cast(frag, lk.f32))


def test_reading_a_stage_before_its_wait_is_a_race():
    a = to_bf16(np.ones((16, 16)))
    with pytest.raises(lk.ProtocolError, match="cp.async: threads 0-31 reads"):
        interpret(reads_before_waiting, 1, a, np.zeros((16, 16), np.float32))
    with lk.protocol_check_skipped(), \
            pytest.raises(RaceError, match="which the cp.async issued at line") as info:
        interpret(reads_before_waiting, 1, a, np.zeros((16, 16), np.float32))
    assert info.value.location.line == source_lines.line_of(__file__, "# TOO EARLY")
