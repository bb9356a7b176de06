"""The command line: the README's main job and the cache commands."""
from __future__ import annotations

import re
import subprocess
import sys

from layoutkit.tools.cli import main


def test_tour_prints_and_checks_every_step_and_compiles_the_recipes(capsys, monkeypatch):
    """The steps, then a recipe assembled for real (softmax: the others' default
    specializations are assembled by their own tests, see the next two tests)."""
    from layoutkit.tools import recipe_runner
    monkeypatch.setattr(recipe_runner, "recipe_names", lambda: ["softmax"])
    assert main(["tour"]) == 0
    out = capsys.readouterr().out
    assert "((2,2),3):((24,2),8)" in out
    assert "WRONG" not in out
    assert out.count("[ok]") >= 7
    assert "Recipes, assembled for sm_90a" in out
    assert re.search(r"softmax: softmax n=4096: \d+ registers, \d+ B dynamic smem, 0 B spilled",
                     out)


def test_tour_compiles_every_recipe_in_order(capsys, monkeypatch):
    from layoutkit.tools import recipe_runner

    class Compiled:
        def __init__(self, name):
            self.recipe, self.name = name, f"{name}_default"

        def resource_line(self):
            return "(resources)"
    names = recipe_runner.recipe_names()
    assert "gemm_hopper" in names and "flash_attention" in names
    monkeypatch.setattr(recipe_runner, "compile_recipe", lambda name: [Compiled(name)])
    assert main(["tour"]) == 0
    out = capsys.readouterr().out
    listed = re.findall(r"^   (\w+): \1_default: \(resources\)$", out, re.MULTILINE)
    assert listed == names


def test_every_recipes_default_specializations_are_assembled_by_a_test():
    """What the tour's compile step does for each recipe, each recipe's test file does (with
    its own checks of the PTX and resources): its compile_default() assembled for sm_90a."""
    from pathlib import Path

    from layoutkit.tools.recipe_runner import recipe_names
    files = [path.read_text() for path in (Path(__file__).parent / "dsl").glob("test_recipe*.py")]
    for name in recipe_names():
        loads = re.compile(rf'load_recipe\("(recipes/)?{name}(\.py)?"\)|'
                           rf'from recipes import {name}\b')
        assert any(loads.search(text) and "compile_default()" in text and "assemble(" in text
                   for text in files), f"no tests/dsl/test_recipe*.py assembles {name}'s defaults"


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(tmp_path))
    assert main(["cache", "info"]) == 0
    assert str(tmp_path) in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 0 cached cubin(s)" in capsys.readouterr().out


def test_python_dash_m_runs_the_same_cli():
    done = subprocess.run([sys.executable, "-m", "layoutkit", "--help"], capture_output=True,
                          text=True, check=True)
    assert "layoutkit tour" in done.stdout


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]   # columns, spaces collapsed


def test_compile_prints_resources_and_ptx(capsys):
    assert main(["compile", "softmax", "--ptx", "--resources"]) == 0
    out = capsys.readouterr().out
    assert ".target sm_90a" in out and "ResourceUsage(" not in out
    block = out[out.index("== softmax: softmax n=4096:"):out.index("== softmax: softmax n=8192:")]
    lines = _lines(block)
    assert "directives .reqntid 128, 1, 1" in lines
    assert "roles none (every warp keeps the entry registers)" in lines
    assert "shared 32 B dynamic in 2 buffers; 0 B static (ptxas)" in lines
    assert "mbarriers none" in lines and "ptxas notes none" in lines
    assert any(line.startswith("registers ") and line.endswith(" per thread at entry (ptxas)")
               for line in lines)
    # the two reduction buffers: name, offset, bytes, align, what made them, the recipe's line
    assert "buffer offset bytes align made by at" in lines
    assert any(line.startswith("smem0 0 16 16 lk.reduce_max softmax.py:") for line in lines)
    assert any(line.startswith("smem1 16 16 16 lk.reduce_sum softmax.py:") for line in lines)
    assert "total 32" in lines


