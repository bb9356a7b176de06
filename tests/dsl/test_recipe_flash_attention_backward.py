"""recipes/flash_attention_backward.py on the CPU: every default specialization (head dims 64,
128 and 256, causal and not; 64 in 128-query steps) assembles for sm_90a with no spills and no
ptxas C75xx infos,
reducing dQ by TMA reduce-adds (head dims 64 and 128: one per box of each consumer's tile, no
red.global) or red.global.add.v2.f32 (256; the pre- and post-pass with 16-byte loads); the CPU
interpreter runs all three kernels and matches numpy's float64 gradients (ragged, GQA, causal
with seqlen_q < and > seqlen_k, every split, dQ reduced by the TMA and by the producer warps,
dS stored by stmatrix; those configs assemble without spills too), the causal
query-block counts are exact against a brute-force walk, and every argument error of
flash_attention_backward is a ValueError naming the argument (stand-in CUDA tensors: the checks
run before anything reaches a GPU)."""
import re
from dataclasses import replace
import warnings

import pytest
from hypothesis import given, settings, strategies as st

import layoutkit as lk
from layoutkit.ptx import assemble

from .test_recipes_compile import load_recipe

fb = load_recipe("flash_attention_backward")
torch = pytest.importorskip("torch", reason="the entry's checks take torch tensors")


def test_default_specializations_assemble_without_spills_or_wgmma_infos():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills and ignored setmaxnreg are warnings
        compiled = {name: (ptx, assemble(ptx)) for name, ptx in fb.compile_default().items()}
    kernels = [f"attention_backward_d{d}{c}" for d in (64, 128, 256) for c in ("", "_causal")]
    passes = [f"attention_backward_{p}_pass_d{d}" for p in ("post", "pre") for d in (64, 128, 256)]
    assert sorted(compiled) == sorted(kernels + passes)
    for name, (ptx, cubin) in compiled.items():
        (usage,) = cubin.resources.values()
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert not usage.performance_notes, (name, usage.performance_notes)
    for name in kernels:     # TMA reduce-adds of 32-float boxes, or the consumers' 8 bytes
        ptx, d = compiled[name][0], int(re.search(r"_d(\d+)", name).group(1))
        if fb.CONFIGS[d].DQ_WRITE == "tma_reduce":
            # two consumer tiles of 64 rows, 32-float boxes: 64 (rows, keys splits) or
            # head_dim / 2 columns each
            cols = fb.dq_writer.tile_columns(d, fb.CONFIGS[d].DQ_SPLIT)
            assert ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile") \
                == 2 * cols // 32, name
            assert "red.global" not in ptx, name
        else:
            assert "red.global.add.v2.f32" in ptx and "red.global.add.f32" not in ptx, name
    for name in passes:           # 16-byte accesses of dO, O (pre) and of dQ_acc (post)
        assert re.search(r"ld\.global(\.nc)?\.v4\.(b32|f32)", compiled[name][0]), name


def test_interpreter_matches_float64_gradients():
    # non-causal GQA over two key blocks (one query block: a key block's loop over several is
    # the causal case's and the head dim 128 test's); causal seqlen_q < seqlen_k, 2 kv heads
    assert fb.check_cpu(cases=((1, 50, 150, 2, 1, 64, False), (1, 100, 130, 2, 2, 64, True))) \
        < 2 ** -6


def test_interpreter_head_dim_128_causal_seqlen_q_past_seqlen_k():
    assert fb.check_cpu(seed=1, cases=((1, 130, 60, 2, 1, 128, True),)) < 2 ** -6


# one head each below (the interpreter's cost is a step per key block, query block and head):
# GQA and a second kv head are the subject of the first test's cases
def test_interpreter_dq_partials_summed_in_shared_memory():
    cfg = fb.Config(DQ_SPLIT="keys_summed")
    assert fb.check_cpu(seed=4, cases=((1, 100, 130, 1, 1, 64, True),), config=cfg) < 2 ** -6


