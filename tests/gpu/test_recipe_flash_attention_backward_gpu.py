"""GPU tests (marker `gpu`) of recipes/flash_attention_backward.py: dq, dk, dv against torch
autograd in float64 on the same bf16 inputs, random shapes (head dim 64, 128 and 256, causal
and not, GQA with heads_q = 2 or 4 x heads_kv, ragged seqlen_q != seqlen_k including 1, 77, 300,
seqlen_q > seqlen_k under causal, where rows see no key), both layouts, a custom scale, every
ablation config (recipes/flash_attention_backward.ablations); and autograd through
layoutkit.torch's op. Errors are relative to each gradient's largest reference entry (at least
the recipe's ERROR_FLOOR), as the forward's tests measure o.
Run with LAYOUTKIT_DEBUG=1 to turn a pipeline hang into layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

fa = load_recipe("flash_attention")
fb = load_recipe("flash_attention_backward")
pytestmark = pytest.mark.gpu
TOLERANCE = 2 ** -7
SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal
    (1, 1, 1, 1, 1, 64, False), (1, 1, 1, 1, 1, 128, True), (2, 128, 128, 2, 2, 64, False),
    (2, 128, 128, 2, 2, 128, True), (1, 1, 300, 4, 2, 128, False), (1, 77, 300, 4, 2, 64, True),
    (3, 300, 77, 4, 2, 128, True), (2, 300, 77, 4, 4, 64, False), (1, 300, 300, 4, 2, 128, True),
    (1, 257, 1023, 2, 1, 128, False), (2, 1024, 1024, 8, 4, 128, True),
    (1, 2048, 1500, 4, 2, 64, True), (1, 1500, 2048, 4, 1, 128, False),
    (1, 4096, 4096, 2, 2, 128, True), (4, 129, 129, 1, 1, 64, False),
    (1, 1, 1, 1, 1, 256, False), (1, 77, 300, 4, 2, 256, True), (2, 300, 77, 2, 1, 256, True),
    (1, 513, 1000, 2, 2, 256, False), (1, 2048, 2048, 4, 2, 256, True)]


def errors(got, want) -> dict:
    return {name: ((g.double() - w).abs().max() /
                   w.abs().max().clamp_min(fb.ERROR_FLOOR)).item()
            for name, g, w in zip(("dq", "dk", "dv"), got, want)}


def _inputs(shape, seed: int):
    batch, sq, sk, hq, hk, d, causal = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(batch, sq, hq, d, device="cuda", generator=gen).to(torch.bfloat16)
             for _ in range(2))
    k, v = (torch.randn(batch, sk, hk, d, device="cuda", generator=gen).to(torch.bfloat16)
            for _ in range(2))
    return q, k, v, do, causal


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_gradients_match_float64_autograd(shape):
    q, k, v, do, causal = _inputs(shape, seed=sum(shape))
    scale = q.shape[-1] ** -0.5
    o, lse = fa.flash_attention(q, k, v, causal)
    got = fb.flash_attention_backward(do, q, k, v, o, lse, causal)
    assert all(not g.isnan().any() for g in got)
    err = errors(got, fb.reference_torch(q, k, v, do, causal, scale))
    assert max(err.values()) < TOLERANCE, err


ABLATIONS = [(d, name) for d in fb.HEAD_DIMS for name in fb.ablations(d)]


@pytest.mark.parametrize("d, name", ABLATIONS, ids=lambda x: str(x))
@pytest.mark.parametrize("causal", [False, True])
def test_every_ablation_config(d, name, causal):
    q, k, v, do, _ = _inputs((2, 333, 517, 4, 2, d, causal), seed=3)
    o, lse = fa.flash_attention(q, k, v, causal)
    got = fb.flash_attention_backward(do, q, k, v, o, lse, causal, config=fb.ablations(d)[name])
    err = errors(got, fb.reference_torch(q, k, v, do, causal, d ** -0.5))
    assert max(err.values()) < TOLERANCE, (name, err)


def test_bhsd_layout_and_a_custom_scale():
    q, k, v, do, causal = _inputs((2, 200, 333, 4, 2, 64, False), seed=5)
    qt, kt, vt, dot = (x.transpose(1, 2).contiguous() for x in (q, k, v, do))
    o, lse = fa.flash_attention(qt, kt, vt, causal, 0.3, layout="bhsd")
    got = fb.flash_attention_backward(dot, qt, kt, vt, o, lse, causal, 0.3, layout="bhsd")
    assert [tuple(g.shape) for g in got] == [tuple(x.shape) for x in (qt, kt, vt)]
    err = errors([g.transpose(1, 2) for g in got], fb.reference_torch(q, k, v, do, causal, 0.3))
    assert max(err.values()) < TOLERANCE, err


def test_autograd_through_the_torch_op():
    import layoutkit.torch as lkt
    q, k, v, do, causal = _inputs((2, 500, 700, 8, 2, 128, True), seed=7)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    o, _ = lkt.flash_attention(q, k, v, causal)
    got = torch.autograd.grad(o, (q, k, v), do)
    err = errors(got, fb.reference_torch(q, k, v, do, causal, q.shape[-1] ** -0.5))
    assert max(err.values()) < TOLERANCE, err


@pytest.mark.parametrize("sq, sk", [(0, 5), (5, 0)])
def test_empty_sequences_give_zero_gradients(sq, sk):
    q, k, v, do, causal = _inputs((1, sq, sk, 2, 1, 64, False), seed=11)
    o, lse = fa.flash_attention(q, k, v, causal)
    got = fb.flash_attention_backward(do, q, k, v, o, lse, causal)
    assert [tuple(g.shape) for g in got] == [tuple(x.shape) for x in (q, k, v)]
    assert all(not g.any() for g in got)


@pytest.mark.parametrize("d", fb.HEAD_DIMS)
def test_very_negative_logits_stay_finite(d):
    """Scores near -16 sqrt(d) (lse < -88) with seqlen_k ragged: without the kernel's clamp
    the zero key rows of the last block give P = inf and NaN in dq."""
    gen = torch.Generator(device="cuda").manual_seed(d)
    q = (4.0 + 0.1 * torch.randn(2, 300, 4, d, device="cuda", generator=gen)).to(torch.bfloat16)
    k = (-4.0 + torch.randn(2, 777, 2, d, device="cuda", generator=gen)).to(torch.bfloat16)
    v, do = (torch.randn(2, n, h, d, device="cuda", generator=gen).to(torch.bfloat16)
             for n, h in ((777, 2), (300, 4)))
    o, lse = fa.flash_attention(q, k, v)
    assert lse.max().item() < -88
    got = fb.flash_attention_backward(do, q, k, v, o, lse)
    assert all(torch.isfinite(g).all() for g in got)
    err = errors(got, fb.reference_torch(q, k, v, do, False, d ** -0.5))
    assert max(err.values()) < 2 ** -6, err     # f32 scores of magnitude ~200: looser
