"""Misuse cases only the hardware can show (marker ``gpu``): a debug build's bounded wait turns
the hang into BarrierTimeoutError naming the barrier and the source line. Each check runs in
its own process with a timeout (tests/gpu/misuse_checks.py)."""
from pathlib import Path

import pytest

from tests.gpu.gpu_only import require_gpu, run_check
from tests.gpu.misuse_checks import CHECKS

require_gpu()

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("misuse_checks.py")
TIMEOUT_S = 180


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_misuse_on_gpu(name):
    run_check(SCRIPT, name, TIMEOUT_S)
