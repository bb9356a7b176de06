"""GPU tests (marker `gpu`) of layoutkit's torch operators on CUDA tensors: torch.library.opcheck
of every op (schema, autograd registration, fake against real outputs, AOT dispatch with
dynamic shapes, backward included where the op has one), gradients against torch's autograd
in float64 at model-sized shapes, torch.compile with the default (inductor) backend against
eager, attention's backward (pending until recipes/flash_attention.py has one), and the
end-to-end example examples/transformer_block.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.gpu.gpu_only import REPO, require_gpu

require_gpu()

torch = pytest.importorskip("torch")

import layoutkit.torch as lkt  # noqa: E402

pytestmark = pytest.mark.gpu
ops = torch.ops.layoutkit
BF16 = torch.bfloat16
F = torch.nn.functional


def randn(*shape, seed: int, scale: float = 1.0, dtype=BF16, grad: bool = False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, device="cuda", generator=gen) * scale
    return x.to(dtype).requires_grad_(grad)


def opcheck(op, args):
    result = torch.library.opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


# ---- opcheck ---------------------------------------------------------------------------------
@pytest.mark.parametrize("m, k, n, k_major", [(128, 64, 256, False), (200, 72, 136, True),
                                              (7, 13, 5, False), (1000, 520, 264, True)])
def test_opcheck_gemm(m, k, n, k_major):
    b = randn(n, k, seed=2, grad=True).detach().t().requires_grad_() if k_major \
        else randn(k, n, seed=2, grad=True)
    opcheck(ops.gemm.default, (randn(m, k, seed=1, grad=True), b))


@pytest.mark.parametrize("shape", [(3, 7), (64, 1000), (4, 8191), (2, 32768)])
def test_opcheck_softmax(shape):
    opcheck(ops.softmax.default, (randn(*shape, seed=3, scale=4.0, grad=True),))


@pytest.mark.parametrize("shape", [(3, 7), (64, 1000), (4, 8191)])
def test_opcheck_layernorm(shape):
    n = shape[-1]
    opcheck(ops.layernorm.default, (randn(*shape, seed=4, scale=3.0, grad=True),
                                    randn(n, seed=5, grad=True), randn(n, seed=6, grad=True),
                                    1e-5))


@pytest.mark.parametrize("weight", [None, BF16, torch.float32])
def test_opcheck_rmsnorm(weight):
    w = randn(1000, seed=8, dtype=weight, grad=True) if weight is not None else None
    opcheck(ops.rmsnorm.default, (randn(64, 1000, seed=7, grad=True), w, 1e-6))


@pytest.mark.parametrize("dtype", [BF16, torch.float16, torch.float32])
def test_opcheck_transpose(dtype):
    opcheck(ops.transpose.default, (randn(129, 65, seed=9, dtype=dtype, grad=True),))


@pytest.mark.parametrize("sq, sk, hq, hk, d, causal, layout",
                         [(300, 257, 4, 2, 64, False, "bshd"), (257, 300, 4, 1, 128, True, "bshd"),
                          (128, 128, 2, 2, 256, True, "bhsd")])
def test_opcheck_flash_attention(sq, sk, hq, hk, d, causal, layout):
    shapes = ((2, sq, hq, d), (2, sk, hk, d)) if layout == "bshd" else \
        ((2, hq, sq, d), (2, hk, sk, d))
    q, k, v = randn(*shapes[0], seed=10, grad=True), randn(*shapes[1], seed=11, grad=True), \
        randn(*shapes[1], seed=12, grad=True)      # opcheck runs the backward through autograd
    opcheck(ops.flash_attention.default, (q, k, v, causal, None, layout))


def test_opcheck_the_backward_ops():
    y = torch.softmax(randn(64, 1000, seed=40).float(), -1).to(BF16)
    dy, x, w = randn(64, 1000, seed=41), randn(64, 1000, seed=42, scale=3.0), randn(1000, seed=43)
    opcheck(ops.softmax_backward.default, (dy, y))
    opcheck(ops.layernorm_backward.default, (dy, x, w, 1e-5))
    rstd = torch.rsqrt(x.float().square().mean(-1) + 1e-6)
    opcheck(ops.rmsnorm_backward.default, (dy, x, w, rstd))
    opcheck(ops.rmsnorm_backward.default, (dy, x, None, rstd))


# ---- gradients against float64 autograd ------------------------------------------------------
def float64_grads(fn, inputs, grad_out):
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, grad_out.double())


def assert_close(got, want, bound=2 ** -7):
    for g, w in zip(got, want):
        assert g.shape == w.shape
        err = ((g.double() - w).norm() / w.norm()).item()
        assert err < bound, f"relative error {err:.3g} of a {tuple(w.shape)} gradient"


def test_linear_gradients_match_float64():
    """F.linear(x, w) as gemm(x, w.t()): K-major b, both gradients through layoutkit gemms."""
    x, w = randn(1024, 768, seed=13, grad=True), randn(3072, 768, seed=14, scale=0.04, grad=True)
    dy = randn(1024, 3072, seed=15)
    assert_close(torch.autograd.grad(lkt.gemm(x, w.t()), (x, w), dy),
                 float64_grads(lambda x, w: x @ w.t(), (x, w), dy))


@pytest.mark.parametrize("m, n", [(512, 1024), (37, 4097), (4, 32768)])
def test_row_op_gradients_match_float64(m, n):
    x = (randn(m, n, seed=16, scale=3.0).float() + 4.0).to(BF16).requires_grad_()
    w, b = randn(n, seed=17, grad=True), randn(n, seed=18, grad=True)
    dy = randn(m, n, seed=19)
    assert_close(torch.autograd.grad(lkt.softmax(x), (x,), dy),
                 float64_grads(lambda x: torch.softmax(x, -1), (x,), dy))
    assert_close(torch.autograd.grad(lkt.layernorm(x, w, b), (x, w, b), dy),
                 float64_grads(lambda x, w, b: F.layer_norm(x, (n,), w, b), (x, w, b), dy))
    assert_close(torch.autograd.grad(lkt.rmsnorm(x, w), (x, w), dy),
                 float64_grads(lambda x, w: F.rms_norm(x, (n,), w, 1e-6), (x, w), dy))


def test_transpose_gradient_is_exact():
    x, dy = randn(1000, 777, seed=20, grad=True), randn(777, 1000, seed=21)
    assert torch.equal(torch.autograd.grad(lkt.transpose(x), (x,), dy)[0], dy.t())


# ---- torch.compile (inductor) ----------------------------------------------------------------
def test_inductor_compile_of_every_op_matches_eager_forward_and_backward():
    x = randn(256, 512, seed=22, grad=True)
    w1, w2 = randn(1024, 512, seed=23, scale=0.05, grad=True), randn(512, seed=24, grad=True)
    q = randn(2, 256, 4, 64, seed=25)

    def f(x, w1, w2, q):
        h = lkt.rmsnorm(lkt.layernorm(x, w2, w2), w2)
        y = lkt.softmax(lkt.gemm(h, w1.t()))
        o, _ = lkt.flash_attention(q, q, q, causal=True)
        return (lkt.transpose(y).float() ** 2).sum() + o.float().sum()

    compiled = torch.compile(f, fullgraph=True)
    got_value = compiled(x, w1, w2, q)
    got = torch.autograd.grad(got_value, (x, w1, w2))
    want_value = f(x, w1, w2, q)
    want = torch.autograd.grad(want_value, (x, w1, w2))
    assert torch.allclose(got_value, want_value, rtol=1e-4)   # inductor sums in its own order
    for g, e in zip(got, want):
        assert ((g.double() - e.double()).norm() / e.double().norm()).item() < 1e-2


# ---- attention's backward --------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_attention_gradients_match_sdpa(causal):
    q, k, v = (randn(2, 300, h, 128, seed=27 + h, grad=True) for h in (4, 2, 2))
    do = randn(2, 300, 4, 128, seed=30)

    def reference(q, k, v):
        o = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                           is_causal=causal, enable_gqa=True)
        return o.transpose(1, 2)
    got = torch.autograd.grad(lkt.flash_attention(q, k, v, causal)[0], (q, k, v), do)
    assert_close(got, float64_grads(reference, (q, k, v), do), bound=2 ** -6)


# ---- the end-to-end example ------------------------------------------------------------------
def test_transformer_block_example_trains_and_matches_eager_torch():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(REPO / "examples" / "transformer_block.py"),
                           "--steps", "5"], capture_output=True, text=True, timeout=900,
                          cwd=REPO, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert done.stdout.strip().endswith("OK")
