"""GPU tests of the PTX backend (marker ``gpu``): each check of ptx_backend_checks.py runs in its own
process with a timeout, so a faulting or hung kernel fails one test instead of the whole run."""
from pathlib import Path

import pytest

from tests.gpu.gpu_only import require_gpu, run_check
from tests.gpu.ptx_backend_checks import CHECKS, SKIP

require_gpu()

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("ptx_backend_checks.py")
TIMEOUT_S = 180  # ptxas + module load + the kernel; the kernels themselves run in milliseconds


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_ptx_backend_on_gpu(name):
    run_check(SCRIPT, name, TIMEOUT_S, skip_code=SKIP)