def test_compile_resources_of_the_warp_specialized_gemm(capsys):
    """gemm_hopper's report: the role budgets after setmaxnreg, every shared buffer (the
    224 KiB of tiles and barriers ptxas never sees), the mbarrier rings, the cluster."""
    assert main(["compile", "gemm_hopper", "--resources"]) == 0
    out = capsys.readouterr().out
    first = out.split("\n== ")[0]
    assert first.startswith("== gemm_hopper: gemm_Nmajor_128x256x64_s4_c2: ")
    assert "229448 B dynamic smem" in first.splitlines()[0]
    lines = _lines(first)
    assert "entry gemm_body (sm_90a)" in lines
    assert "directives .reqntid 384, 1, 1; .minnctapersm 1; .reqnctapercluster 2, 1, 1" in lines
    assert "shared 229448 B (224.1 KiB) dynamic in 6 buffers; 0 B static (ptxas)" in lines
    assert "mbarriers 9 in 3 arrays" in lines
    assert any(line.startswith("barriers ") and line.endswith("named barrier ids 1, 2")
               for line in lines)
    assert "spills none; stack frame 0 B" in lines
    assert "role warpgroups threads registers setmaxnreg regs x threads" in lines
    assert "producer 0 128 40 dec 5120" in lines
    assert "consumer0 1 128 232 inc 29696" in lines
    assert "consumer1 2 128 232 inc 29696" in lines
    assert "total 384 64512" in lines
    for row in ("sB 0 131072 1024 lk.shared_tensor _gemm_kernel.py:",
                "sA 131072 65536 1024 lk.shared_tensor _gemm_kernel.py:",
                "sC 196608 32768 1024 lk.shared_tensor _gemm_kernel.py:",
                "full 229376 32 8 lk.sm90.mbarrier_array _gemm_kernel.py:",
                "empty 229408 32 8 lk.sm90.mbarrier_array _gemm_kernel.py:",
                "finished 229440 8 8 lk.sm90.mbarrier_array _gemm_kernel.py:"):
        assert any(line.startswith(row) for line in lines), row
    assert "total 229448" in lines
    assert "mbarrier array stages arrivals per phase" in lines
    assert {"full 4 1", "empty 4 16", "finished 1 16"} <= set(lines)
    assert "== gemm_hopper: gemm_Kmajor_128x256x64_s4_c2: " in out


def test_resource_table_columns_line_up(capsys):
    """Each table's columns start at the same place on every row: numbers right-aligned,
    names left-aligned."""
    from layoutkit.tools.resource_report import table
    rows = table(("buffer", "offset", "bytes", "made by"),
                 [("sB", 0, 131072, "lk.shared_tensor"), ("full", 229376, 32, "mbarrier")], "")
    assert rows == ["buffer  offset   bytes  made by",
                    "sB           0  131072  lk.shared_tensor",
                    "full    229376      32  mbarrier"]


def test_resources_of_ptx_without_ir_say_what_is_unknown(tmp_path, capsys):
    """A recipe returning PTX text that no Kernel.specialize made: ptxas's facts only."""
    recipe = tmp_path / "raw_ptx.py"
    recipe.write_text("def compile_default():\n"
                      "    return {'k': '.version 8.0\\n.target sm_90a\\n.address_size 64\\n'\n"
                      "                 '.visible .entry k()\\n.maxntid 64, 1, 1\\n{\\nret;\\n}\\n'}\n")
    assert main(["compile", str(recipe), "--resources"]) == 0
    lines = _lines(capsys.readouterr().out)
    assert lines[0].startswith("== raw_ptx: k: ") and "B static smem" in lines[0]
    assert "directives .maxntid 64, 1, 1" in lines
    assert ("shared 0 B static (ptxas); dynamic unknown: this PTX was not made by "
            "Kernel.specialize (no IR)") in lines


def test_default_specializations_carry_their_ir_and_phase_timings():
    from layoutkit.tools.recipe_runner import compile_recipe, default_specializations
    found = default_specializations("softmax")
    assert [d.name for d in found][:2] == ["softmax n=1024", "softmax n=4096"]
    for d in found:
        assert d.specialization is not None and d.specialization.ptx == d.ptx
        assert set(d.specialization.timings) >= {"trace", "verify", "check", "lower"}
        assert all(t >= 0 for t in d.specialization.timings.values())
    compiled = compile_recipe("softmax")[0]
    assert compiled.cubin is compiled.specialization.cubin
    assert compiled.specialization.timings["ptxas"] >= 0


