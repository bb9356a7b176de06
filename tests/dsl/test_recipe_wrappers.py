"""The recipes' Python wrappers (softmax, layernorm, transpose) on the CPU: what they launch (kernel,
grid, packed sizes) for each shape, with their per-shape plans reused across calls and shapes,
and every check still made on every call (a plan kept for a shape never skips a check on x, the
vectors or `out`). Fakes: tests/dsl/fake_gpu.py (real PTX, assembled by ptxas).
"""
import struct

import pytest

import layoutkit as lk
from recipes import layernorm, softmax, transpose
from recipes._row_split import Config

from .fake_gpu import BASE, FakeGPU, Tensor

MB = 1 << 20


def bf16(shape, at=0, **kw):
    return Tensor(BASE + at * MB, "bfloat16", shape, **kw)


@pytest.fixture
def gpu(monkeypatch):
    blocks = [Config(32 * warps, 1, 8, 1) for warps in (1, 2, 4)]
    kernels = [softmax.kernel_for(c) for c in blocks] + [layernorm.kernel_for(c) for c in blocks] \
        + [transpose.kernel_for(t) for t in (lk.bf16, lk.f32)]
    for recipe in (softmax, layernorm, transpose):
        monkeypatch.setattr(recipe, "_PLANS", {})
    fake = FakeGPU(monkeypatch, kernels)
    yield fake
    fake.reset()


def sizes(call, offset: int) -> tuple[int, int]:
    """(m, n): the two s32 kernel arguments at `offset` of the packed parameters."""
    return struct.unpack_from("<ii", call.packed, offset)


def pointers(call, count: int) -> list[int]:
    return list(struct.unpack_from(f"<{count}Q", call.packed, 0))


# ---- softmax ----------------------------------------------------------------------------------
def test_softmax_launches_per_shape_and_reuses_its_plans(gpu):
    x, out = bf16((4, 1000)), bf16((4, 1000), 1)
    x2, out2 = bf16((4, 16, 4096), 2), bf16((4, 16, 4096), 3)
    for a, b in ((x, out), (x, out), (x2, out2), (x, out), (x2, out2)):
        assert softmax.softmax(a, b) is b
    # (m, n / 8): rows of 8-column vectors; 2 rows of 16 threads per CTA, then 1 row of 64
    assert [sizes(c, 16) for c in gpu.calls] == [(4, 125), (4, 125), (64, 512), (4, 125),
                                                 (64, 512)]
    assert [c.grid for c in gpu.calls] == [(2, 1, 1), (2, 1, 1), (64, 1, 1), (2, 1, 1), (64, 1, 1)]
    assert [c.block for c in gpu.calls] == [32, 32, 64, 32, 64]
    assert pointers(gpu.calls[2], 2) == [x2.ptr, out2.ptr]
    assert len(softmax._PLANS) == 2


def test_softmax_allocates_out_when_not_given(gpu):
    x = bf16((5, 100))
    out = softmax.softmax(x)
    assert out.shape == x.shape and out.dtype is x.dtype
    assert pointers(gpu.calls[0], 2) == [x.ptr, out.ptr] and sizes(gpu.calls[0], 16) == (5, 25)


def test_softmax_plans_a_cluster_for_long_rows(gpu):
    launch, ints, constexprs = softmax._plan((4, 40000))
    cfg = softmax.config(4, 40000)
    assert (cfg.cluster, cfg.grid(4)) == (3, 12)    # 4 rows of 3 CTAs, the cluster along x
    assert launch is softmax.kernel_for(cfg)[12]
    assert ints == (4, 5000)                        # no scratch: the exchange is in DSMEM
    assert constexprs == tuple(cfg.constexprs().values())
    assert layernorm._plan((4, 40000), 4, 40000)[1] == (4, 5000)


def test_softmax_and_layernorm_take_a_given_split(gpu):
    x, out, w, b = bf16((3, 1000)), bf16((3, 1000), 1), bf16((1000,), 2), bf16((1000,), 3)
    split = Config(threads=64, rows=1, vector=8, chunks=2)       # 64 threads x 16 values a row
    softmax.softmax(x, out, config=split)
    layernorm.layernorm(x, w, b, 1e-5, out, config=split)
    softmax.softmax(x, out)                                      # the heuristic's: 2 rows of 16
    assert [(c.grid, c.block) for c in gpu.calls] == [((3, 1, 1), 64), ((3, 1, 1), 64),
                                                      ((2, 1, 1), 32)]
    with pytest.raises(ValueError, match=r"does not split rows of n = 1000 columns"):
        softmax.softmax(x, out, config=Config(threads=32, rows=1, vector=8, chunks=1))


