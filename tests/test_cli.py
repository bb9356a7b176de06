"""The command line: the README's main job and the cache commands."""
from __future__ import annotations

import subprocess
import sys

from layoutkit.cli import main


def test_tour_prints_and_checks_every_step(capsys):
    assert main(["tour"]) == 0
    out = capsys.readouterr().out
    assert "((2,2),3):((24,2),8)" in out
    assert "WRONG" not in out
    assert out.count("[ok]") >= 7


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


def test_tour_compiles_every_recipe(capsys):
    assert main(["tour"]) == 0
    out = capsys.readouterr().out
    assert "Recipes, assembled for sm_90a" in out
    assert "softmax: softmax n=4096:" in out and "registers" in out


def test_compile_prints_resources_and_ptx(capsys):
    assert main(["compile", "softmax", "--ptx", "--resources"]) == 0
    out = capsys.readouterr().out
    assert ".target sm_90a" in out and "ResourceUsage(" in out


def test_unknown_recipe_is_a_clear_error(capsys):
    assert main(["compile", "no_such_recipe"]) == 2
    err = capsys.readouterr().err
    assert "recipe 'no_such_recipe': no file recipes/no_such_recipe.py" in err
    assert "softmax" in err          # lists what there is


def test_a_file_without_the_recipe_protocol_is_refused(tmp_path, capsys):
    bad = tmp_path / "not_a_recipe.py"
    bad.write_text("x = 1\n")
    assert main(["compile", str(bad)]) == 2
    assert "defines no compile_default()" in capsys.readouterr().err
