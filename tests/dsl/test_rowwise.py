"""recipes/_rowwise_kernel.py and recipes/_rowwise.py on the CPU: the work split's invariants on
every row length (hypothesis) and its worked cases, the layouts reductions and broadcasts agree
with, the column sum of partials on the interpreter, and the benchmark table's format."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import layoutkit as lk
from recipes import _rowwise as rw
from recipes import _row_split as rs
from recipes import _rowwise_kernel as rk


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 131072), itemsize=st.sampled_from([2, 4]),
       values=st.sampled_from([8, 16, 32, 64]), threads=st.sampled_from([256, 512, 1024]),
       cta=st.sampled_from([128, 1024]))
def test_split_covers_every_row_length_within_its_budgets(n, itemsize, values, threads, cta):
    longest = rs.MAX_CLUSTER * threads * max(values, 16 // itemsize)
    if n > longest:
        with pytest.raises(ValueError, match=r"row length n = \d+ must be an int in 1\.\."):
            rs.split(n, itemsize, values, cta, "t", threads)
        return
    s = rs.split(n, itemsize, values, cta, "t", threads)
    assert s.P & (s.P - 1) == 0 and 8 <= s.P <= threads         # XOR-reducible threads
    assert (s.P * s.ROWS) % 32 == 0 and s.P * s.ROWS <= 1024    # whole warps, one CTA
    assert s.C * itemsize <= 16 and s.C * s.K <= max(values, 16 // itemsize)
    assert s.CLUSTER <= rs.MAX_CLUSTER and (s.CLUSTER == 1 or s.ROWS == 1)
    assert (s.CLUSTER - 1) * s.cols < n <= s.CLUSTER * s.cols   # no CTA of a cluster idle
    part = -(-n // s.CLUSTER)                                   # the columns of one CTA
    assert s.cols < part + s.P * s.C                            # K as small as covers them
    assert s.P == 8 or s.P // 2 * values < part                 # P: the fewest that hold it
    assert s.VEC == math.gcd(n, s.C)


@pytest.mark.parametrize("n, itemsize, expect", [
    (7, 2, rs.RowSplit(P=8, ROWS=16, C=1, K=1, CLUSTER=1, VEC=1)),
    (1000, 2, rs.RowSplit(P=64, ROWS=2, C=8, K=2, CLUSTER=1, VEC=8)),
    (3000, 2, rs.RowSplit(P=256, ROWS=1, C=8, K=2, CLUSTER=1, VEC=8)),
    (16384, 2, rs.RowSplit(P=1024, ROWS=1, C=8, K=2, CLUSTER=1, VEC=8)),
    (16385, 2, rs.RowSplit(P=1024, ROWS=1, C=8, K=2, CLUSTER=2, VEC=1)),   # CTA 1: 1 column
    (131072, 4, rs.RowSplit(P=1024, ROWS=1, C=4, K=4, CLUSTER=8, VEC=4))])
def test_split_worked_cases(n, itemsize, expect):
    assert rs.split(n, itemsize, 16, 128, "t") == expect


def test_small_m_spreads_rows_over_more_ctas():
    wide = rs.split(100, 2, 64, 128, "t", 256)
    assert wide.ROWS == 16
    narrow = rs.split(100, 2, 64, 128, "t", 256, m=64, target_ctas=264)
    assert narrow.ROWS == 4 and narrow.P * narrow.ROWS == 32       # never below a warp


def test_row_scalar_layout_is_the_reduced_layout():
    for P, ROWS in ((8, 16), (32, 4), (256, 1)):
        tv = rk.row_layout(P, ROWS, 8, 2)

        @lk.kernel(num_warps=P * ROWS // 32)
        def probe(x: lk.Pointer[lk.f32]):
            v = lk.load(lk.global_tensor(x, lk.Layout((ROWS, tv.tile[1]), (tv.tile[1], 1)))
                        .partition(tv))
            total = lk.reduce_sum(v, 1)
            assert total.layout == rk.row_scalar_layout(P, ROWS), (total.layout, P, ROWS)
            lk.broadcast(total, tv)
        probe.ir(lk.Pointer[lk.f32])


@pytest.mark.parametrize("batches, rows, n, warps", [(1, 5, 300, 2), (2, 3, 129, 1)])
def test_column_sum_adds_the_partials_of_each_column(batches, rows, n, warps):
    rng = np.random.default_rng(rows)
    partial = rng.standard_normal((batches, rows, n)).astype(np.float32)
    out = rw.host_array(np.zeros((batches, n)), lk.bf16)
    kernel, grid, constexprs = rk.column_sum_launch(lk.bf16, batches, rows, n, warps)
    got = rw.run_on_cpu([(kernel, grid, (partial, out, batches, rows, n), constexprs)],
                        {"out": out})["out"]
    want = partial.astype(np.float64).sum(axis=1)
    assert rw.relative_to_max(rw.float64_of(got, lk.bf16), want) <= 2 ** -8


def test_column_sum_assembles_without_spills():
    import warnings

    from layoutkit.ptx import assemble
    kernel, _, constexprs = rk.column_sum_launch(lk.f32, 2, 528, 65536)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx = kernel.ptx(lk.Pointer[lk.f32], lk.Pointer[lk.f32], 2, 528, 65536, **constexprs)
        assert assemble(ptx).resources[kernel.name].spill_store_bytes == 0
    assert ptx.count("ld.global.v4.f32") == constexprs["STEPS"] == 17   # loads all in flight


def test_markdown_table_shows_ratios_and_skipped_peers():
    rows = [{"op": "rmsnorm fwd", "m": 4096, "n": 4096, "dtype": "bfloat16",
             "layoutkit_ms": 0.02, "layoutkit_gbps": 3000.0, "torch_ms": 0.04,
             "torch_gbps": 1500.0, "clone_ms": 0.02, "clone_gbps": 3200.0}]
    table = rw.markdown_table(rows, {"quack": "quack.rmsnorm not importable (no pack)"})
    assert table.splitlines()[0] == ("| op | shape | dtype | layoutkit GB/s | torch GB/s | "
                                     "clone GB/s | vs quack | vs best torch | vs clone |")
    assert "| rmsnorm fwd | 4096x4096 | bfloat16 | 3000 | 1500 | 3200 | - | 2.00 | 0.94 |" \
        in table
    assert table.endswith("quack skipped: quack.rmsnorm not importable (no pack)")


def test_markdown_table_with_fixed_columns_prints_row_by_row():
    row = {"op": "softmax bwd", "m": 7, "n": 3000, "dtype": "bfloat16", "layoutkit_gbps": 900.0,
           "quack_gbps": 1000.0, "clone_gbps": 1200.0}
    columns = ("layoutkit", "quack", "torch", "clone")
    header = rw.markdown_table([], {}, columns).splitlines()
    assert header[0] == ("| op | shape | dtype | layoutkit GB/s | quack GB/s | torch GB/s | "
                         "clone GB/s | vs quack | vs best torch | vs clone |")
    assert len(header) == 2 and header[1].count("---:") == 7
    assert rw.markdown_table([row], {}, columns, header=False) == \
        "| softmax bwd | 7x3000 | bfloat16 | 900 | 1000 | - | 1200 | 0.90 | - | 0.75 |"