# the ablations from each head dim's config before the writers, stmatrix and DQ_FIRST became
# its default (the consumers reducing their own dQ)
CONSUMERS = {64: fb.Config(DQ_SPLIT="keys"), 128: fb.Config(DQ_SPLIT="head_dim")}
WRITERS = ("producer_warps", "tma_reduce")
WRITER_ABLATIONS = [(d, name) for d in (64, 128) for name in fb.ablations(d, CONSUMERS[d])
                    if any(f"DQ_WRITE={w}" in name for w in WRITERS)]


def test_every_writer_split_is_an_ablation_row():
    # head dim 64 has no head_dim split (32 dQ columns per warpgroup); the producer warps'
    # keys split at 128 spills: not a row
    both = " DS_STORE=stmatrix DQ_FIRST"
    assert WRITER_ABLATIONS == [(64, "DQ_WRITE=producer_warps DQ_SPLIT=keys"),
                                (64, "DQ_WRITE=tma_reduce DQ_SPLIT=keys"),
                                (64, "DQ_WRITE=tma_reduce DQ_SPLIT=keys" + both),
                                (128, "DQ_WRITE=producer_warps DQ_SPLIT=head_dim"),
                                (128, "DQ_WRITE=tma_reduce DQ_SPLIT=head_dim"),
                                (128, "DQ_WRITE=tma_reduce DQ_SPLIT=keys"),
                                (128, "DQ_WRITE=tma_reduce DQ_SPLIT=head_dim" + both),
                                (128, "DQ_WRITE=tma_reduce DQ_SPLIT=keys" + both)]
    # the default is the three together (head dim 64: its 64-query row is, over the keys
    # split), with the causal grid longest first (and head dim 128's dS first); the row
    # undoing the three the consumers' own reductions
    for d in (64, 128):
        combo = f"DQ_WRITE=tma_reduce DQ_SPLIT={CONSUMERS[d].DQ_SPLIT}" + both
        same = "BQ=64 DQ_SPLIT=keys DS_FIRST=False" if d == 64 else "default"
        assert fb.ablations(d)[same] == replace(fb.ablations(d, CONSUMERS[d])[combo],
                                                DS_FIRST=d == 128, LONGEST_FIRST=True)
        assert fb.ablations(d)["DQ_WRITE=consumers DS_STORE=st DQ_FIRST=False"] == replace(
            fb.CONFIGS[d], DQ_WRITE="consumers", DS_STORE="st", DQ_FIRST=False)
    # the default with the producer warps' reductions (128 only: 128-query steps refuse them)
    assert fb.ablations(128)["DQ_WRITE=producer_warps DQ_SPLIT=head_dim"] == \
        replace(fb.CONFIGS[128], DQ_WRITE="producer_warps")
    assert fb.CONFIGS[64].BQ == 128 and "DS_FIRST=False" not in fb.ablations(64)   # it spills


# the writer rows the interpreter runs: the defaults (TMA, each head dim's split) run in the
# float64 tests above; here the producer warps' (one sdQ tile, partials summed at 64) and the
# TMA's keys split at 128 (two full-width tiles added in global memory)
INTERPRETED = [(d, name, CONSUMERS[d]) for d, name in WRITER_ABLATIONS
               if "producer_warps" in name and "DQ_FIRST" not in name] + \
    [(128, "DQ_WRITE=tma_reduce DQ_SPLIT=keys", CONSUMERS[128]),
     (64, "DQ_WRITE=consumers DQ_SPLIT=rows", None)]    # 128-query steps, the consumers' own


@pytest.mark.parametrize("d, name, base", INTERPRETED, ids=lambda x: str(x)[:40])
def test_interpreter_dq_reduced_by_the_writer_warps(d, name, base):
    # causal: masked and unmasked steps, several steps per head through the sdQ tiles
    cfg = fb.ablations(d, base)[name]
    case = (1, 100, 130, 1, 1, 64, True) if d == 64 else (1, 130, 60, 1, 1, 128, True)
    assert fb.check_cpu(seed=5, cases=(case,), config=cfg) < 2 ** -6


