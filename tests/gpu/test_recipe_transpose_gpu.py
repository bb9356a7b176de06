"""GPU tests (marker `gpu`) of recipes/transpose.py: random matrices of bf16, f16 and f32,
aligned and ragged shapes (seeded random ones too), compared exactly with x.t(), with a NaN
guard past the output. The kernel's only wait is one bar.sync every thread reaches."""
import random

import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipe_transpose import transpose  # noqa: E402

pytestmark = pytest.mark.gpu
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
_rng = random.Random(2026)
RANDOM_SHAPES = [(_rng.randint(1, 3000), _rng.randint(1, 3000)) for _ in range(6)]
SHAPES = [(1, 1), (1, 4096), (4096, 1), (7, 9), (128, 64), (129, 65), (100, 1000),
          (1000, 777), (1024, 1024), (4096, 48), (48, 4096)] + RANDOM_SHAPES


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n", SHAPES)
def test_transpose_matches_torch(m, n, dtype):
    gen = torch.Generator(device="cuda").manual_seed(m * 7919 + n)
    x = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    guard = torch.full((m * n + 64,), float("nan"), device="cuda", dtype=dtype)
    y = guard[:m * n].view(n, m)
    transpose.transpose(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x.t())
    assert torch.isnan(guard[m * n:]).all()                     # nothing written past the end


def test_transpose_allocates_its_output():
    x = torch.randn(300, 200, device="cuda")
    y = transpose.transpose(x)
    assert y.shape == (200, 300) and y.is_contiguous() and torch.equal(y, x.t())


def test_unaligned_pointers_take_the_narrow_path():
    base = torch.randn(64 * 64 + 1, device="cuda").to(torch.bfloat16)
    x = base[1:].view(64, 64)                                   # 2 bytes past 16-byte aligned
    assert torch.equal(transpose.transpose(x), x.t())


def test_recipe_check_runs():
    assert transpose.check(seed=1) == 0.0
