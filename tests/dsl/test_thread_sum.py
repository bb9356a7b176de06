"""lk.thread_sum: each thread's own partial along a mode, no shuffles; lk.reduce_sum of it is
lk.reduce_sum of the tensor (same layout, same sums) for lane-spread and warp-spread rows."""
import numpy as np
import pytest

import layoutkit as lk
import layoutkit.dsl as dsl
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import interpret
from layoutkit.dsl.lang.ownership import plan_reduction
from layoutkit.dsl.lang.reduce import _partial_layout


@pytest.mark.parametrize("n", [64, 128, 176])
def test_partial_of_a_wgmma_accumulator_is_one_column_per_quad_lane(n):
    tv = lk.sm90.wgmma_accumulator_layout(n)
    plan = plan_reduction(tv, 1)
    partial = _partial_layout(tv, plan, 1, "test")
    assert partial.tile == (64, 4) and partial.num_values == 2
    for t in range(128):            # thread t: rows 16 warp + lane/4 (+8), column lane % 4
        lane, warp = t % 32, t // 32
        row = 16 * warp + lane // 4
        assert [partial.layout(t, v) for v in range(2)] == [row + 64 * (lane % 4),
                                                            row + 8 + 64 * (lane % 4)]
    assert plan_reduction(partial, 1).layout == plan.layout


@dsl.kernel(num_warps=8)
def partial_row_sums(x: dsl.Pointer[dsl.f32], out: dsl.Pointer[dsl.f32], m: dsl.i32,
                     n: dsl.i32, ROWS: dsl.constexpr, K: dsl.constexpr, STEPS: dsl.constexpr):
    """out[r] = sum of row r, kept per thread over STEPS halvings (l = l * 0.5 + partial, as a
    softmax's running sum) and reduced once: ROWS rows per block, K columns per thread."""
    P = 256 // ROWS
    tv = dsl.TVLayout((ROWS, P * K), Layout(((P, ROWS), K), ((ROWS * K, 1), ROWS)))
    X = dsl.global_tensor(x, Layout((m, n), (n, 1))).tile(tv.tile, (dsl.block_id(0), 0))
    v = dsl.load(X.partition(tv), other=0.0)
    total = dsl.thread_sum(v, 1)
    for _ in range(STEPS):
        total = total * 0.5 + dsl.thread_sum(v, 1)
    total = dsl.reduce_sum(total, 1)
    assert total.layout == plan_reduction(tv, 1).layout         # reduce_sum(v, 1)'s layout
    out_tv = dsl.TVLayout((ROWS, 1), total.layout.layout)
    Y = dsl.global_tensor(out, Layout((m, 1), (1, 1))).tile((ROWS, 1), (dsl.block_id(0), 0))
    dsl.store(Y.partition(out_tv), dsl.RegisterTensor(dsl.f32, out_tv, total.values))


@pytest.mark.parametrize("rows, k", [(8, 4), (1, 4)], ids=["lanes", "warps"])
def test_reduced_partials_are_the_row_sums(rows, k):
    m, n, steps = rows * 2, 256 * k // rows - 3, 2
    x = np.random.default_rng(4).standard_normal((m, n)).astype(np.float32)
    out = np.zeros(m, np.float32)
    interpret(partial_row_sums, 2, x, out, m, n, rows, k, steps, seed=3)
    np.testing.assert_allclose(out, x.sum(axis=1) * sum(0.5 ** s for s in range(steps + 1)),
                               rtol=1e-5, atol=1e-5)


def test_the_loop_has_no_shuffles_until_the_final_reduction():
    F = dsl.Pointer[dsl.f32]
    ptx = partial_row_sums.ptx(F, F, 100, 1000, ROWS=8, K=2, STEPS=3)
    assert ptx.count("shfl.sync.bfly") == 5            # 32 lanes per row: one 5-step tree


@dsl.kernel(num_warps=1)
def thread_sum_of_bf16(x: dsl.Pointer[dsl.f32]):
    dsl.thread_sum(dsl.full(dsl.tv_layout(Layout(32), Layout(2)), 1.0, dsl.bf16), 0)  # BF16


def test_a_bf16_tensor_is_refused():
    with pytest.raises(dsl.TraceError, match=r"lk.thread_sum: sums an f32 register tensor"):
        thread_sum_of_bf16.ptx(dsl.Pointer[dsl.f32])
