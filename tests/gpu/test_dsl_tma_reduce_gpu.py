"""GPU tests of TMA reduce-stores (marker `gpu`): a grid of CTAs, several per output tile,
reduce their shared tiles (filled element by element through a swizzled layout) into one
ragged tensor with cp.reduce.async.bulk.tensor, compared with float64 references: f32 and bf16
add (exactly, on values whose partial sums are exact in any order; within rounding on random
f32), bf16 max and f16 min (order-free: exactly), i32 add (wrapping). The tensor's array
extends past its bounds (rows past M, a row stride past N): those elements must stay as they
were, since TMA skips out-of-bounds elements of the last tiles.

The kernels are the CPU tests' (tests/dsl/tma_reduce_kernels.py), and
test_the_hardware_computes_what_the_interpreter_models checks the interpreter's arithmetic of
each reduction (interpreter.tma_model.combine: rounding, subnormals, signed zeros, NaN,
infinities, integer wrap, inc / dec) against the hardware's, bit for bit.
"""
import numpy as np
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

import layoutkit.dsl as lk  # noqa: E402
from layoutkit.dsl.interpreter.tma_model import combine  # noqa: E402
from layoutkit.dsl.sm90.tma.derive import HARDWARE_REDUCTIONS  # noqa: E402
from tests.dsl.tma_reduce_kernels import (as_parts, launch_shape,  # noqa: E402
                                          leading_dimension, reduce_tiles)

pytestmark = pytest.mark.gpu
# (M, N, CTAs per tile): ragged in both modes but the first
# (16-bit columns: whole 16-byte chunks, as the DSL requires of a TMA-written tensor)
SHAPES = [(64, 64, 2), (70, 40, 3), (129, 104, 16), (1000, 136, 8), (1, 8, 5)]
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
         "i32": torch.int32, "i64": torch.int64, "u32": torch.uint32}
SIGNED = {2: (np.int16, torch.int16), 4: (np.int32, torch.int32), 8: (np.int64, torch.int64)}
UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}


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
    assert_same(out.double(), ref)
    untouched(out, init, m, n)


def assert_same(got, expected) -> None:
    """got == expected exactly, else a message listing where and by how much they differ."""
    bad = (got != expected).nonzero()
    if len(bad):
        rows = sorted({int(r) for r in bad[:, 0]})
        cols = sorted({int(c) for c in bad[:, 1]})
        shown = [f"({int(r)}, {int(c)}): got {float(got[r, c])}, expected "
                 f"{float(expected[r, c])}" for r, c in bad[:12]]
        raise AssertionError(f"{len(bad)} of {got.numel()} elements differ, in rows "
                             f"{rows[:20]}{'...' if len(rows) > 20 else ''} and columns "
                             f"{cols[:20]}{'...' if len(cols) > 20 else ''}:\n" +
                             "\n".join(shown))


