"""GPU probes (marker ``gpu``) of the TMA reductions PTX lists but the DSL does not enable yet
(layoutkit.dsl.sm90.tma.derive.HARDWARE_REDUCTIONS): each runs the hardware-against-model check
of tests/gpu/test_dsl_tma_reduce_gpu.py on one pair, in its own process (an illegal
instruction poisons the CUDA context). A pass is the evidence for enabling the pair."""
from pathlib import Path

import pytest

from tests.gpu.gpu_only import require_gpu, run_check
from tests.gpu.tma_reduce_probe_checks import PROBES

require_gpu()

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("tma_reduce_probe_checks.py")
TIMEOUT_S = 60


@pytest.mark.parametrize("probe", PROBES)
def test_a_reduction_not_yet_enabled_on_the_gpu(probe):
    run_check(SCRIPT, probe, TIMEOUT_S)
