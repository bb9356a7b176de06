"""`layoutkit cache info|clear` with the specialization cache, `layoutkit tune` and
`layoutkit bench` (recipe files of the test's own; the GPU sweeps themselves run on the H200)."""
import textwrap

import pytest

import layoutkit.dsl as lk
from layoutkit.ptx.cache import clear_memory
from layoutkit.tools.cli import format_rows, main

from tests.dsl import spec_cache_kernels as K

T = lk.TensorSpec(lk.f32, (4096,))


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "1")
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(tmp_path))
    clear_memory()              # cubins assembled before are written to this directory too
    return tmp_path


def test_cache_info_lists_specializations_per_kernel(cache, capsys):
    k = lk.Kernel(K.scale.fn, 4)
    k.specialize(T, T, 2.0, VALUES=4).cubin
    k.specialize(T, T, 2.0, VALUES=2).cubin
    lk.Kernel(K.reads_a_list.fn, 1).specialize(lk.TensorSpec(lk.f32, (32,))).cubin
    assert main(["cache", "info", "-v"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{cache / 'cubin'}: 3 cubins, ")
    assert lines[1].startswith(f"{cache / 'spec'}: 2 specialization(s) of 2 kernel(s), ")
    assert lines[1].endswith("bytes; the cache is on")
    assert lines[2] == "  tests.dsl.spec_cache_kernels.reads_a_list: 0 specialization(s), 0 bytes"
    assert lines[3].startswith("    not cacheable: kernel reads_a_list: global LIST_GLOBAL "
                               "(read by reads_a_list) is a list ([1, 2])")
    assert lines[4].startswith("  tests.dsl.spec_cache_kernels.scale: 2 specialization(s), ")
    assert [line.split("  (traced in")[0] for line in lines[5:]] == [
        "    x=(16):(1) y=(16):(1) a=- VALUES=2; sm_90a",
        "    x=(16):(1) y=(16):(1) a=- VALUES=4; sm_90a"] or \
        [line.split("  (traced in")[0] for line in lines[5:]] == [
        "    x=(16):(1) y=(16):(1) a=- VALUES=4; sm_90a",
        "    x=(16):(1) y=(16):(1) a=- VALUES=2; sm_90a"]


def test_cache_clear_removes_cubins_specializations_and_tuning_tables(cache, capsys):
    lk.Kernel(K.scale.fn, 4).specialize(T, T, 2.0, VALUES=4).cubin
    (cache / "autotune").mkdir()
    (cache / "autotune" / "k-0.json").write_text("{}")
    from layoutkit.ptx import code_cache
    code_cache.compiled("def f():\n    return 1\n", "<layoutkit test clear>")
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"removed 1 cached cubin(s) from {cache / 'cubin'}",
                   f"removed 1 cached specialization(s) from {cache / 'spec'} and 1 autotuning "
                   "table(s)", f"removed 1 compiled launcher(s) from {cache / 'code'}"]
    assert main(["cache", "info"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == \
        f"{cache / 'spec'}: 0 specialization(s) of 0 kernel(s), 0 bytes; the cache is on"


def recipe_file(tmp_path, body: str):
    path = tmp_path / "my_recipe.py"
    path.write_text(textwrap.dedent('''
        def compile_default():
            return {}
    ''') + textwrap.dedent(body))
    return str(path)


def test_tune_prints_the_configs_the_sweep_chose(tmp_path, capsys):
    path = recipe_file(tmp_path, '''
        def tune():
            return [{"m": 4096, "config": "BN=256, STAGES=4", "ms": 0.25},
                    {"m": 8192, "config": "BN=128, STAGES=6", "ms": 1.5}]
    ''')
    assert main(["tune", path]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "m     config            ms",
        "4096  BN=256, STAGES=4  0.25",
        "8192  BN=128, STAGES=6  1.5"]


def test_bench_prints_the_rows_and_the_ratios(tmp_path, capsys):
    path = recipe_file(tmp_path, '''
        def benchmark():
            return [{"case": "4096^3", "layoutkit ms": 0.51, "cuBLAS ms": 0.5, "speedup": 0.98}]
    ''')
    assert main(["bench", path]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "case    layoutkit ms  cuBLAS ms  speedup",
        "4096^3  0.51          0.5        0.98",
        "",
        "recipe     case    layoutkit / reference",
        "my_recipe  4096^3                   0.98"]


@pytest.mark.parametrize("command, missing", [("tune", "tune"), ("bench", "benchmark")])
def test_a_recipe_without_the_function_says_so(tmp_path, capsys, command, missing):
    assert main([command, recipe_file(tmp_path, "")]) == 2
    assert f"my_recipe.py defines no {missing}() (" in capsys.readouterr().err


def test_format_rows_fills_missing_cells():
    assert format_rows([{"a": 1}, {"b": 2.5, "a": 10}]) == "a   b\n1\n10  2.5"
