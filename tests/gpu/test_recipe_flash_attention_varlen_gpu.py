"""GPU tests (marker `gpu`) of recipes/flash_attention_varlen.py: random packed batches (ragged,
empty query and key sequences, causal with seqlen_q <, = and > seqlen_k in one batch, GQA, every
head dim and ablation config, a sequence of one row, sequences longer than a tile ring lap)
against float64 torch per sequence, and every sequence bit for bit against the padded kernel run
on it alone; equal lengths bit for bit against the padded kernel on the batch; a custom scale,
strided (sliced) inputs, rows past cu_seqlens_q[-1] left alone, and the early returns (no key at
all, no query). Run with LAYOUTKIT_DEBUG=1 to turn a pipeline hang into
layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

fv = load_recipe("flash_attention_varlen")
fa = fv.padded
pytestmark = pytest.mark.gpu
# lengths of q, of k, heads_q, heads_kv, head_dim, causal
BATCHES = [
    ([1], [1], 1, 1, 64, False), ([1, 0, 3], [5, 2, 0], 2, 1, 128, True),
    ([300, 0, 129, 7], [250, 40, 0, 7], 4, 2, 64, True),
    ([128, 256, 1], [128, 77, 1000], 2, 2, 128, False),
    ([1000, 64, 333], [129, 2000, 333], 4, 1, 128, True),
    ([513, 1, 200], [513, 513, 1], 8, 2, 64, False),
    ([777, 300], [1234, 100], 2, 1, 256, True), ([200, 0, 90], [300, 10, 90], 2, 2, 256, False),
    ([2048, 512], [4096, 512], 4, 4, 128, True),
    ([100, 3000], [7000, 3000], 2, 1, 128, False),       # 176-key blocks by default_config
]


def _batch(gen, lengths_q, lengths_k, hq, hk, d, scale=1.0):
    q = (torch.randn(sum(lengths_q), hq, d, generator=gen) * scale).to("cuda", torch.bfloat16)
    k, v = ((torch.randn(sum(lengths_k), hk, d, generator=gen) * scale).to("cuda", torch.bfloat16)
            for _ in range(2))
    cu_q, cu_k = (torch.tensor([0] + torch.tensor(n).cumsum(0).tolist(), dtype=torch.int32,
                               device="cuda") for n in (lengths_q, lengths_k))
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("batch", BATCHES, ids=str)
def test_matches_float64_and_the_padded_kernel_per_sequence(batch):
    lengths_q, lengths_k, hq, hk, d, causal = batch
    gen = torch.Generator().manual_seed(sum(lengths_q) + sum(lengths_k))
    cfg = fa.default_config(d, causal, max(lengths_k))
    fv.check_batch(gen, lengths_q, lengths_k, hq, hk, d, causal, cfg, str(batch))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", fa.HEAD_DIMS)
def test_every_ablation_config_is_correct(d, causal):
    gen = torch.Generator().manual_seed(d + causal)
    for name, cfg in fa.ablations(d, causal).items():
        fv.check_batch(gen, [300, 0, 129, 700], [250, 600, 3, 700], 4, 2, d, causal, cfg,
                       f"d={d} causal={causal} {name}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", fa.HEAD_DIMS)
def test_equal_lengths_are_the_padded_kernel_bit_for_bit(d, causal):
    gen = torch.Generator().manual_seed(7 * d + causal)
    batch, s, heads = 3, 1000, 4
    q, k, v, cu_q, cu_k = _batch(gen, [s] * batch, [s] * batch, heads, heads, d)
    o, lse = fv.flash_attention_varlen(q, k, v, cu_q, cu_k, s, s, causal=causal)
    o_pad, lse_pad = fa.flash_attention(*(x.view(batch, s, heads, d) for x in (q, k, v)),
                                        causal=causal)
    assert torch.equal(o, o_pad.reshape(batch * s, heads, d))
    assert torch.equal(lse, lse_pad.permute(1, 0, 2).reshape(heads, batch * s))


def test_the_check_entry_point_passes():
    assert fv.check(seed=1) < 2 ** -7


def test_huge_logits_custom_scale_and_strided_inputs():
    gen = torch.Generator().manual_seed(3)
    lengths_q, lengths_k = [333, 1, 90], [517, 60, 90]
    q, k, v, cu_q, cu_k = _batch(gen, lengths_q, lengths_k, 4, 2, 128, scale=30.0)
    qkv = torch.cat([q, torch.zeros_like(q)], dim=1)[:, :4]       # heads of a wider tensor
    o, lse = fv.flash_attention_varlen(qkv, k, v, cu_q, cu_k, 333, 517, causal=True,
                                       softmax_scale=1.0)
    assert torch.isfinite(o).all()
    for b, (nq, nk) in enumerate(zip(lengths_q, lengths_k)):
        q0, k0 = int(cu_q[b]), int(cu_k[b])
        o_ref, lse_ref = fa.reference_torch(q[None, q0:q0 + nq], k[None, k0:k0 + nk],
                                            v[None, k0:k0 + nk], True, 1.0)
        fa.compare(o[None, q0:q0 + nq], lse[None, :, q0:q0 + nq], o_ref, lse_ref,
                   f"huge logits sequence {b}")


def test_rows_past_the_last_sequence_are_left_alone():
    gen = torch.Generator().manual_seed(4)
    q, k, v, cu_q, cu_k = _batch(gen, [100, 50], [80, 80], 2, 2, 64)
    cu_q = torch.tensor([0, 60, 90], dtype=torch.int32, device="cuda")    # rows 90.. in none
    o, lse = fv.flash_attention_varlen(q, k, v, cu_q, cu_k, 60, 80)
    o_ref, lse_ref = fa.reference_torch(q[None, 60:90], k[None, 80:], v[None, 80:], False,
                                        64 ** -0.5)
    fa.compare(o[None, 60:90], lse[None, :, 60:90], o_ref, lse_ref, "sequence 1")
    # rows 90.. belong to no sequence: launched on a poisoned output, they keep their values
    total, hq, d = q.shape
    o2 = torch.full((1, total, hq, d), 7.0, device="cuda", dtype=torch.bfloat16)
    lse2 = torch.full((hq, total), 7.0, device="cuda")
    cfg = fa.default_config(64, False, 80)
    grid, args, constexprs = fv.kernel_arguments(q[None], k[None], v[None], o2, lse2, cu_q, cu_k,
                                                 60, False, 64 ** -0.5, cfg)
    fv.kernel_module.kernel_for(cfg)[grid](*args, **constexprs)
    assert (o2[0, 90:] == 7.0).all() and (lse2[:, 90:] == 7.0).all()
    assert torch.equal(o2[0, :90], o[:90]) and torch.equal(lse2[:, :90], lse[:, :90])


def test_early_returns():
    gen = torch.Generator().manual_seed(5)
    q, k, v, cu_q, _ = _batch(gen, [10, 20], [0, 0], 2, 1, 64)
    cu_k = torch.zeros(3, dtype=torch.int32, device="cuda")
    o, lse = fv.flash_attention_varlen(q, k, v, cu_q, cu_k, 20, 0)      # no key at all
    assert (o == 0).all() and (lse == float("-inf")).all()
    empty = q[:0]
    o, lse = fv.flash_attention_varlen(empty, k, v, cu_q * 0, cu_k, 0, 0)
    assert o.shape == (0, 2, 64) and lse.shape == (2, 0)
