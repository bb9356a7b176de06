"""GPU tests of TMA reduce-stores (marker `gpu`): a grid of CTAs, several per output tile,
reduce their shared tiles (filled element by element through a swizzled layout) into one
ragged tensor with cp.reduce.async.bulk.tensor, compared with float64 references: f32 and bf16
add (exactly, on values whose partial sums are exact in any order; within rounding on random
f32), bf16 max and f16 min (order-free: exactly), i32 add (wrapping). The tensor's array
extends past its bounds (rows past M, a row stride past N): those elements must stay as they
were, since TMA skips out-of-bounds elements of the last tiles.

The kernels are the CPU tests' (tests/dsl/tma_reduce_kernels.py), so the interpreter's model of
each reduction is checked against the hardware here.
"""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

import layoutkit.dsl as lk  # noqa: E402
from tests.dsl.tma_reduce_kernels import (as_parts, launch_shape,  # noqa: E402
                                          leading_dimension, reduce_tiles)

pytestmark = pytest.mark.gpu
# (M, N, CTAs per tile): ragged in both modes but the first
SHAPES = [(64, 64, 2), (70, 40, 3), (129, 100, 16), (1000, 136, 8), (1, 8, 5)]
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
         "i32": torch.int32}


def reduce_on_gpu(name: str, op: str, values, init, m: int, n: int, mode: str = "128B"):
    """`init` (cuda, (m + extra, LD)) after every part of `values` (cuda, (R, m, n)) is reduced
    into its M x N tensor."""
    dtype = getattr(lk, name)
    grid, pm, pn = launch_shape(dtype, mode, m, n, values.shape[0])
    host = values.cpu().float() if name == "bf16" else values.cpu()     # numpy has no bf16
    parts = torch.from_numpy(as_parts(host.numpy(), pm, pn)).to("cuda", TORCH[name])
    out = init.clone()
    reduce_tiles(name, op, mode)[grid](parts, out, m, n, init.shape[1], pm, pn,
                                       values.shape[0])
    torch.cuda.synchronize()
    return out


def generator(seed: int):
    return torch.Generator(device="cuda").manual_seed(seed)


def untouched(out, init, m: int, n: int) -> None:
    assert torch.equal(out[m:], init[m:]) and torch.equal(out[:, n:], init[:, n:]), \
        "a TMA reduction wrote past the tensor's bounds"


@pytest.mark.parametrize("name", ["f32", "bf16"])
@pytest.mark.parametrize("m, n, parts", SHAPES)
def test_ctas_reduce_add_into_one_ragged_tensor_exactly(name, m, n, parts):
    # integers (f32: eighths) whose partial sums are exact in the type: any order of the CTAs'
    # atomic reductions gives the float64 sum
    dtype, ld = TORCH[name], leading_dimension(getattr(lk, name), n)
    scale, span = (8, 2 ** 9) if name == "f32" else (1, 4)
    g = generator(m * 31 + n + parts)
    values = (torch.randint(-span, span + 1, (parts, m, n), device="cuda", generator=g)
              / scale).to(dtype)
    init = (torch.randint(-span, span + 1, (m + 3, ld), device="cuda", generator=g)
            / scale).to(dtype)
    out = reduce_on_gpu(name, "add", values, init, m, n)
    ref = init.double()
    ref[:m, :n] += values.double().sum(0)
    assert torch.equal(out.double(), ref)
    untouched(out, init, m, n)


@pytest.mark.parametrize("m, n, parts", SHAPES)
def test_ctas_reduce_add_random_f32_within_rounding(m, n, parts):
    g = generator(m + n)
    values = torch.randn(parts, m, n, device="cuda", generator=g)
    init = torch.randn(m + 2, leading_dimension(lk.f32, n), device="cuda", generator=g)
    out = reduce_on_gpu("f32", "add", values, init, m, n)
    ref = init.double()
    ref[:m, :n] += values.double().sum(0)
    # parts f32 additions, each rounded once: each error within an ulp of the sum of the
    # terms' magnitudes
    magnitude = init.double().abs()
    magnitude[:m, :n] += values.double().abs().sum(0)
    assert ((out.double() - ref).abs() <= parts * torch.finfo(torch.float32).eps *
            magnitude).all()
    untouched(out, init, m, n)


def test_one_bf16_reduce_add_rounds_the_exact_sum_to_nearest_even():
    m, n = 129, 200
    g = generator(5)
    values = torch.randn(1, m, n, device="cuda", generator=g).to(torch.bfloat16)
    init = torch.randn(m + 1, leading_dimension(lk.bf16, n), device="cuda",
                       generator=g).to(torch.bfloat16)
    out = reduce_on_gpu("bf16", "add", values, init, m, n)
    ref = init.double()
    ref[:m, :n] += values[0].double()
    assert torch.equal(out, ref.to(torch.bfloat16))     # the interpreter's rounding
    untouched(out, init, m, n)


@pytest.mark.parametrize("name, op, mode", [("bf16", "max", "128B"), ("f16", "min", "64B")])
def test_ctas_reduce_min_max_exactly(name, op, mode):
    m, n, parts = 300, 136, 6
    g = generator(7)
    dtype = TORCH[name]
    values = torch.randn(parts, m, n, device="cuda", generator=g).to(dtype)
    init = torch.randn(m + 2, leading_dimension(getattr(lk, name), n), device="cuda",
                       generator=g).to(dtype)
    out = reduce_on_gpu(name, op, values, init, m, n, mode)
    pick = torch.amax if op == "max" else torch.amin
    ref = init.clone()
    ref[:m, :n] = (torch.maximum if op == "max" else torch.minimum)(init[:m, :n],
                                                                    pick(values, dim=0))
    assert torch.equal(out, ref)
    untouched(out, init, m, n)


def test_ctas_reduce_add_i32_wrapping():
    m, n, parts = 200, 72, 4
    g = generator(9)
    big = 2 ** 31 - 1
    values = torch.randint(-big, big, (parts, m, n), device="cuda", generator=g,
                           dtype=torch.int64)
    init = torch.randint(-big, big, (m + 2, leading_dimension(lk.i32, n)), device="cuda",
                         generator=g, dtype=torch.int64)
    out = reduce_on_gpu("i32", "add", values.to(torch.int32), init.to(torch.int32), m, n,
                        "none")
    ref = init.clone()
    ref[:m, :n] += values.sum(0)
    ref = (ref + 2 ** 31) % 2 ** 32 - 2 ** 31
    assert torch.equal(out.long(), ref)
