"""The GPU checks' kernels (tests/gpu/ptx_backend_kernels.py) assemble for sm_90a and their
signatures read as the checks launch them: caught here, on the CPU, not on the GPU machine."""
import pytest

from layoutkit.ptx import CompiledKernel, ParamKind, assemble
from tests.gpu.ptx_backend_kernels import ALL

KINDS = {
    "vector_add": [ParamKind.POINTER, ParamKind.INT_OR_POINTER, ParamKind.INT_OR_POINTER, ParamKind.INT],
    "smem_fill": [ParamKind.INT_OR_POINTER],
    "tma_round_trip": [ParamKind.TENSORMAP, ParamKind.TENSORMAP, ParamKind.INT_OR_POINTER, ParamKind.INT,
                       ParamKind.INT],
    "ping_pong": [ParamKind.INT_OR_POINTER, ParamKind.INT],
    "wgmma_tile": [ParamKind.TENSORMAP, ParamKind.TENSORMAP, ParamKind.INT_OR_POINTER],
    "cluster_ranks": [ParamKind.INT_OR_POINTER],
}


@pytest.mark.parametrize("name", sorted(ALL))
def test_gpu_check_kernels_assemble_and_parse(name):
    cubin = assemble(ALL[name], "sm_90a")
    kernel = CompiledKernel(cubin)
    assert cubin.entries == (kernel.name,)
    assert [p.kind for p in kernel.signature.params] == KINDS[kernel.name]
    usage = cubin.resources[kernel.name]
    assert not usage.spills