@pytest.mark.parametrize("name", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("m, n, parts", [(64, 256, 16), (129, 104, 16), (129, 104, 64),
                                         (300, 136, 100)])
def test_every_ctas_reduction_lands_once(name, m, n, parts):
    # every CTA adds 1 to every element of its tile: each element counts its reductions (at
    # most 256: exact in bf16), so a lost or doubled reduction shows as a wrong count
    dtype = TORCH[name]
    values = torch.ones(parts, m, n, device="cuda", dtype=dtype)
    init = torch.zeros(m + 3, leading_dimension(getattr(lk, name), n), device="cuda",
                       dtype=dtype)
    out = reduce_on_gpu(name, "add", values, init, m, n)
    expected = init.double()
    expected[:m, :n] = parts
    assert_same(out.double(), expected)


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
    assert_same(out.double(), ref.double())
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


# bit patterns that meet the rules' edges: zeros of both signs, subnormals (smallest, largest),
# the smallest normal, 1 and its neighbour, half an ulp of 1 (a tie), the largest finite,
# infinities, NaNs
SPECIAL_BITS = {
    "f32": [0x0, 0x80000000, 0x1, 0x80000001, 0x007FFFFF, 0x00800000, 0x3F800000, 0xBF800000,
            0x3F800001, 0x33800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
            0xFFC00001],
    "f16": [0x0, 0x8000, 0x1, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3C01, 0x1000, 0x7BFF,
            0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0xFE01],
    "bf16": [0x0, 0x8000, 0x1, 0x8001, 0x007F, 0x0080, 0x3F80, 0xBF80, 0x3F81, 0x3B80, 0x7F7F,
             0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1],
}


def operand_bits(name: str, shape: tuple, seed: int) -> tuple:
    """(old, new) bit patterns of `shape`: every pair of special values, pairs of nearby
    values (same binade, either sign: sums that round), random patterns and small integers."""
    dtype = getattr(lk, name)
    view = UNSIGNED[dtype.nbytes]
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    random_bits = lambda k: rng.integers(0, np.iinfo(view).max, k, dtype=view,  # noqa: E731
                                         endpoint=True)
    old, new = random_bits(size), random_bits(size)
    if dtype.kind == "float":
        special = np.array(SPECIAL_BITS[name], view)
        pairs = np.array([(a, b) for a in special for b in special], view)
        old[:len(pairs)], new[:len(pairs)] = pairs[:, 0], pairs[:, 1]
        near = slice(len(pairs), len(pairs) + size // 3)
        count = near.stop - near.start
        mantissa = view((1 << (8 * dtype.nbytes - 9 if name != "f16" else 10)) - 1)
        sign = view(1 << (8 * dtype.nbytes - 1))
        flip = np.where(rng.integers(0, 2, count) == 1, sign, view(0)).astype(view)
        new[near] = ((old[near] & ~mantissa) | (random_bits(count) & mantissa)) ^ flip
    else:
        small = rng.integers(0, 8, (2, size // 3))
        old[:size // 3], new[:size // 3] = small.astype(view)
    return old.reshape(shape), new.reshape(shape)


def to_device(bits: np.ndarray, name: str):
    signed, torch_signed = SIGNED[bits.itemsize]
    tensor = torch.from_numpy(np.ascontiguousarray(bits).view(signed)).to("cuda")
    return tensor.view(TORCH[name])


def to_host_bits(tensor, name: str) -> np.ndarray:
    e = getattr(lk, name).nbytes
    return tensor.view(SIGNED[e][1]).cpu().numpy().view(UNSIGNED[e])


ENABLED = [(name, op) for op, names in HARDWARE_REDUCTIONS.items() for name in names]


@pytest.mark.parametrize("name, op", ENABLED)
def test_the_hardware_computes_what_the_interpreter_models(name, op):
    check_against_model(name, op)


def check_against_model(name: str, op: str) -> None:
    """One CTA per tile of a ragged tensor reduces edge, nearby and random bit patterns with
    `op`: the hardware's result is interpreter.tma_model.combine's, bit for bit (NaN
    payloads aside), and the elements past the bounds are untouched."""
    dtype = getattr(lk, name)
    m, n = 100, 3 * 128 // dtype.nbytes                   # ragged: the last tiles clipped
    ld = leading_dimension(dtype, n)
    grid, pm, pn = launch_shape(dtype, "128B", m, n, 1)
    init, value = operand_bits(name, (m + 2, ld), seed=len(name) * 17 + len(op))
    e = dtype.nbytes
    expected = init.copy()
    expected[:m, :n] = combine(op, dtype, init[:m, :n].reshape(-1, 1).view(np.uint8),
                               value[:m, :n].reshape(-1, 1).view(np.uint8)).view(
                                   UNSIGNED[e]).reshape(m, n)
    parts = as_parts(value[None, :m, :n], pm, pn)
    out = to_device(init, name)
    reduce_tiles(name, op, "128B")[grid](to_device(parts, name), out, m, n, ld, pm, pn, 1)
    torch.cuda.synchronize()
    got = to_host_bits(out, name)
    agree = got == expected
    if dtype.kind == "float":                   # NaN payloads are not part of the model
        as_float = {"f32": np.float32, "f16": np.float16}.get(name)
        if as_float is None:
            nan = lambda b: (b & 0x7FFF) > 0x7F80          # noqa: E731  (bf16)
        else:
            nan = lambda b: np.isnan(b.view(as_float))    # noqa: E731
        agree |= nan(got) & nan(expected)
    bad = np.argwhere(~agree)
    shown = [f"({r}, {c}): old {init[r, c]:#x} src {value[r, c]:#x} -> hardware "
             f"{got[r, c]:#x}, interpreter {expected[r, c]:#x}" for r, c in bad[:12]]
    assert not len(bad), f"{len(bad)} elements differ:\n" + "\n".join(shown)
