"""GPU tests (marker `gpu`) of recipes/flash_attention_kvcache.py against float64 torch (the
pages gathered in block-table order, then plain softmax attention per sequence): random
configurations (paged with a random permutation of pages, contiguous, ragged cache lengths
with 0 and 1, GQA groups 1..64 and 3, 5, causal with seqlen_q 1..16, page sizes 16..256, head
dims 64, 128 and 256, the default split heuristic and forced splits 1..128), NaN in every
unused cache slot, every split count giving the same answer, empty caches (o = 0, lse =
-inf), a custom scale, strided q and caches far longer than a ring lap. Run with
LAYOUTKIT_DEBUG=1 to turn a pipeline hang into layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

fk = load_recipe("flash_attention_kvcache")
pytestmark = pytest.mark.gpu

# batch, seqlen_q, heads_q, heads_kv, head_dim, cache capacity, page size (None: contiguous),
# causal, num_splits (None: the heuristic)
CASES = [
    (1, 1, 1, 1, 64, 1, None, False, None), (4, 1, 32, 8, 128, 4096, 128, False, None),
    (4, 4, 32, 8, 128, 4096, 128, True, None), (8, 1, 32, 8, 128, 1000, None, False, None),
    (3, 16, 4, 1, 128, 777, None, True, None), (5, 2, 8, 8, 64, 2048, 64, True, 7),
    (2, 16, 16, 2, 128, 512, 256, True, 1), (6, 1, 16, 2, 64, 3000, None, False, 3),
    (2, 3, 12, 4, 128, 20000, 64, True, None), (3, 5, 24, 8, 64, 640, 64, True, 128),
    (1, 8, 32, 8, 128, 65536, 256, True, None), (16, 1, 64, 8, 128, 2048, 128, False, None),
    (2, 1, 64, 1, 128, 300, None, False, 2), (7, 4, 40, 8, 128, 1536, 128, True, 5),
    (3, 4, 16, 4, 256, 2000, 128, True, None), (2, 1, 8, 1, 256, 700, None, False, 3),
    (5, 1, 32, 8, 128, 3000, 16, False, None), (4, 4, 32, 8, 128, 1000, 32, True, 3),
    (3, 2, 8, 2, 64, 4000, 16, True, None),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_float64_torch(case):
    batch, sq, hq, hk, d, keys, page, causal, splits = case
    gen = torch.Generator().manual_seed(CASES.index(case))
    lengths = fk.random_lengths(gen, batch, keys)
    fk.check_case(gen, batch, sq, hq, hk, d, keys, page, lengths, causal, splits)


@pytest.mark.parametrize("paged", [False, True])
def test_every_split_count_gives_the_same_answer(paged):
    gen = torch.Generator().manual_seed(11)
    q, k, v, seqlens, table = fk.random_case(gen, 3, 2, 16, 4, 128, 5000, 128 if paged else None,
                                             [5000, 1, 2345])
    o1, lse1 = fk.flash_attention_with_kvcache(q, k, v, seqlens, table, causal=True,
                                               num_splits=1)
    for splits in (2, 3, 17, 40, 128):
        o, lse = fk.flash_attention_with_kvcache(q, k, v, seqlens, table, causal=True,
                                                 num_splits=splits)
        assert (o.float() - o1.float()).abs().max().item() < 2e-2, splits
        finite = torch.isfinite(lse1)
        assert torch.equal(torch.isfinite(lse), finite), splits
        assert (lse - lse1)[finite].abs().max().item() < 1e-4, splits


@pytest.mark.parametrize("splits", [None, 1, 4])
def test_empty_caches_give_zero_and_minus_infinity(splits):
    gen = torch.Generator().manual_seed(5)
    q, k, v, seqlens, table = fk.random_case(gen, 4, 3, 8, 2, 64, 256, 64, [0, 0, 0, 0])
    o, lse = fk.flash_attention_with_kvcache(q, k, v, seqlens, table, causal=True,
                                             num_splits=splits)
    assert torch.equal(o, torch.zeros_like(o))
    assert torch.equal(lse, torch.full_like(lse, float("-inf")))


def test_a_cache_without_keys_returns_early():
    q = torch.randn(2, 1, 8, 64, device="cuda").to(torch.bfloat16)
    empty = torch.zeros(2, 0, 2, 64, device="cuda", dtype=torch.bfloat16)
    seqlens = torch.zeros(2, dtype=torch.int32, device="cuda")
    o, lse = fk.flash_attention_with_kvcache(q, empty, empty, seqlens)
    assert torch.equal(o, torch.zeros_like(o)) and (lse == float("-inf")).all()


def test_causal_rows_before_the_first_key_see_nothing():
    """seqlen_q = 8 against caches of 3 and 8 keys: with bottom-right causal masking the first
    5 query rows of the short cache see no key (o = 0, lse = -inf), the others match torch."""
    gen = torch.Generator().manual_seed(6)
    q, k, v, seqlens, table = fk.random_case(gen, 2, 8, 8, 2, 128, 128, 64, [3, 8])
    o, lse = fk.flash_attention_with_kvcache(q, k, v, seqlens, table, causal=True)
    assert (lse[0, :, :5] == float("-inf")).all() and torch.equal(
        o[0, :5], torch.zeros_like(o[0, :5]))
    o_ref, lse_ref = fk.reference_torch(q, k, v, seqlens, table, True, 128 ** -0.5)
    fk.padded.compare(o, lse, o_ref, lse_ref, "causal rows")


def test_custom_scale_huge_logits_and_strided_q():
    gen = torch.Generator().manual_seed(8)
    q, k, v, seqlens, table = fk.random_case(gen, 3, 4, 16, 4, 128, 3000, 128, [3000, 17, 900])
    wide = torch.randn(3, 4, 32, 128, generator=gen).to("cuda", torch.bfloat16) * 8
    q = wide[:, :, ::2]                              # every other head: a strided q
    for scale in (0.01, 0.5):
        o, lse = fk.flash_attention_with_kvcache(q, k, v, seqlens, table, softmax_scale=scale,
                                                 causal=False)
        o_ref, lse_ref = fk.reference_torch(q, k, v, seqlens, table, False, scale)
        fk.padded.compare(o, lse, o_ref, lse_ref, f"scale {scale}")


def test_the_check_entry_point_passes():
    assert fk.check(seed=1) < 2 ** -7
