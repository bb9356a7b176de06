"""GPU tests (marker `gpu`) of recipes/flash_attention.py against float64 torch: random shapes
(ragged, GQA, causal with seqlen_q <, = and > seqlen_k, seqlen_q 1, seqlen_k 1), huge logits,
both layouts, strided inputs (copied for TMA), a custom scale, every ablation config; the
log-sum-exp is checked everywhere (finite to 2e-3 + 1e-5 |lse|, -inf exactly on rows that see
no key). Run with LAYOUTKIT_DEBUG=1 to turn a pipeline hang into
layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

fa = load_recipe("flash_attention")
pytestmark = pytest.mark.gpu
SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal
    (1, 1, 1, 1, 1, 64, False), (1, 1, 1, 1, 1, 128, True), (2, 128, 128, 2, 2, 64, False),
    (2, 128, 128, 2, 2, 128, True), (1, 1, 513, 8, 1, 128, False), (1, 1, 513, 8, 2, 64, True),
    (3, 77, 1000, 4, 2, 64, True), (2, 1000, 77, 4, 4, 128, True), (2, 1000, 77, 4, 4, 64, False),
    (1, 300, 300, 6, 3, 128, True), (1, 257, 1023, 2, 1, 128, False),
    (2, 1024, 1024, 16, 4, 128, True), (1, 2048, 4096, 8, 8, 64, True),
    (1, 4096, 1500, 4, 2, 128, False), (4, 129, 129, 1, 1, 64, False),
    (1, 300, 517, 4, 2, 256, False), (2, 200, 200, 2, 1, 256, True), (1, 1, 300, 2, 2, 256, True),
    (1, 2048, 2048, 4, 4, 256, True), (2, 777, 1234, 2, 2, 256, False),
    (1, 200, 7000, 2, 2, 128, False)]          # 176-key blocks by default_config


def _qkv(batch, sq, sk, hq, hk, d, seed, scale=1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = ((batch, sq, hq, d), (batch, sk, hk, d), (batch, sk, hk, d))
    return tuple((torch.randn(s, device="cuda", generator=gen) * scale).to(torch.bfloat16)
                 for s in shapes)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_float64(shape):
    *dims, d, causal = shape
    q, k, v = _qkv(*dims, d, seed=sum(shape[:-1]))
    o, lse = fa.flash_attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    o_ref, lse_ref = fa.reference_torch(q, k, v, causal, d ** -0.5)
    assert o.shape == q.shape and lse.shape == (shape[0], shape[3], shape[1])
    fa.compare(o, lse, o_ref, lse_ref, str(shape))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", fa.HEAD_DIMS)
def test_huge_logits_are_stable(d, causal):
    q, k, v = _qkv(2, 333, 517, 4, 2, d, seed=d, scale=30.0)     # logits in the thousands
    o, lse = fa.flash_attention(q, k, v, causal=causal, softmax_scale=1.0)
    assert torch.isfinite(o).all()
    o_ref, lse_ref = fa.reference_torch(q, k, v, causal, 1.0)
    fa.compare(o, lse, o_ref, lse_ref, f"huge logits d={d} causal={causal}")


@pytest.mark.parametrize("causal", [False, True])
def test_bhsd_layout_and_custom_scale(causal):
    q, k, v = _qkv(2, 200, 300, 4, 2, 128, seed=5)
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))   # (b, h, s, d) storage
    o, lse = fa.flash_attention(qt, kt, vt, causal=causal, softmax_scale=0.05, layout="bhsd")
    assert o.shape == qt.shape
    o_ref, lse_ref = fa.reference_torch(q, k, v, causal, 0.05)
    fa.compare(o.transpose(1, 2), lse, o_ref, lse_ref, "bhsd")


def test_strided_inputs_are_copied_not_misread():
    big = torch.randn(2, 150, 4, 70, device="cuda").to(torch.bfloat16)   # rows of 70: unaligned
    q = big[..., :64]
    k, v = (x[:, :, :2] for x in _qkv(2, 150, 150, 4, 4, 64, seed=9)[1:])
    o, lse = fa.flash_attention(q, k, v)
    o_ref, lse_ref = fa.reference_torch(q, k, v, False, 64 ** -0.5)
    fa.compare(o, lse, o_ref, lse_ref, "strided")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", fa.HEAD_DIMS)
def test_every_ablation_config_is_correct(d, causal):
    q, k, v = _qkv(2, 700, 900, 4, 2, d, seed=11)
    o_ref, lse_ref = fa.reference_torch(q, k, v, causal, d ** -0.5)
    for name, cfg in fa.ablations(d, causal).items():
        o, lse = fa.flash_attention(q, k, v, causal=causal, config=cfg)
        fa.compare(o, lse, o_ref, lse_ref, f"{name} d={d} causal={causal}")


def test_check_passes():
    assert fa.check(0) < 2 ** -7


def test_agrees_with_torch_sdpa():
    q, k, v = _qkv(2, 1024, 1024, 8, 8, 128, seed=3)
    o, _ = fa.flash_attention(q, k, v, causal=True)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(1, 2) for x in (q, k, v)), is_causal=True).transpose(1, 2)
    assert (o.float() - want.float()).abs().max().item() < 2e-2
