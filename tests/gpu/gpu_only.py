"""What every GPU test module shares: the module-level skip (saying why) where the driver sees
no GPU, and running one check script per process (a trapped kernel, e.g. a debug build's
bounded wait giving up, poisons its CUDA context, so each check gets a fresh one)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from layoutkit.ptx import DriverUnavailableError, device_count

REPO = Path(__file__).resolve().parents[2]


def require_gpu() -> None:
    """Skip the calling test module, with the driver's reason, unless a GPU is usable."""
    try:  # where libcuda is missing, cuInit raises before the root conftest can say why
        device_count()
    except DriverUnavailableError as exc:
        pytest.skip(f"GPU test skipped: {exc}", allow_module_level=True)


def run_check(script: Path, name: str, timeout_s: int, skip_code: int | None = None) -> None:
    """Run `python script name` from the repository; fail unless it exits 0 and its stdout ends
    with `PASS name` (skip when it exits with `skip_code`, giving its last line as reason)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, str(script), name], capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"check {name} did not finish within {timeout_s} s (a hung kernel?):\n"
                    f"{exc.stdout}\n{exc.stderr}")
    output = (done.stdout + done.stderr).strip()
    if skip_code is not None and done.returncode == skip_code:
        pytest.skip(output.splitlines()[-1])
    assert done.returncode == 0 and done.stdout.strip().endswith(f"PASS {name}"), output[-4000:]
