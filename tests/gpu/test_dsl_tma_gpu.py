"""GPU tests of the DSL's TMA copies (marker `gpu`): tiles of ragged 2-D bf16 tensors loaded
into swizzled shared tiles (every swizzle mode), read back element by element through the
shared layout, stored back with TMA, all compared with torch exactly; a cluster-of-2 multicast.

Every mbarrier wait here completes unless TMA delivers fewer bytes than the derived expect-tx
count; run with LAYOUTKIT_DEBUG=1 to turn such a hang into layoutkit.sync.BarrierTimeoutError.
"""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_tma_kernels import (SWIZZLES, tile_layout, tma_multicast,  # noqa: E402
                                        tma_round_trip)

pytestmark = pytest.mark.gpu
# (M, K): K * 2 bytes must be a multiple of 16 (the tensor map's row stride)
SHAPES = [(64, 64), (200, 136), (1, 8), (129, 264), (1000, 1000)]


def ragged(m: int, k: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)


@pytest.mark.parametrize("mode", list(SWIZZLES))
@pytest.mark.parametrize("m, k", SHAPES)
def test_round_trip_through_a_swizzled_tile(mode, m, k):
    _, tile = tile_layout(mode)
    a = ragged(m, k, m * 7 + k)
    grid = (-(-m // tile[0]), -(-k // tile[1]))
    pm, pk = grid[0] * tile[0], grid[1] * tile[1]
    nan = float("nan")
    out = torch.full((m, k), nan, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, k), nan, device="cuda", dtype=torch.bfloat16)
    pad = torch.full((pm, pk), nan, device="cuda", dtype=torch.bfloat16)
    tma_round_trip[grid](a, out, c, pad, m, k, pm, pk, MODE=mode)
    torch.cuda.synchronize()
    assert torch.equal(out, a)               # read element by element through the layout
    assert torch.equal(c, a)                 # TMA store, clipped at the ragged edges
    assert torch.equal(pad[:m, :k], a)
    assert (pad[m:, :] == 0).all() and (pad[:, k:] == 0).all()     # zero-filled loads


@pytest.mark.parametrize("m, k", [(128, 64), (300, 136), (1000, 520)])
def test_multicast_to_a_cluster_of_two(m, k):
    a = ragged(m, k, m + k)
    tiles_m = -(-m // 128)
    out = torch.full((2 * 128 * tiles_m, k), float("nan"), device="cuda", dtype=torch.bfloat16)
    tma_multicast[(2 * tiles_m, -(-k // 64))](a, out, m, k, tiles_m)
    torch.cuda.synchronize()
    for rank in (0, 1):
        mine = out[rank * 128 * tiles_m:(rank + 1) * 128 * tiles_m]
        assert torch.equal(mine[:m], a), f"CTA rank {rank} of the clusters got other data"
        assert (mine[m:] == 0).all()
