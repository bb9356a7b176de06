"""GPU tests (marker `gpu`) of the launch fast path with TMA tensor maps
(layoutkit.dsl.core.launch_maps) and of gemm()'s plans (recipes/_gemm_plans.py): repeated
calls on new memory, new extents and new strides of the same facts launch without the checked
path and compute what torch does (the maps re-encoded where they must be)."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

import layoutkit.dsl as lk  # noqa: E402
from recipes import gemm_hopper as gh  # noqa: E402
from recipes._gemm_kernel import Config  # noqa: E402
from tests.dsl import spec_cache_kernels as K  # noqa: E402

pytestmark = pytest.mark.gpu
# maps over a's fields and over M, K (of c); a release build whatever LAYOUTKIT_DEBUG says
# (debug builds take the checked path at every launch, to check their barrier-timeout sink)
copy = lk.kernel(K.tma_copy.fn, num_warps=4, debug=False)


@pytest.fixture
def checked(monkeypatch):
    """The calls of copy that went through Kernel.launch (the checked path)."""
    calls = []

    def spy(grid, *args, _real=copy.launch, **kwargs):
        calls.append(grid)
        return _real(grid, *args, **kwargs)
    monkeypatch.setitem(copy.__dict__, "launch", spy)
    return calls


def test_copies_through_cached_and_new_maps_match_torch(checked):
    gen = torch.Generator(device="cuda").manual_seed(0)
    # (M, K, row stride of a and out): equal facts; new memory at every call
    for m, k, stride in [(256, 128, 128), (256, 128, 128), (512, 128, 136), (256, 64, 64),
                         (256, 128, 128)]:
        a = torch.randn(m, stride, device="cuda", generator=gen).to(torch.bfloat16)[:, :k]
        out = torch.full((m, stride), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :k]
        c = torch.full((m * k,), float("nan"), device="cuda", dtype=torch.bfloat16)
        copy[(m // 64, k // 64)](a, out, c, m, k)
        torch.cuda.synchronize()
        assert torch.equal(out, a) and torch.equal(c.view(m, k), a), (m, k, stride)
    assert checked == [(4, 2), (8, 2), (4, 1)]      # one checked launch per grid, then fast


@pytest.mark.parametrize("m, n, k, kmajor, config, epilogue", [
    (2048, 2048, 2048, False, None, False), (2048, 2048, 2048, True, None, False),
    (16, 4096, 4096, False, None, False), (300, 520, 264, False, None, True),
    (256, 1024, 512, True, Config(BM=128, BN=128, STAGES=4, CLUSTER=1, SPLIT_K=2), True)])
def test_repeated_gemm_calls_on_new_inputs_match_float64(m, n, k, kmajor, config, epilogue):
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)
    for _ in range(4):                       # the first call checked, the others its plan
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
        if kmajor:
            b = b.t().contiguous().t()
        out = torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)
        want = a.double() @ b.double()
        kwargs = {}
        if epilogue:
            bias = torch.randn(n, device="cuda", generator=gen)
            want = torch.relu(2.0 * want + 0.5 * out.double() + bias.double()) + out.double()
            kwargs = dict(bias=bias, activation="relu", residual=out, alpha=2.0, beta=0.5)
        got = gh.gemm(a, b, out, config, **kwargs).double()
        err = ((got - want).norm() / want.norm()).item()
        assert err < 1e-2, (m, n, k, kmajor, config, err)
