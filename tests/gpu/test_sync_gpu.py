"""GPU tests of layoutkit.sync (marker ``gpu``): a correct 2-stage ring completes (release and
debug builds) and a wrong-parity bounded wait raises the decoded BarrierTimeoutError instead of
hanging. Each check runs in its own process with a timeout (a trap poisons the context; a hang
must fail one test, not the session)."""
from pathlib import Path

import pytest

from tests.gpu.gpu_only import require_gpu, run_check
from tests.gpu.sync_checks import CHECKS

require_gpu()

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("sync_checks.py")
TIMEOUT_S = 120


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_sync_on_gpu(name):
    run_check(SCRIPT, name, TIMEOUT_S)
