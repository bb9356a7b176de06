"""GPU tests of the DSL's sync ops (marker ``gpu``): a two-role mbarrier ring ping-pong over many
rounds checked value by value, a debug-build wrong-parity wait that raises BarrierTimeoutError
(naming barrier, stage, parity and the source line) instead of hanging, and a 2-CTA cluster
launch with a remote mbarrier arrive and cluster_sync. Each check runs in its own process with
a timeout (a trap poisons the context; a hang must fail one test, not the session)."""
from pathlib import Path

import pytest

from tests.gpu.gpu_only import require_gpu, run_check
from tests.gpu.dsl_sync_checks import CHECKS

require_gpu()

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("dsl_sync_checks.py")
TIMEOUT_S = 180


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_dsl_sync_on_gpu(name):
    run_check(SCRIPT, name, TIMEOUT_S)
