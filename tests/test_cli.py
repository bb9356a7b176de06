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
