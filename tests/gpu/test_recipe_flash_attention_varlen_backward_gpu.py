"""GPU tests (marker `gpu`) of recipes/flash_attention_varlen_backward.py: dq, dk, dv of random
packed batches (ragged lengths with one sequence the longest and one empty on either side,
causal with seqlen_q <, = and > seqlen_k in one batch, GQA, head dims 64, 128, 256) against
torch autograd in float64 on each sequence alone; every ablation config of the padded backward
that the varlen kernel runs (fvb.ablations); a custom scale; no key or no query anywhere; very
negative logits with the next sequence's keys behind a sequence's end (the zeroed K rows).
Errors are relative to each gradient's largest reference entry (at least the padded recipe's
ERROR_FLOOR), as the padded backward's tests.
Run with LAYOUTKIT_DEBUG=1 to turn a pipeline hang into layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

fvb = load_recipe("flash_attention_varlen_backward")
pytestmark = pytest.mark.gpu
TOLERANCE = 2 ** -7


@pytest.mark.parametrize("case", fvb.GPU_CASES, ids=lambda c: "-".join(map(str, c)))
def test_random_packed_batches_match_float64_autograd(case):
    assert fvb.check(seed=sum(case), cases=(case,)) < TOLERANCE


ABLATIONS = [(d, name) for d in fvb.HEAD_DIMS for name in fvb.ablations(d)]


@pytest.mark.parametrize("d, name", ABLATIONS, ids=lambda x: str(x))
@pytest.mark.parametrize("causal", [False, True])
def test_every_ablation_config(d, name, causal):
    gen = torch.Generator().manual_seed(d)
    cfg = fvb.ablations(d)[name]
    assert fvb.check_batch(gen, [333, 0, 100, 517], [517, 77, 0, 300], 4, 2, d, causal, cfg,
                           name) < TOLERANCE


def test_a_custom_scale():
    gen = torch.Generator().manual_seed(1)
    assert fvb.check_batch(gen, [200, 70, 1], [333, 64, 129], 4, 2, 64, False, None, "scale",
                           scale=0.3) < TOLERANCE


@pytest.mark.parametrize("total_q, total_k", [(0, 50), (50, 0)])
def test_no_query_or_no_key_gives_zero_gradients(total_q, total_k):
    q, do = (torch.randn(total_q, 2, 64, device="cuda").to(torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(total_k, 1, 64, device="cuda").to(torch.bfloat16) for _ in range(2))
    cu_q, cu_k = (torch.tensor([0, n], dtype=torch.int32, device="cuda")
                  for n in (total_q, total_k))
    o, lse = fvb.forward.flash_attention_varlen(q, k, v, cu_q, cu_k, total_q, total_k)
    got = fvb.flash_attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, total_q, total_k)
    assert [g.shape for g in got] == [x.shape for x in (q, k, v)]
    assert all(not g.any() for g in got)


@pytest.mark.parametrize("d", fvb.HEAD_DIMS)
def test_very_negative_logits_stay_finite(d):
    """Scores near -16 sqrt(d) (lse < -88) in sequences whose last key block holds the next
    sequence's keys: the zeroed K rows give P = exp(-lse), clamped to 1, never inf."""
    gen = torch.Generator(device="cuda").manual_seed(d)
    lengths_q, lengths_k = [300, 200], [777, 150]
    q = (4.0 + 0.1 * torch.randn(500, 4, d, device="cuda", generator=gen)).to(torch.bfloat16)
    k = (-4.0 + torch.randn(927, 2, d, device="cuda", generator=gen)).to(torch.bfloat16)
    v = torch.randn(927, 2, d, device="cuda", generator=gen).to(torch.bfloat16)
    do = torch.randn(500, 4, d, device="cuda", generator=gen).to(torch.bfloat16)
    cu_q, cu_k = (torch.tensor([0, n[0], sum(n)], dtype=torch.int32, device="cuda")
                  for n in (lengths_q, lengths_k))
    o, lse = fvb.forward.flash_attention_varlen(q, k, v, cu_q, cu_k, 300, 777)
    assert lse.max().item() < -88
    got = fvb.flash_attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, 300, 777)
    assert all(torch.isfinite(g).all() for g in got)
    for b in range(2):
        rq = slice(int(cu_q[b]), int(cu_q[b + 1]))
        rk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        want = fvb.padded.reference_torch(q[None, rq], k[None, rk], v[None, rk], do[None, rq],
                                          False, d ** -0.5)
        for g, w in zip((got[0][rq], got[1][rk], got[2][rk]), want):
            err = ((g.double() - w[0]).abs().max() /
                   w.abs().max().clamp_min(fvb.padded.ERROR_FLOOR)).item()
            assert err < 2 ** -6, (b, err)      # f32 scores of magnitude ~200: looser
