"""benchmarks/bench_launch_sources_cpu.py without a GPU: this tree's generated launch code, dumped
and loaded back, runs in the harness on its held path (the first call's lookup answered, no call
through the checked path), so that the A/B harness of the launch code keeps timing what the DSL
and the configured launcher run."""
import json
import sys

import pytest

from tests.benchmark_scripts import loaded_benchmark

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bench():
    with loaded_benchmark("bench_launch_sources_cpu.py") as module:
        yield module


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


def test_bench_launchs_tree_rows_send_the_driver_their_own_live_parameters(bench, monkeypatch, tmp_path):
    """bench_launch.py --trees on the CPU: every tree row's driver call reads, through its
    kernelParams as the driver does, the tensors' addresses and the int (a buffer freed after
    the rows were made read garbage on the H200 and crashed it)."""
    import ctypes
    import gc

    from layoutkit.ptx import Device, LoadedFunction, arguments, driver
    from layoutkit.ptx import launch as launch_module
    device = Device(0, None, None, {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
                                    "MAX_SHARED_MEMORY_PER_BLOCK": 49152})
    seen = []

    def reading_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = list((ctypes.c_void_p * 3).from_address(params))
        if None in pointers or [b - a for a, b in zip(pointers, pointers[1:])] != [8, 8]:
            seen.append(("not the pointers into one (u64, u64, u32) buffer", pointers))
        else:                  # (read only then: a freed array's garbage would crash the test)
            seen.append((ctypes.c_uint64.from_address(pointers[0]).value,
                         ctypes.c_uint64.from_address(pointers[1]).value,
                         ctypes.c_uint32.from_address(pointers[2]).value))
        return (0,)
    handle = driver.bindings().CUfunction()
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    monkeypatch.setattr(launch_module, "_torch_stream_getter", {0: 0}.get)
    monkeypatch.setattr(driver.bindings(), "cuLaunchKernel", reading_launch)
    monkeypatch.setattr(driver, "current_device", lambda: device)
    monkeypatch.setattr(driver, "device", lambda ordinal=0: device)
    monkeypatch.setattr(driver, "load_function",
                        lambda cubin, name, dev: LoadedFunction(name, dev, handle, 0, 32, 1024))
    trees = {"tree": bench.this_tree(), **bench.probe_trees(bench.this_tree())}   # the probes too
    for name, tree in trees.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(tree))
    x, y = torch.zeros(1024), torch.zeros(1024)
    with loaded_benchmark("bench_launch.py") as module:
        rows = module.tree_launchers([str(tmp_path / f"{name}.json") for name in trees], x, y, 1024)
        gc.collect()
        junk = [bytearray(b"\xff" * 24) for _ in range(20000)]   # reuses what was freed  # noqa: F841
        assert len(rows) == 2 * len(trees)
        for run in rows.values():
            seen.clear()
            run()
            assert seen == [(x.data_ptr(), y.data_ptr(), 1024)]


def test_each_probe_takes_its_part_out_and_still_launches_on_the_held_path(bench, monkeypatch):
    """The probes of bench_launch.py --trees (what each required part of the DSL launch costs):
    each differs from this tree's DSL source only where its part was, and runs held."""
    tree = bench.this_tree()
    probes = bench.probe_trees(tree)
    parts = {"probe_no_dtype_tests": ".dtype is _lk_D", "probe_no_debug_read": "_lk_os.environ._data",
             "probe_exact_signature": "**_lk_kwargs", "probe_no_kwargs_dict": "**_lk_kwargs"}
    for name, part in parts.items():
        assert part in tree["dsl"] and part not in probes[name]["dsl"]
        assert probes[name]["launcher"] == tree["launcher"]
    assert all(part not in probes["probe_none_of_the_three"]["dsl"] for part in parts.values())
    assert "*_lk_more" in probes["probe_no_kwargs_dict"]["dsl"]
    launches = []
    monkeypatch.setattr(bench, "no_op_launch", lambda *args: (launches.append(args), (0,))[1])
    rows = bench.rows(probes)
    for name in (n for n in rows if n.startswith("probe_") and "DSL" in n):
        launches.clear()
        rows[name]()                       # raises where the generated code took the checked path
        assert len(launches) == 1


def test_a_tree_the_probes_do_not_recognise_is_refused(bench):
    tree = bench.this_tree()
    with pytest.raises(ValueError, match="is not in the tree's DSL source"):
        bench.probe_trees({**tree, "dsl": tree["dsl"].replace(".dtype is", ".dtype ==")})
