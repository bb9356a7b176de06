"""GPU tests (marker `gpu`) of recipes/flash_attention.py's three-consumer configs (192-row query
tiles, Config.CONSUMERS = 3: every such ablation row of head dims 64 and 128) against float64
torch: ragged seqlens (tiles cut by the sequence's end), causal with seqlen_q <, = and >
seqlen_k, GQA, seqlen_q 1, huge logits, the varlen kernel on a skewed packed batch, and the
tuned path's grid for a three-consumer winner. Run with LAYOUTKIT_DEBUG=1 to turn a pipeline
hang into layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

fa = load_recipe("flash_attention")
varlen = load_recipe("flash_attention_varlen")
pytestmark = pytest.mark.gpu
ROWS = [(d, causal, name) for d in sorted(fa.THREE_CONSUMERS) for causal in (False, True)
        for name, cfg in fa.ablations(d, causal).items() if cfg.CONSUMERS == 3]
SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv
    (1, 1, 1, 1, 1), (1, 1, 513, 8, 2), (2, 192, 192, 2, 2), (3, 77, 1000, 4, 2),
    (2, 1000, 77, 4, 4), (1, 385, 385, 6, 3), (2, 1024, 1024, 8, 2), (1, 2048, 4096, 4, 4),
    (1, 4097, 1500, 2, 1)]


def _qkv(batch, sq, sk, hq, hk, d, seed, scale=1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = ((batch, sq, hq, d), (batch, sk, hk, d), (batch, sk, hk, d))
    return tuple((torch.randn(s, device="cuda", generator=gen) * scale).to(torch.bfloat16)
                 for s in shapes)


@pytest.mark.parametrize("d, causal, name", ROWS, ids=[f"d{d}-{'causal' if c else 'full'}-{n}"
                                                      for d, c, n in ROWS])
def test_matches_float64(d, causal, name):
    cfg = fa.ablations(d, causal)[name]
    for i, shape in enumerate(SHAPES):
        q, k, v = _qkv(*shape, d, seed=i + d)
        o, lse = fa.flash_attention(q, k, v, causal=causal, config=cfg)
        o_ref, lse_ref = fa.reference_torch(q, k, v, causal, d ** -0.5)
        fa.compare(o, lse, o_ref, lse_ref, f"{name} d={d} causal={causal} {shape}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", sorted(fa.THREE_CONSUMERS))
def test_huge_logits_are_stable(d, causal):
    cfg = fa.THREE_CONSUMERS[d]["3 consumers"]
    q, k, v = _qkv(2, 333, 517, 4, 2, d, seed=d, scale=30.0)     # logits in the thousands
    o, lse = fa.flash_attention(q, k, v, causal=causal, softmax_scale=1.0, config=cfg)
    assert torch.isfinite(o).all()
    o_ref, lse_ref = fa.reference_torch(q, k, v, causal, 1.0)
    fa.compare(o, lse, o_ref, lse_ref, f"huge logits d={d} causal={causal}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", sorted(fa.THREE_CONSUMERS))
def test_varlen_matches_float64(d, causal):
    gen = torch.Generator().manual_seed(d + causal)
    lengths_q = [700, 0, 1, 193, 385]
    lengths_k = [650, 30, 0, 192, 1000]
    cfg = fa.THREE_CONSUMERS[d]["3 consumers"]
    varlen.check_batch(gen, lengths_q, lengths_k, 4, 2, d, causal, cfg, f"varlen d={d}")


def test_tuned_launch_of_a_three_consumer_winner_covers_every_row():
    """The autotuner's grid follows its winner's CONSUMERS (tuned_grid): force a three-consumer
    winner for one key and check every row of a tile-ragged problem is written."""
    d, causal = 64, True
    q, k, v = _qkv(2, 1000, 1000, 4, 2, d, seed=7)
    tuner = fa.tuner(d, causal)
    winner = fa._tuned(fa.THREE_CONSUMERS[d]["3 consumers"])
    batch, sq, hq, _ = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(batch * hq, sq, device="cuda")
    _, args, _ = fa.kernel_arguments(q, k, v, out, lse, causal, d ** -0.5,
                                     fa.default_config(d, causal, 1000))
    key = tuner.tuning_key(tuner._bind(args, dict(D=d, CAUSAL=causal)))
    saved = tuner._best.get(key)
    tuner._best[key] = winner
    keys = set(tuner._best)
    try:
        o, lse = fa.flash_attention(q, k, v, causal=causal)
        assert set(tuner._best) == keys and tuner._best[key] is winner   # the call took it
    finally:
        if saved is None:
            tuner._best.pop(key)
        else:
            tuner._best[key] = saved
    o_ref, lse_ref = fa.reference_torch(q, k, v, causal, d ** -0.5)
    fa.compare(o, lse, o_ref, lse_ref, "tuned three-consumer winner")
