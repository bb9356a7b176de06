"""Assemble PTX text with ptxas for tests (local helper until layoutkit.ptx.assemble lands).

`assemble(ptx)` runs ptxas -arch=<target> on the text and returns its stderr (warnings/info);
on failure it raises AssertionError with ptxas's messages and the numbered PTX.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def find_ptxas() -> str | None:
    wheel = Path(sys.prefix) / "lib"
    for candidate in sorted(wheel.glob("python3*/site-packages/nvidia/cu13/bin/ptxas")):
        return str(candidate)
    for candidate in ("/usr/local/bin/ptxas", shutil.which("ptxas")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


PTXAS = find_ptxas()
requires_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not found")


def assemble(ptx: str, arch: str = "sm_90a") -> str:
    """Assemble `ptx` for `arch`; return ptxas's stderr, or fail with its errors."""
    assert PTXAS is not None, "ptxas not found"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run([PTXAS, f"-arch={arch}", "-o", str(Path(tmp) / "k.cubin"), str(src)],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        numbered = "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(ptx.splitlines()))
        raise AssertionError(f"ptxas failed:\n{proc.stderr}\n{numbered}")
    return proc.stderr
