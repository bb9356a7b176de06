"""The command line: the README's main job and the cache commands."""
from __future__ import annotations

import subprocess
import sys

from layoutkit.tools.cli import main


def test_tour_prints_and_checks_every_step_and_compiles_every_recipe(capsys):
    assert main(["tour"]) == 0
    out = capsys.readouterr().out
    assert "((2,2),3):((24,2),8)" in out
    assert "WRONG" not in out
    assert out.count("[ok]") >= 7
    assert "Recipes, assembled for sm_90a" in out
    assert "softmax: softmax n=4096:" in out and "registers" in out
    assert "gemm_hopper: gemm_Nmajor" in out


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


def test_compile_prints_resources_and_ptx(capsys):
    assert main(["compile", "softmax", "--ptx", "--resources"]) == 0
    out = capsys.readouterr().out
    assert ".target sm_90a" in out and "ResourceUsage(" in out


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
