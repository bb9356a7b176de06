"""GPU tests (marker `gpu`) of the recipes and the block-level DSL ops: softmax against
torch.softmax on random bf16 inputs with ragged row lengths; a swizzled shared-memory
transpose; row max/sum reductions over lanes and warps; convert_layout by shuffles and by
shared memory. No kernel waits on anything but bar.sync (and, for softmax's rows over a
cluster, the cluster barrier) reached by every thread (checked at trace time), so none can
hang."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.block_kernels import (BLOCKED, STRIDED, WARP_BLOCKED, WARP_LOCAL,  # noqa: E402
                                     convert_roundtrip, row_stats, transpose_tile)
from tests.dsl.test_recipes_compile import softmax  # noqa: E402

pytestmark = pytest.mark.gpu
BF16_TOLERANCE = 2 ** -7      # bf16 keeps 8 significant bits: half an ulp is 2**-8 relative


@pytest.mark.parametrize("m, n", [(1, 1), (3, 7), (5, 31), (17, 100), (64, 1000), (7, 1024),
                                  (9, 2049), (1000, 3000), (5, 4096), (4, 8191), (3, 16384),
                                  (7, 16385), (2, 32767), (3, 32768), (5, 49150), (2, 65536),
                                  (3, 98301), (2, 131072), (1, 131071), (1000, 4096),
                                  (300, 40000)])
def test_softmax_matches_torch(m, n):
    gen = torch.Generator(device="cuda").manual_seed(m * 100_003 + n)
    x = (torch.randn(m, n, device="cuda", generator=gen) * 4).to(torch.bfloat16)
    guard = torch.full((m * n + 64,), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = guard[:m * n].view(m, n)
    softmax.softmax(x, out)
    torch.cuda.synchronize()
    want = torch.softmax(x.double(), dim=-1)
    err = ((out.double() - want).abs() / want.amax(dim=-1, keepdim=True)).max().item()
    assert err < BF16_TOLERANCE
    assert torch.isnan(guard[m * n:]).all()                     # nothing written past the end
    assert torch.allclose(out.double().sum(dim=-1), torch.ones(m, dtype=torch.float64,
                                                              device="cuda"), atol=2e-2)


@pytest.mark.parametrize("m, n", [(3, 1000), (2, 40000)])
def test_softmax_of_rows_not_16_byte_aligned(m, n):
    # x and out one element past an aligned address: the kernel takes narrower accesses
    base = (torch.randn(m * n + 1, device="cuda") * 4).to(torch.bfloat16)
    x, out = base[1:].view(m, n), torch.empty(m * n + 1, device="cuda", dtype=torch.bfloat16)
    softmax.softmax(x, out[1:].view(m, n))
    want = torch.softmax(x.double(), dim=-1)
    got = out[1:].view(m, n).double()
    assert ((got - want).abs() / want.amax(dim=-1, keepdim=True)).max().item() < BF16_TOLERANCE


def test_softmax_recipe_check_runs():
    assert softmax.check(seed=1) < BF16_TOLERANCE


@pytest.mark.parametrize("m, n", [(64, 64), (128, 192), (100, 70), (1, 130)])
def test_swizzled_shared_transpose(m, n):
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    y = torch.zeros(n, m, device="cuda", dtype=torch.bfloat16)
    transpose_tile[((m + 63) // 64, (n + 63) // 64)](x, y, m, n)
    torch.cuda.synchronize()
    assert torch.equal(y, x.t())


@pytest.mark.parametrize("rows, values", [(1, 4), (8, 2), (32, 1)])
@pytest.mark.parametrize("m, n", [(1, 1), (5, 300), (40, 1000), (3, 1024)])
def test_row_max_and_sum_reductions(rows, values, m, n):
    x = torch.randn(m, n, device="cuda")
    mx = torch.full((m,), float("nan"), device="cuda")
    sm = torch.full((m,), float("nan"), device="cuda")
    width = 256 // rows * values
    for start in range(0, n, width):         # one tile of columns per launch
        chunk = x[:, start:start + width].contiguous()
        row_stats[(m + rows - 1) // rows](chunk, mx, sm, m, chunk.shape[1], ROWS=rows, K=values)
        torch.cuda.synchronize()
        assert torch.equal(mx, chunk.amax(dim=1))
        assert torch.allclose(sm.double(), chunk.double().sum(dim=1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("src, dst", [(WARP_LOCAL, WARP_BLOCKED), (WARP_BLOCKED, WARP_LOCAL),
                                      (BLOCKED, STRIDED), (STRIDED, BLOCKED)])
def test_convert_layout_preserves_every_element(src, dst):
    x = torch.randn(256, device="cuda")
    y = torch.full((256,), float("nan"), device="cuda")
    convert_roundtrip[1](x, y, src, dst)
    torch.cuda.synchronize()
    assert torch.equal(y, x)
