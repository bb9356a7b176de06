"""GPU tests of the PTX backend (marker ``gpu``): each check of ptx_backend_checks.py runs in its own
process with a timeout, so a faulting or hung kernel fails one test instead of the whole run."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from layoutkit.ptx import DriverUnavailableError, device_count
from tests.gpu.ptx_backend_checks import CHECKS, SKIP

try:  # where libcuda itself is missing, cuInit raises before the root conftest can say why: skip here
    device_count()
except DriverUnavailableError as exc:
    pytest.skip(f"GPU test skipped: {exc}", allow_module_level=True)

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("ptx_backend_checks.py")
TIMEOUT_S = 180  # ptxas + module load + the kernel; the kernels themselves run in milliseconds


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_ptx_backend_on_gpu(name):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, str(SCRIPT), name], capture_output=True, text=True,
                              timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"check {name} did not finish within {TIMEOUT_S} s (a hung kernel?):\n{exc.stdout}\n{exc.stderr}")
    output = (done.stdout + done.stderr).strip()
    if done.returncode == SKIP:
        pytest.skip(output.splitlines()[-1])
    assert done.returncode == 0 and done.stdout.strip().endswith(f"PASS {name}"), output[-4000:]