@pytest.mark.parametrize("d, split", [(64, "keys"), (128, "head_dim")])
@pytest.mark.parametrize("others", [{}, dict(DS_STORE="stmatrix", DQ_FIRST=True)])
def test_writer_warps_assemble_without_spills_with_16_byte_reductions(d, split, others):
    cfg = fb.Config(DQ_SPLIT=split, DQ_WRITE="producer_warps", **others)
    for causal in (False, True):
        _, args, constexprs = fb.kernel_arguments(*_specs(d), causal, d ** -0.5, cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ptx = fb.backward_kernel.ptx(*args, **constexprs)
            (usage,) = assemble(ptx).resources.values()
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, (d, causal)
        assert not usage.performance_notes, (d, causal, usage.performance_notes)
        # the consumers hand over, the writer warps reduce 16 bytes at a time and nothing else
        assert "red.global.add.v4.f32" in ptx and "red.global.add.v2.f32" not in ptx
        assert re.search(r"bar\.arrive 8, 352", ptx) and re.search(r"bar\.sync 7, 352", ptx)


def test_tma_writer_keys_split_at_128_assembles_without_spills():
    # the defaults' TMA writer is the default specializations' test; this is its other split
    # at 128: each consumer's full-width 64 x 128 partial (4 boxes), the two added in L2
    cfg = fb.ablations(128)["DQ_SPLIT=keys"]
    assert (cfg.DQ_WRITE, cfg.DQ_SPLIT) == ("tma_reduce", "keys")
    for causal in (False, True):
        _, args, constexprs = fb.kernel_arguments(*_specs(128), causal, 128 ** -0.5, cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ptx = fb.backward_kernel.ptx(*args, **constexprs)
            (usage,) = assemble(ptx).resources.values()
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, causal
        assert ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile") == 8
        # one barrier pair per consumer (its 128 threads and the issuing warp)
        for bar in (7, 8, 9, 10):
            assert re.search(rf"bar\.(sync|arrive) {bar}, 160", ptx), bar


def test_longest_first_sections_of_pairs_along_x_key_blocks_along_y():
    # causal key block 0 holds the most work: with key blocks along y, each section's block 0
    # CTAs start first; the 4 (kv head, batch) pairs of the specs are one section
    cfg = fb.CONFIGS[128]
    assert cfg.LONGEST_FIRST and not fb.ablations(128)["LONGEST_FIRST=False"].LONGEST_FIRST
    grid, _, constexprs = fb.kernel_arguments(*_specs(128), True, 128 ** -0.5, cfg)
    t, tk = _specs(128)[:2]
    pairs = tk.shape[2] * t.shape[0]
    assert grid == (pairs, -(-tk.shape[1] // fb.BN), 1) and constexprs["LONGEST_FIRST"] == pairs
    # non-causal key blocks all hold the same work: the block order
    grid, _, constexprs = fb.kernel_arguments(*_specs(128), False, 128 ** -0.5, cfg)
    assert grid == (-(-tk.shape[1] // fb.BN), tk.shape[2], t.shape[0])
    assert constexprs["LONGEST_FIRST"] == 0


@pytest.mark.parametrize("seqlen, pairs, group, keys, bq, pays", [
    (8192, 8, 4, 128, 64, True),      # causal GQA 4:1 at 8k: the longest CTA is half a share
    (2048, 32, 4, 128, 64, True),
    (16384, 16, 1, 128, 64, False),   # 0.13 of a share: block order keeps L2 reuse
    (2048, 128, 1, 128, 64, False),
    (2048, 128, 1, 128, 128, False),  # head dim 64's 128-query steps
    (16384, 16, 1, 64, 64, False),    # head dim 256's 64-key blocks
    (100, 9, 1, 128, 64, True),       # fewer CTAs than SMs
])
def test_longest_first_where_the_longest_cta_is_over_a_quarter_of_a_share(seqlen, pairs, group,
                                                                          keys, bq, pays):
    kernel = fb.kernel_module
    assert kernel.longest_first_pays(seqlen, seqlen, keys, bq, pairs, group, 132) is pays
    # the grid follows: GQA 4:1 at 8k in one section of its 8 pairs, 16k in block order
    t, tk = (lk.TensorSpec(lk.bf16, (2, seqlen, h, 128)) for h in (4 * group, 4))
    grid, _, constexprs = fb.kernel_arguments(t, tk, tk, t, tk, tk, None, None, None, True,
                                              0.1, fb.CONFIGS[128])
    assert (constexprs["LONGEST_FIRST"] > 0) is kernel.longest_first_pays(
        seqlen, seqlen, 128, 64, 8, group, 132)


@pytest.mark.parametrize("pairs, section", [(1, 1), (4, 4), (7, 7), (8, 8), (10, 5), (12, 6),
                                            (13, 1), (16, 8), (128, 8), (96, 8), (18, 6)])
def test_longest_first_section_is_the_largest_divisor_up_to_eight(pairs, section):
    assert fb.kernel_module.longest_first_section(pairs) == section


def test_interpreter_longest_first_three_sections_match_float64():
    # 9 pairs (3 batches x 3 kv heads) in three sections of 3: each CTA's pair decodes to its
    # kv head and batch
    cfg = fb.CONFIGS[128]
    assert fb.check_cpu(seed=8, cases=((3, 40, 100, 3, 3, 128, True),), config=cfg) < 2 ** -6


@pytest.mark.parametrize("d", [64, 128])
def test_interpreter_ds_stored_by_stmatrix(d):
    # consumer warpgroup 1 (threads 256..) stores its own rows: stmatrix addresses by the
    # role's thread index (a CTA-index address raced with the other warpgroup's wgmma)
    cfg = fb.ablations(d, CONSUMERS[d])["DS_STORE=stmatrix"]
    case = (1, 100, 130, 1, 1, 64, True) if d == 64 else (1, 130, 60, 1, 1, 128, True)
    assert fb.check_cpu(seed=6, cases=(case,), config=cfg) < 2 ** -6
    _, args, constexprs = fb.kernel_arguments(*_specs(d), True, d ** -0.5, cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills are warnings
        ptx = fb.backward_kernel.ptx(*args, **constexprs)
        assemble(ptx)
    # 4 per warpgroup and span (masked, unmasked), nothing else
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 4 * 2 * 2


@pytest.mark.parametrize("d", [64, 128])
def test_interpreter_dq_issued_before_dk(d):
    # the reductions run while dK's wgmma does (consumer warpgroups' own atomics)
    cfg = fb.ablations(d, CONSUMERS[d])["DQ_FIRST"]
    case = (1, 100, 130, 2, 1, 64, True) if d == 64 else (1, 130, 60, 1, 1, 128, True)
    assert fb.check_cpu(seed=7, cases=(case,), config=cfg) < 2 ** -6


def _specs(d):
    """TensorSpecs of kernel_arguments' tensors: (2, 1024, 4 / 2 heads, d), GQA."""
    import layoutkit as lk
    t, tk = (lk.TensorSpec(lk.bf16, (2, 1024, h, d)) for h in (4, 2))
    rows = fb.padded_rows(2, 4, 1024)
    return (t, tk, tk, t, tk, tk, lk.TensorSpec(lk.f32, (rows, d)),
            lk.TensorSpec(lk.f32, (rows,)), lk.TensorSpec(lk.f32, (rows,)))


def test_interpreter_head_dim_256_split_by_columns():
    assert fb.check_cpu(seed=2, cases=((1, 70, 100, 1, 1, 256, True),)) < 2 ** -6


@settings(max_examples=200, deadline=None)
@given(sq=st.integers(1, 700), sk=st.integers(1, 700), n_blk=st.integers(0, 10),
       bn=st.sampled_from((fb.BN, fb.kernel_module.WG_KEYS)))
def test_causal_query_blocks_are_the_ones_that_see_the_key_block(sq, sk, n_blk, bn):
    keys = range(n_blk * bn, min((n_blk + 1) * bn, sk))
    if not keys:
        return
    m_begin, n_masked, nq, nqb = fb.kernel_module.query_blocks(sq, sk, n_blk, True, bn)
    seen = [m for m in range(nqb) if any(j <= q + sk - sq for q in
                                         range(m * 64, min(m * 64 + 64, sq)) for j in keys)]
    assert list(range(m_begin, m_begin + nq)) == list(range(seen[0], nqb)) and seen
    full = [m for m in range(m_begin, nqb) if m * 64 + sk - sq >= n_blk * bn + bn - 1]
    assert list(range(m_begin + n_masked, nqb)) == full    # unmasked: the first row sees all


class Cuda:
    """A stand-in for a CUDA tensor (what the checks read: shape, dtype, device, dim,
    transpose)."""

    def __init__(self, *shape, dtype=torch.bfloat16, device="cuda:0"):
        self.shape, self.dtype, self.device = torch.Size(shape), dtype, torch.device(device)
        self.is_cuda = self.device.type == "cuda"

    def dim(self):
        return len(self.shape)

    def transpose(self, a, b):
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return Cuda(*shape, dtype=self.dtype, device=str(self.device))


def _args(**change):
    args = dict(grad_o=Cuda(1, 8, 4, 64), q=Cuda(1, 8, 4, 64), k=Cuda(1, 9, 2, 64),
                v=Cuda(1, 9, 2, 64), o=Cuda(1, 8, 4, 64),
                lse=Cuda(1, 4, 8, dtype=torch.float32))
    args.update(change)
    return args


@pytest.mark.parametrize("change, options, message", [
    (dict(q=Cuda(1, 8, 4, 96), k=Cuda(1, 9, 2, 96), v=Cuda(1, 9, 2, 96),
          grad_o=Cuda(1, 8, 4, 96), o=Cuda(1, 8, 4, 96)), {}, "head_dim = 96 is not supported"),
    (dict(grad_o=Cuda(1, 8, 4, 128)), {}, r"grad_o is a bf16 tensor of q's shape \(1, 8, 4, 64\)"),
    (dict(o=Cuda(1, 8, 4, 64, dtype=torch.float16)), {}, "o is a bf16 tensor of q's shape"),
    (dict(grad_o=Cuda(1, 8, 4, 64, device="cuda:1")), {}, "grad_o is on q's device"),
    (dict(lse=Cuda(1, 8, 4, dtype=torch.float32)), {},
     r"lse is the forward's f32 \(batch, heads_q, seqlen_q\) = \(1, 4, 8\)"),
    (dict(lse=Cuda(1, 4, 8)), {}, "lse is the forward's f32"),
    (dict(lse=Cuda(1, 4, 8, dtype=torch.float32, device="cuda:1")), {}, "lse is on q's device"),
    (dict(q=Cuda(1, 8, 3, 64), grad_o=Cuda(1, 8, 3, 64), o=Cuda(1, 8, 3, 64)), {},
     "heads_q = 3 must be a multiple of heads_kv = 2"),
    (dict(k=Cuda(1, 9, 2, 64, dtype=torch.float32)), {}, "k is a bf16 tensor"),
    (dict(v=Cuda(1, 10, 2, 64)), {}, "k and v are"),
    (dict(q=Cuda(1, 8, 4, 64, device="cpu")), {}, "q is a CUDA tensor"),
    ({}, dict(causal=1), "causal is True or False"),
    ({}, dict(softmax_scale=-0.5), "softmax_scale is >= 0"),
    ({}, dict(layout="sbhd"), "layout is 'bshd'"),
    ({}, dict(config="fast"), "config is a Config"),
    ({}, dict(config=fb.Config(DQ_SPLIT="cols")), "DQ_SPLIT one of"),
    ({}, dict(config=fb.Config(DQ_SPLIT="rows")), "128 exactly when DQ_SPLIT='rows'"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys", BQ=128)), "128 exactly when DQ_SPLIT='rows'"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys", BQ=96)), r"BQ \(query rows per step\) is one"),
    ({}, dict(config=fb.Config(DQ_SPLIT="rows", BQ=128, DQ_WRITE="producer_warps")),
     "BQ=128 runs at head_dim 64 with DKV_SPLIT='keys'"),
    (dict(q=Cuda(1, 8, 4, 128), k=Cuda(1, 9, 2, 128), v=Cuda(1, 9, 2, 128),
          grad_o=Cuda(1, 8, 4, 128), o=Cuda(1, 8, 4, 128)),
     dict(config=fb.Config(DQ_SPLIT="rows", BQ=128)), "got head_dim 128"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys", DS_FIRST=1)), "DS_FIRST is True or False"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys", LONGEST_FIRST=None)),
     "LONGEST_FIRST is True or False"),
    (dict(q=Cuda(1, 8, 4, 256), k=Cuda(1, 9, 2, 256), v=Cuda(1, 9, 2, 256),
          grad_o=Cuda(1, 8, 4, 256), o=Cuda(1, 8, 4, 256)),
     dict(config=fb.Config(DKV_SPLIT="head_dim", DS_FIRST=True)), "DS_FIRST is True or False"),
    ({}, dict(config=fb.Config(DQ_SPLIT="head_dim")), "head_dim / 2 = 32 dQ columns"),
    ({}, dict(config=fb.Config(STAGES=12, DQ_SPLIT="keys")), "at most 231424 bytes of shared"),
    ({}, dict(config=fb.Config(STAGES=0, DQ_SPLIT="keys")), "STAGES >= 1"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys", DQ_WRITE="tma")), "DQ_WRITE is one of"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys", DS_STORE="stsm")), "DS_STORE is one of"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys", DQ_FIRST=1)), "DQ_FIRST is True or False"),
    (dict(q=Cuda(1, 8, 4, 256), k=Cuda(1, 9, 2, 256), v=Cuda(1, 9, 2, 256),
          grad_o=Cuda(1, 8, 4, 256), o=Cuda(1, 8, 4, 256)),
     dict(config=fb.Config(DKV_SPLIT="head_dim", DS_STORE="stmatrix")),
     "DS_STORE='stmatrix' is the DKV_SPLIT='keys'"),
    ({}, dict(config=fb.Config(DQ_SPLIT="keys_summed", DQ_WRITE="producer_warps")),
     "DQ_WRITE='producer_warps' hands dQ"),
    (dict(q=Cuda(1, 8, 4, 256), k=Cuda(1, 9, 2, 256), v=Cuda(1, 9, 2, 256),
          grad_o=Cuda(1, 8, 4, 256), o=Cuda(1, 8, 4, 256)),
     dict(config=fb.Config(DKV_SPLIT="head_dim", DQ_WRITE="producer_warps")),
     "DQ_WRITE='producer_warps' hands dQ"),
    ({}, dict(config=fb.Config(STAGES=8, DQ_SPLIT="keys", DQ_WRITE="producer_warps")),
     "it needs 233472 at head_dim 64"),      # 8 stages fit without the writer's sdQ
    (dict(q=Cuda(1, 8, 4, 256), k=Cuda(1, 9, 2, 256), v=Cuda(1, 9, 2, 256),
          grad_o=Cuda(1, 8, 4, 256), o=Cuda(1, 8, 4, 256)), dict(config=fb.Config()),
     "use DKV_SPLIT='head_dim'"),
])
def test_argument_errors_name_the_argument(change, options, message):
    with pytest.raises(ValueError, match=message):
        fb.flash_attention_backward(**_args(**change), **options)