def test_unknown_recipe_is_a_clear_error(capsys):
    assert main(["compile", "no_such_recipe"]) == 2
    err = capsys.readouterr().err
    assert "recipe 'no_such_recipe': not a module of the recipes package" in err
    assert "softmax" in err          # lists what there is


def test_a_file_without_the_recipe_protocol_is_refused(tmp_path, capsys):
    bad = tmp_path / "not_a_recipe.py"
    bad.write_text("x = 1\n")
    assert main(["compile", str(bad)]) == 2
    assert "defines no compile_default()" in capsys.readouterr().err


def test_tour_without_a_gpu_says_the_recipes_were_not_run(capsys, monkeypatch):
    from layoutkit.tools import recipe_runner, tour
    monkeypatch.setattr(tour, "_compile_recipes", lambda out: True)   # (tested above)
    monkeypatch.setattr(recipe_runner, "gpu_present", lambda: False)
    assert main(["tour"]) == 0
    assert "No GPU here: the recipes were assembled, not run" in capsys.readouterr().out


def test_tour_on_a_gpu_checks_benchmarks_and_prints_one_table(capsys, monkeypatch, tmp_path):
    from layoutkit.tools import recipe_runner
    recipe = tmp_path / "fake.py"
    recipe.write_text("def compile_default():\n    return {}\n"
                      "def check():\n    return 0.001\n"
                      "def benchmark():\n    return [{'m': 4, 'n': 8, 'speedup': 1.5}]\n")
    monkeypatch.setattr(recipe_runner, "gpu_present", lambda: True)
    monkeypatch.setattr(recipe_runner, "recipe_names", lambda: [str(recipe)])
    from layoutkit.tools import tour
    monkeypatch.setattr(tour, "_compile_recipes", lambda out: True)   # (tested above)
    assert main(["tour"]) == 0
    out = capsys.readouterr().out
    assert "check: worst relative error 0.001" in out
    assert out.rstrip().endswith("fake    m=4 n=8                   1.50")


def test_run_cpu_runs_the_interpreter_check(capsys):
    assert main(["run", "softmax", "--cpu"]) == 0
    assert "check on the CPU interpreter (seed 0): worst relative error" in capsys.readouterr().out


def test_run_cpu_needs_check_cpu(tmp_path, capsys):
    recipe = tmp_path / "no_cpu.py"
    recipe.write_text("def compile_default():\n    return {}\n")
    assert main(["run", str(recipe), "--cpu"]) == 2
    assert "defines no check_cpu()" in capsys.readouterr().err


def test_summary_rows_need_a_ratio():
    import pytest

    from layoutkit.tools.recipe_runner import RecipeError, summarize
    assert summarize("t", [{"case": "x", "vs_copy": 0.9}])[0].ratio == 0.9
    with pytest.raises(RecipeError, match="none of"):
        summarize("t", [{"case": "x"}])


def test_a_recipes_helper_module_is_no_recipe(capsys):
    """recipes/_<name>.py holds a recipe's helpers: listed nowhere, refused by `run`,
    importable as a module of the recipes package."""
    from layoutkit.tools.recipe_runner import recipe_names
    assert [name for name in recipe_names() if name.startswith("_")] == []
    assert "flash_attention" in recipe_names()
    assert main(["run", "_flash_attention_kernel", "--cpu"]) == 2
    assert "not a module of the recipes package" in capsys.readouterr().err
    from recipes import _flash_attention_kernel
    assert _flash_attention_kernel.attention_kernel.name == "attention_body"


def test_recipes_import_from_any_working_directory(tmp_path, monkeypatch):
    """The recipes package is found by import, not through a path relative to the cwd."""
    monkeypatch.chdir(tmp_path)
    from layoutkit.tools.recipe_runner import load_recipe
    assert load_recipe("softmax").__name__ == "recipes.softmax"
