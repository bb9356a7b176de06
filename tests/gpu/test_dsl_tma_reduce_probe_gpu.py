"""GPU checks (marker ``gpu``) of TMA facts the DSL relies on or may enable
(tests/gpu/tma_reduce_probe_checks.py), each group in its own process: the reductions PTX lists
that the DSL does not enable yet, against the interpreter's model; TMA writing the
innermost dimension in whole 16-byte chunks (why a written tensor's extent must fill them); a
TMA load zero-filling past that extent element by element."""
from pathlib import Path

import pytest

from tests.gpu.gpu_only import require_gpu, run_check
from tests.gpu.tma_reduce_probe_checks import CHECKS

require_gpu()

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("tma_reduce_probe_checks.py")
TIMEOUT_S = 40


@pytest.mark.parametrize("group", sorted(CHECKS))
def test_tma_facts_on_the_gpu(group):
    run_check(SCRIPT, group, TIMEOUT_S)
