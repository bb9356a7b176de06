"""benchmarks/bench_launch_sources_cpu.py without a GPU: this tree's generated launch code, dumped
and loaded back, runs in the harness on its held path (the first call's lookup answered, no call
through the checked path), so that the A/B harness of the launch code keeps timing what the DSL
and the configured launcher run."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_launch_sources_under_test",
                                                  ROOT / "benchmarks" / "bench_launch_sources_cpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_a_dump_loads_back_as_this_trees_sources(bench, tmp_path, monkeypatch):
    path = tmp_path / "tree.json"
    monkeypatch.setattr(sys, "argv", ["bench_launch_sources_cpu.py", "--dump", str(path)])
    bench.main()
    assert json.loads(path.read_text()) == bench.this_tree()
    assert "def launch(x=_lk_NO, y=_lk_NO, n=_lk_NO, /," in bench.this_tree()["dsl"]


def test_every_row_launches_on_the_held_path(bench, monkeypatch):
    launches = []
    monkeypatch.setattr(bench, "no_op_launch", lambda *args: (launches.append(args), (0,))[1])
    rows = bench.rows({"a": bench.this_tree(), "b": bench.this_tree()})
    tree_rows = [name for name in rows if name.startswith(("a:", "b:"))]
    assert len(tree_rows) == 4
    for name in tree_rows:
        launches.clear()
        rows[name]()                       # raises where the generated code took the checked path
        rows[name]()
        assert len(launches) == 2 and launches[0][1:8] == (1, 1, 1, 32, 1, 1, 0)
