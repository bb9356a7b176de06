"""benchmarks/bench_rows.py's control flow without a GPU: the grids, --shapes, and the entry-point
tables printed row by row (a shape that raises prints a failed row and the run goes on)."""
import sys
import types

import pytest

from tests.benchmark_scripts import loaded_benchmark


@pytest.fixture(scope="module")
def bench_rows():
    with loaded_benchmark("bench_rows.py") as module:
        yield module


def test_the_full_grid_is_issue_19s_and_quick_is_inside_it(bench_rows):
    full = bench_rows.GRIDS["full"]
    assert len(full) == 40 == len(set(full))
    assert {m for m, _ in full} == {1, 7, 1000, 4096, 32768}
    assert {n for _, n in full} == {1000, 3000, 4096, 8192, 16384, 32768, 65536, 131072}
    assert set(bench_rows.GRIDS["quick"]) <= set(full)


def test_shape_list(bench_rows):
    assert bench_rows.shape_list("4096x131072, 7X3000") == ((4096, 131072), (7, 3000))
    for bad in ("4096", "0x5", "4x-1", "ax3", ""):
        with pytest.raises(ValueError, match="is not MxN"):
            bench_rows.shape_list(bad)


def test_an_entry_point_table_streams_rows_and_survives_a_failing_shape(bench_rows, monkeypatch,
                                                                       capsys):
    def benchmark_rows(shapes, reps, torch_compile):
        ((m, n),) = shapes
        assert reps == bench_rows.ENTRY_POINT_REPS and torch_compile is False
        if n == 3000:
            raise RuntimeError("CUDA out of memory")
        row = {"op": "fake bwd", "m": m, "n": n, "dtype": "bfloat16", "layoutkit_gbps": 900.0,
               "quack_gbps": 1000.0 if n == 1000 else 450.0, "clone_gbps": 1200.0}
        return [row], {f"torch (fake bwd {m}x{n})": "ValueError: refused"}
    fake = types.ModuleType("recipes.fake_rows")
    fake.benchmark_rows = benchmark_rows
    monkeypatch.setitem(sys.modules, "recipes.fake_rows", fake)
    emptied = []
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(empty_cache=lambda: emptied.append(1)))
    bench_rows.run_entry_point("fake_rows", [(7, 1000), (7, 3000), (7, 4096)], torch)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| op | shape | dtype | layoutkit GB/s | quack GB/s | torch GB/s")
    assert lines[1] == "| fake bwd | 7x1000 | bfloat16 | 900 | 1000 | - | 1200 | 0.90 | - | 0.75 |"
    assert lines[2] == "| fake_rows | 7x3000 | failed: RuntimeError: CUDA out of memory |"
    assert lines[3].startswith("| fake bwd | 7x4096 | bfloat16 | 900 | 450 |")
    assert "fake bwd vs quack: geometric mean 1.34, 1/2 shapes >= 1.00, worst 0.90 at 7x1000" in out
    assert "- torch: ValueError: refused (7x1000, 7x4096)" in out
    assert len(emptied) == 3
