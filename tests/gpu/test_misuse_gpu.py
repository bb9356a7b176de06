"""Misuse cases only the hardware can show (marker ``gpu``): a debug build's bounded wait turns
the hang into BarrierTimeoutError naming the barrier and the source line. Each check runs in
its own process with a timeout (tests/gpu/misuse_checks.py)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from layoutkit.ptx import DriverUnavailableError, device_count
from tests.gpu.misuse_checks import CHECKS

try:
    device_count()
except DriverUnavailableError as exc:
    pytest.skip(f"GPU test skipped: {exc}", allow_module_level=True)

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("misuse_checks.py")
TIMEOUT_S = 180


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_misuse_on_gpu(name):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPT.parents[2]),
                                                       os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, str(SCRIPT), name], capture_output=True,
                              text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"check {name} did not finish within {TIMEOUT_S} s (a hung kernel?):\n"
                    f"{exc.stdout}\n{exc.stderr}")
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 0 and done.stdout.strip().endswith(f"PASS {name}"), output[-4000:]