def test_softmax_of_an_empty_tensor_launches_nothing(gpu):
    assert softmax.softmax(bf16((0, 100)), bf16((0, 100), 1)).shape == (0, 100)
    assert gpu.calls == []


@pytest.mark.parametrize("x, out, message", [
    (Tensor(BASE, "float32", (4, 1000)), None, "x must be a CUDA bfloat16 tensor, got Tensor torch.float32"),
    (bf16((4, 1000), device=-1), None, "x must be a CUDA bfloat16 tensor"),
    (bf16((4, 1000), contiguous=False), None, "x must be contiguous"),
    (bf16(()), None, "x must be contiguous with at least one dimension"),
    (bf16((4, 140000)), None, r"softmax: the row length n = 140000 must be in 1..131072"),
    (bf16((4, 1000)), bf16((4, 999), 1), r"out must be a contiguous bfloat16 tensor of shape \(4, 1000\) "
     r"on cuda:0, got Tensor torch.bfloat16 \(4, 999\) on cuda:0"),
    (bf16((4, 1000)), Tensor(BASE + MB, "float32", (4, 1000)), "out must be a contiguous bfloat16"),
    (bf16((4, 1000)), bf16((4, 1000), 1, device=1), r"out must .* on cuda:0, got .* on cuda:1"),
    (bf16((4, 1000)), bf16((4, 1000), 1, contiguous=False), "out must be a contiguous bfloat16"),
    (bf16((4, 1000)), "out", "out must be a contiguous bfloat16 tensor .* got str"),
])
def test_softmax_refuses_bad_arguments_after_a_plan_exists(gpu, x, out, message):
    softmax.softmax(bf16((4, 1000)), bf16((4, 1000), 1))
    with pytest.raises(ValueError, match=message):
        softmax.softmax(x, out)
    assert len(gpu.calls) == 1


# ---- layernorm --------------------------------------------------------------------------------
def test_layernorm_launches_per_shape_with_its_vectors_and_eps(gpu):
    x, w, b, out = bf16((6, 1000)), bf16((1000,), 1), bf16((1000,), 2), bf16((6, 1000), 3)
    x2, w2, b2, out2 = bf16((2, 4096), 4), bf16((4096,), 5), bf16((4096,), 6), bf16((2, 4096), 7)
    layernorm.layernorm(x, w, b, 1e-5, out)
    layernorm.layernorm(x2, w2, b2, 0.5, out2)
    layernorm.layernorm(x, w, b, 1, out)                 # an int eps: checked, launched as float
    first, second, third = gpu.calls
    assert pointers(first, 4) == [x.ptr, w.ptr, b.ptr, out.ptr]
    assert pointers(second, 4) == [x2.ptr, w2.ptr, b2.ptr, out2.ptr]
    assert [sizes(c, 32) for c in gpu.calls] == [(6, 125), (2, 512), (6, 125)]
    assert [struct.unpack_from("<f", c.packed, 40)[0] for c in gpu.calls] == \
        [struct.unpack("<f", struct.pack("<f", 1e-5))[0], 0.5, 1.0]
    assert (first.grid, second.grid, first.block, second.block) == ((3, 1, 1), (2, 1, 1), 32, 64)
    assert first.spec is third.spec


