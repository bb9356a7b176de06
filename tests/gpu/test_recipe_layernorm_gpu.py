"""GPU tests (marker `gpu`) of recipes/layernorm.py: random bf16 rows (offset far from zero,
so a one-pass E[x^2] - mean^2 variance would fail), random weight and bias, row lengths from 1
to 131072 including ragged ones (rows over clusters of 2-8 CTAs past 16384), against torch's
layer_norm in float64. The kernels' only waits are bar.sync and the cluster barrier, reached
by every thread."""
import math
import random

import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipe_layernorm import layernorm  # noqa: E402

pytestmark = pytest.mark.gpu
BF16_TOLERANCE = 2 ** -7
_rng = random.Random(4242)
RANDOM_SHAPES = [(_rng.randint(1, 300), _rng.randint(1, 131072)) for _ in range(8)]
SHAPES = [(1, 1), (3, 7), (5, 31), (17, 100), (64, 1000), (7, 1024), (9, 1025), (5, 2049),
          (1000, 3000), (6, 4096), (4, 8191), (3, 16384), (2, 16385), (2, 32767), (3, 32768),
          (5, 49150), (2, 65536), (3, 98301), (2, 131072), (1, 131071), (1000, 4096),
          (300, 40000)] + RANDOM_SHAPES


@pytest.mark.parametrize("m, n", SHAPES)
def test_layernorm_matches_float64(m, n):
    gen = torch.Generator(device="cuda").manual_seed(m * 100_003 + n)
    offset = torch.randn(m, 1, device="cuda", generator=gen) * 50
    x = (torch.randn(m, n, device="cuda", generator=gen) * 2 + offset).to(torch.bfloat16)
    w = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    guard = torch.full((m * n + 64,), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = guard[:m * n].view(m, n)
    layernorm.layernorm(x, w, b, 1e-5, out)
    torch.cuda.synchronize()
    want = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    assert layernorm._error(out, want) < BF16_TOLERANCE
    assert torch.isnan(guard[m * n:]).all()                     # nothing written past the end


@pytest.mark.parametrize("m, n", [(3, 1000), (2, 40000)])
def test_rows_not_16_byte_aligned(m, n):
    # x, w and out one element past an aligned address: the kernel takes narrower accesses
    def unaligned(*shape):
        return (torch.randn(math.prod(shape) + 1, device="cuda") * 3 + 20).to(torch.bfloat16)[1:] \
            .view(*shape)
    x, w, b, out = unaligned(m, n), unaligned(n), torch.randn(n, device="cuda").bfloat16(), \
        unaligned(m, n)
    layernorm.layernorm(x, w, b, 1e-5, out)
    want = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    assert layernorm._error(out, want) < BF16_TOLERANCE


def test_constant_rows_give_the_bias():
    # var = 0: y = b up to the f32 rounding of the mean (|x - mean| <= ulp(7)) times rsqrt(eps)
    x = torch.full((4, 3000), 7.0, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3000, device="cuda").to(torch.bfloat16)
    b = torch.randn(3000, device="cuda").to(torch.bfloat16)
    got = layernorm.layernorm(x, w, b).double()
    assert torch.isfinite(got).all()
    assert (got - b.double()).abs().max().item() < 2e-3 * (1 + w.double().abs().max().item())


def test_batched_input_normalizes_the_last_dim():
    x = torch.randn(2, 3, 512, device="cuda").to(torch.bfloat16)
    w, b = torch.ones(512, device="cuda").bfloat16(), torch.zeros(512, device="cuda").bfloat16()
    want = torch.nn.functional.layer_norm(x.double(), (512,), w.double(), b.double(), 1e-5)
    assert layernorm._error(layernorm.layernorm(x, w, b), want) < BF16_TOLERANCE


def test_recipe_check_runs():
    assert layernorm.check(seed=1) < BF16_TOLERANCE
