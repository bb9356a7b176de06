"""GPU tests of the DSL's sync ops (marker ``gpu``): a two-role mbarrier ring ping-pong over many
rounds checked value by value, a debug-build wrong-parity wait that raises BarrierTimeoutError
(naming barrier, stage, parity and the source line) instead of hanging, and a 2-CTA cluster
launch with a remote mbarrier arrive and cluster_sync. Each check runs in its own process with
a timeout (a trap poisons the context; a hang must fail one test, not the session)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from layoutkit.ptx import DriverUnavailableError, device_count
from tests.gpu.dsl_sync_checks import CHECKS

try:
    device_count()
except DriverUnavailableError as exc:
    pytest.skip(f"GPU test skipped: {exc}", allow_module_level=True)

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("dsl_sync_checks.py")
TIMEOUT_S = 180


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_dsl_sync_on_gpu(name):
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