@pytest.mark.parametrize("args, error, message", [
    ((bf16((6, 1000)), bf16((999,), 1), bf16((1000,), 2), 1e-5), ValueError,
     r"weight has shape \(999,\) on cuda:0; it must be a vector of n = 1000 on cuda:0"),
    ((bf16((6, 1000)), bf16((1000,), 1), bf16((1000,), 2, device=1), 1e-5), ValueError,
     r"bias has shape \(1000,\) on cuda:1; it must be a vector of n = 1000 on cuda:0"),
    ((bf16((6, 1000)), Tensor(BASE + MB, "float32", (1000,)), bf16((1000,), 2), 1e-5), TypeError,
     "weight has dtype torch.float32"),
    ((bf16((6, 1000)), bf16((1000,), 1), bf16((1000,), 2), 0.0), ValueError, "eps = 0.0 must be"),
    ((bf16((6, 1000)), bf16((1000,), 1), bf16((1000,), 2), float("nan")), ValueError, "eps = nan"),
    ((bf16((6, 1000), contiguous=False), bf16((1000,), 1), bf16((1000,), 2), 1e-5), ValueError,
     "x must be a contiguous CUDA tensor"),
    ((bf16((6, 1000)), bf16((1000,), 1), bf16((1000,), 2), 1e-5, bf16((6, 999), 3)), ValueError,
     r"out must be a contiguous torch.bfloat16 tensor of shape \(6, 1000\) on cuda:0, got "
     r"torch.bfloat16 \(6, 999\)"),
    ((bf16((6, 1000)), bf16((1000,), 1), bf16((1000,), 2), 1e-5, bf16((6, 1000), 3, device=1)),
     ValueError, r"out must be .* on cuda:0, got .* on cuda:1"),
])
def test_layernorm_refuses_bad_arguments_after_a_plan_exists(gpu, args, error, message):
    layernorm.layernorm(bf16((6, 1000)), bf16((1000,), 1), bf16((1000,), 2), 1e-5, bf16((6, 1000), 3))
    with pytest.raises(error, match=message):
        layernorm.layernorm(*args)
    assert len(gpu.calls) == 1


# ---- transpose --------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::layoutkit.ptx.RegisterSpillWarning")  # ragged bf16 tile
def test_transpose_launches_per_shape_and_dtype(gpu):
    x, y = bf16((64, 48)), bf16((48, 64), 1)
    xf, yf = Tensor(BASE + 2 * MB, "float32", (64, 48)), Tensor(BASE + 3 * MB, "float32", (48, 64))
    xw, yw = bf16((40, 500), 4), bf16((500, 40), 5)
    for a, b in ((x, y), (xf, yf), (x, y), (xw, yw)):
        assert transpose.transpose(a, b) is b
    bf16_kernel, f32_kernel = transpose.kernel_for(lk.bf16), transpose.kernel_for(lk.f32)
    assert [c.spec in bf16_kernel._cache.values() for c in gpu.calls] == [True, False, True, True]
    assert gpu.calls[1].spec in f32_kernel._cache.values()
    assert [sizes(c, 16) for c in gpu.calls] == [(64, 48), (64, 48), (64, 48), (40, 500)]
    for call, (m, n, dtype) in zip(gpu.calls, [(64, 48, lk.bf16), (64, 48, lk.f32),
                                                (64, 48, lk.bf16), (40, 500, lk.bf16)]):
        blocks, rows_on_x = transpose.grid(m, n, dtype)
        assert call.grid == (*blocks, 1) and call.spec.key[4] == ("bool", rows_on_x)
    made = transpose.transpose(x)
    assert made.shape == (48, 64) and pointers(gpu.calls[-1], 2) == [x.ptr, made.ptr]


@pytest.mark.parametrize("x, out, error, message", [
    (Tensor(BASE, "int8", (64, 48)), None, TypeError, "x has dtype torch.int8; supported"),
    (bf16((64, 48), device=-1), None, ValueError, "x is on cpu; it must be a CUDA tensor"),
    (bf16((64, 48), contiguous=False), None, ValueError, "x must be a contiguous 2-D"),
    (bf16((64, 48)), bf16((64, 48), 1), ValueError, r"out must be a contiguous torch.bfloat16 "
     r"tensor of shape \(48, 64\) on cuda:0, got torch.bfloat16 \(64, 48\) on cuda:0"),
    (bf16((64, 48)), Tensor(BASE + MB, "float16", (48, 64)), ValueError, "got torch.float16"),
    (bf16((64, 48)), bf16((48, 64), 1, device=1), ValueError, "on cuda:1"),
    (bf16((64, 48)), bf16((48, 64), 1, contiguous=False), ValueError, "out must be a contiguous"),
])
def test_transpose_refuses_bad_arguments_after_a_plan_exists(gpu, x, out, error, message):
    transpose.transpose(bf16((64, 48)), bf16((48, 64), 1))
    with pytest.raises(error, match=message):
        transpose.transpose(x, out)
    assert len(gpu.calls) == 1
