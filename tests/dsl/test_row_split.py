"""recipes/_row_split.py: the work split of the forward row kernels. The heuristic's choices
hold their invariants on every (m, n) (hypothesis); every Config it can pick on issue 19's
shape grid assembles for softmax and layernorm with no spills and 16-byte accesses where n
allows; bad configs and shapes are refused by name."""
import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutkit as lk
from layoutkit.ptx import RegisterSpillWarning, assemble
from recipes import _row_split as rs
from recipes import layernorm, softmax


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 1 << 20), st.integers(1, rs.MAX_COLUMNS))
def test_the_heuristic_covers_every_row_length_within_its_budgets(m, n):
    cfg = rs.choose_config(m, n)
    cfg.check(n)                                     # every CTA of a row holds a column
    per_row = cfg.threads_per_row
    narrow = 2 if n % 8 else 1                       # narrower accesses: half the values a
    assert rs.MIN_THREADS_PER_ROW <= per_row <= narrow * rs.MAX_THREADS_PER_ROW  # thread over
    assert per_row & (per_row - 1) == 0 and cfg.threads % 32 == 0  # twice the threads a row
    assert cfg.threads <= max(rs.CTA_THREADS, per_row)
    assert cfg.values <= rs.MAX_VALUES // narrow
    assert cfg.vector == math.gcd(n, 8)             # 16-byte accesses whenever n % 8 == 0
    assert cfg.cluster == -(-n // rs.MAX_CTA_COLUMNS)
    share = -(-n // cfg.cluster)                     # a CTA's share of the row
    assert (cfg.chunks - 1) * per_row * cfg.vector < share <= cfg.columns   # fewest chunks
    assert cfg.grid(m) == -(-m // cfg.rows) * cfg.cluster


@pytest.mark.parametrize("m, rows", [(1, 2), (1000, 2), (1056, 4), (2104, 4), (2105, 8),
                                     (1 << 20, 8)])
def test_small_matrices_take_fewer_rows_per_cta(m, rows):
    # 16 threads a row (n = 1000): 8 rows fill 128 threads once the grid has 2 * 132 CTAs;
    # fewer below that, down to a warp
    cfg = rs.choose_config(m, 1000)
    assert (cfg.threads_per_row, cfg.rows) == (16, rows)


@pytest.mark.parametrize("kwargs, message", [
    ({"threads": 0, "rows": 1, "vector": 8, "chunks": 1},
     r"Config.threads = 0 must be a positive int"),
    ({"threads": 32, "rows": True, "vector": 8, "chunks": 1}, r"Config.rows = True must be"),
    ({"threads": 48, "rows": 1, "vector": 8, "chunks": 1}, r"threads must be whole warps"),
    ({"threads": 96, "rows": 1, "vector": 8, "chunks": 1}, r"threads // rows a power of two"),
    ({"threads": 64, "rows": 3, "vector": 8, "chunks": 1}, r"threads // rows a power of two"),
    ({"threads": 32, "rows": 1, "vector": 3, "chunks": 1},
     r"vector \(columns per access\) is 1, 2, 4 or 8"),
    ({"threads": 32, "rows": 1, "vector": 8, "chunks": 1, "cluster": 9}, r"cluster is at most 8"),
])
def test_bad_configs_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rs.Config(**kwargs)


@pytest.mark.parametrize("cfg, n", [
    (rs.Config(32, 1, 8, 1), 257),                  # 256 columns cannot hold 257
    (rs.Config(32, 1, 8, 1, cluster=2), 256),       # the second CTA would hold nothing
    (rs.Config(32, 1, 8, 1), 100),                  # 100 % 8: rows not aligned to 8 columns
])
def test_a_config_refuses_rows_it_does_not_split(cfg, n):
    with pytest.raises(ValueError, match=rf"does not split rows of n = {n} columns"):
        cfg.check(n)


@pytest.mark.parametrize("args, message", [
    ((4, 131073), r"the row length n = 131073 must be in 1..131072"),
    ((0, 100), r"m = 0 must be a positive int"),
    ((4, 0), r"n = 0 must be a positive int"),
    ((4, 10.0), r"n = 10.0 must be a positive int"),
    ((4, 100, lk.f32), r"dtype f32 is not supported \(bf16 only\)"),
])
def test_the_heuristic_refuses_what_no_kernel_holds(args, message):
    with pytest.raises(ValueError, match=message):
        rs.choose_config(*args)


def test_the_shape_grid_picks_distinct_configs_of_every_kind():
    found = rs.distinct_configs()
    assert {cfg.cluster for cfg in found} == {1, 2, 4, 8}
    assert any(cfg.rows > 1 for cfg in found) and any(cfg.threads == 256 for cfg in found)


@pytest.mark.parametrize("recipe", [softmax, layernorm], ids=["softmax", "layernorm"])
def test_every_config_of_the_shape_grid_assembles_without_spills(recipe):
    for cfg, (m, n) in rs.distinct_configs().items():
        ptx = recipe.ptx_for(cfg, m, n)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RegisterSpillWarning)
            usage = assemble(ptx).resources[recipe.kernel_for(cfg).name]
        assert not usage.spills and usage.stack_frame_bytes == 0, (cfg, m, n)
        if cfg.vector == 8:                          # 16-byte accesses of x and y
            staged = recipe is softmax and softmax.staged(cfg)      # (x: 16-byte copies)
            load = "cp.async.cg.shared.global" if staged else "ld.global.v4.b32"
            assert load in ptx and "st.global.v4.b32" in ptx, (cfg, m, n)


@pytest.mark.parametrize("n", [16385, 24577, 32767, 98303, 131071])
@pytest.mark.parametrize("recipe", [softmax, layernorm], ids=["softmax", "layernorm"])
def test_ragged_rows_assemble_without_spills_on_twice_the_threads(recipe, n):
    """n % 8 != 0: scalar accesses, each with its own address and predicate registers; the
    narrow-access rule halves the values a thread (layernorm at 32767 took 229 registers
    with 64)."""
    cfg = rs.choose_config(4096, n)
    assert cfg.values <= rs.MAX_VALUES // 2 and cfg.vector == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegisterSpillWarning)
        usage = assemble(recipe.ptx_for(cfg, 4096, n)).resources[recipe.kernel_for(cfg).name]
    assert not usage.spills and usage.registers <= 128, (cfg, usage.registers)
