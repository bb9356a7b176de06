"""recipes/flash_attention.py on the CPU: every default specialization (head dims 64, 128 and
256, causal and not) assembles for sm_90a with no spills and no ptxas C75xx infos, its SASS is
HGMMA (SS for S = Q K^T, RS for P V) with no local memory, the pipeline switches change what
they claim, the CPU interpreter matches numpy in float64 (ragged, GQA, causal, seqlen_q 1,
every ablation config, 176-key blocks), the block counts of causal tiles are exact, and every
argument error is a ValueError naming the argument."""
import re
import warnings
from dataclasses import replace

import pytest

import layoutkit as lk
from layoutkit.ptx import assemble, disassemble

from .test_recipes_compile import load_recipe

fa = load_recipe("flash_attention")
kernel_module = fa.kernel_module


def _spec(d: int, causal: bool, cfg):
    t = lk.TensorSpec(lk.bf16, (4, 4096, 16, d))
    _, args, constexprs = fa.kernel_arguments(t, t, t, t, lk.TensorSpec(lk.f32, (64, 4096)),
                                              causal, d ** -0.5, cfg)
    return fa.kernel_for(cfg).specialize(*args, **constexprs)


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills and ignored setmaxnreg are warnings
        return {name: (ptx, assemble(ptx)) for name, ptx in fa.compile_default().items()}


def test_default_specializations_assemble_without_spills_or_wgmma_infos(compiled):
    assert sorted(compiled) == ["attention_d128_bn128_s2_causal", "attention_d128_bn176_s2",
                                "attention_d256_bn80_s2", "attention_d256_bn80_s2_causal",
                                "attention_d64_bn128_s2_c3", "attention_d64_bn128_s2_causal"]
    for name, (_, cubin) in compiled.items():
        usage = cubin.resources["attention_body"]
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert usage.stack_frame_bytes == 0 and not usage.setmaxnreg_ignored, name
        for marker in ("Potential Performance Loss", "serialized", "injected", "C75"):
            assert marker not in cubin.ptxas_log, (name, cubin.ptxas_log)


@pytest.mark.parametrize("d", fa.HEAD_DIMS)
def test_sass_is_hgmma_ss_and_rs_without_local_memory(compiled, d):
    for causal in (False, True):
        cfg = fa.CONFIGS[d, causal]
        bn, consumers = cfg.BN, cfg.CONSUMERS
        sass = disassemble(compiled[fa.default_name(d, causal)][1])
        assert not re.search(r"\b(LDL|STL)\b", sass)
        ss = re.findall(rf"HGMMA\.64x{bn}x16\.F32\.BF16 R\d+, gdesc\[UR\d+\]", sass)
        rs = re.findall(rf"HGMMA\.64x{d}x16\.F32\.BF16 R\d+, R\d+, gdesc\[UR\d+\]\.tnspB", sass)
        # per consumer warpgroup: prologue S, one S + P V per loop body, epilogue P V; the
        # masked loop runs past the first block only where causal tiles cross the diagonal
        loops = 2 if causal else 1
        assert len(ss) == consumers * (1 + loops) * d // 16, (d, causal)
        assert len(rs) == consumers * (loops + 1) * bn // 16, (d, causal)
        assert "MUFU.EX2" in sass and "F2FP.BF16.F32.PACK_AB" in sass


def test_pipeline_pieces_are_in_the_ptx(compiled):
    for (d, causal), cfg in fa.CONFIGS.items():
        name = fa.default_name(d, causal)
        ptx, consumers = compiled[name][0], cfg.CONSUMERS
        assert f"setmaxnreg.dec.sync.aligned.u32 {cfg.PRODUCER_REGISTERS}" in ptx, name
        assert ptx.count(f"setmaxnreg.inc.sync.aligned.u32 {cfg.CONSUMER_REGISTERS}") == \
            consumers, name
        assert "cp.async.bulk.tensor.4d.shared::cluster.global" in ptx, name    # Q, K, V loads
        assert "cp.async.bulk.tensor.4d.global.shared::cta" in ptx, name        # O store
        assert "mbarrier.arrive.expect_tx" in ptx and "mbarrier.try_wait.parity" in ptx, name
        assert "wgmma.wait_group.sync.aligned 1" in ptx, name           # intra-warpgroup overlap
        for wg in range(consumers):                                     # ping-pong ring
            barrier = kernel_module.pingpong_barrier(consumers, wg)
            assert f"bar.sync {barrier}, 256" in ptx and f"bar.arrive {barrier}, 256" in ptx
        assert "ex2.approx" in ptx and "lg2.approx.f32" in ptx, name
        assert "fence.proxy.async.shared::cta" in ptx, name


def test_switches_remove_what_they_name():
    base = fa.CONFIGS[128, False]
    no_overlap = _spec(128, False, replace(base, OVERLAP=False)).ptx
    assert "wgmma.wait_group.sync.aligned 1" not in no_overlap
    no_pingpong = _spec(128, False, replace(base, PINGPONG=False)).ptx
    assert "bar.arrive" not in no_pingpong and "bar.sync 3" not in no_pingpong
    budget = _spec(128, False, replace(base, PRODUCER_REGISTERS=40, CONSUMER_REGISTERS=232)).ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in budget
    assert budget.count("setmaxnreg.inc.sync.aligned.u32 232") == 2


@pytest.mark.parametrize("d, cfg", [(128, replace(fa.CONFIGS[128, False], BN=128)),
                                    (64, replace(fa.CONFIGS[64, False], STAGES=1))],
                         ids=["d128-bn128", "1stage"])
def test_other_configs_assemble_without_spills(d, cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cubin = _spec(d, False, cfg).cubin
    usage = cubin.resources["attention_body"]
    assert usage.spill_store_bytes == 0 and "C75" not in cubin.ptxas_log


def test_interpreter_matches_numpy():
    assert fa.check_cpu(0) < 2 ** -7          # non-causal ragged GQA; causal sq < sk, sq > sk


# The interpreter's cost is a key block per query tile and head: one head where GQA (the
# CPU_CASES above) is not the subject, and as many key blocks as the path needs (a ring lap
# and back, a loop body that overlaps the next block's S).
@pytest.mark.parametrize("case, cfg", [
    ((1, 64, 600, 1, 1, 64, True), None),                   # several ring laps, unmasked loop
    ((1, 1, 77, 1, 1, 64, False), None),                    # one query row
    ((1, 70, 300, 1, 1, 128, False), None),                 # 176-key blocks
    ((1, 70, 300, 1, 1, 128, False), "BN=128"),
    ((1, 64, 300, 1, 1, 64, True), "no ping-pong"),
    ((1, 64, 300, 1, 1, 64, True), "no intra-warpgroup overlap"),
    ((1, 64, 300, 1, 1, 64, False), "1 stage"),             # three laps of the one stage
    ((1, 70, 200, 1, 1, 256, False), None),                 # head dim 256, 80-key blocks
    ((1, 100, 150, 1, 1, 256, True), None),                 # head dim 256 causal, 80-key blocks
    ((1, 130, 40, 1, 1, 64, True), "tiles in block order"),  # CPU_CASES' two tiles, in order
    ((1, 130, 300, 1, 1, 128, True), "BN=176"),             # causal, up to 3 masked blocks
], ids=["laps", "sq1", "bn176", "d128-bn128", "no-pingpong", "no-overlap", "1stage", "d256",
        "d256-causal", "block-order", "causal-bn176"])
def test_interpreter_matches_numpy_per_config(case, cfg):
    d, causal = case[5], case[6]
    config = None if cfg is None else fa.ablations(d, causal)[cfg]
    assert fa.check_cpu(1, cases=(case,), config=config) < 2 ** -7


def test_reference_is_numerically_stable_with_huge_logits():
    import numpy as np
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 5, 1, 64)) * 1e3
    k = rng.standard_normal((1, 7, 1, 64)) * 1e3
    v = rng.standard_normal((1, 7, 1, 64))
    o, lse = fa.reference(q, k, v, True, 0.125)
    assert np.isfinite(o).all() and np.isfinite(lse).all()


@pytest.mark.parametrize("bm", [128, 192])      # two and three consumer warpgroups
@pytest.mark.parametrize("bn", [64, 80, 128, 176])
@pytest.mark.parametrize("causal", [False, True])
def test_key_blocks_cover_exactly_the_visible_keys(bn, causal, bm):
    # the kernel's own arithmetic (lk.minimum/maximum of Python ints are Python's min/max);
    # exact for any key block, also those causal configs do not take
    for sq in range(1, 300, 7):
        for sk in range(0, 420, 11):
            for m in range(-(-sq // bm)):
                n_end, n_masked, _ = kernel_module.key_blocks(sq, sk, m, bn, causal, bm)
                assert 1 <= n_masked <= n_end
                rows = range(m * bm, min(sq, m * bm + bm))
                seen = [min(sk, r + sk - sq + 1) if causal else sk for r in rows]  # keys < seen
                if max(seen) > 0:
                    assert n_end * bn >= max(seen)                     # every visible key
                    assert (n_end - 1) * bn < max(seen)                # no empty block
                else:
                    assert n_end == 1                                  # one fully masked block
                for j in range(n_end - n_masked):                      # unmasked blocks
                    assert (j + 1) * bn <= min(seen)


def test_default_config_takes_the_key_block_that_wastes_least():
    # 176-key blocks pad 2048 keys to 2112; 128-key blocks cost 1.3% more per key: 2075 < 2112
    assert [fa.default_config(128, False, sk).BN for sk in (1, 1000, 2048, 4096, 8192, 16384)] \
        == [128, 128, 128, 128, 176, 176]
    assert fa.default_config(128, False, 176 * 40) == fa.CONFIGS[128, False]      # no padding
    for d, causal in fa.CONFIGS:
        if (d, causal) not in fa.ALTERNATIVE_BLOCKS:
            assert fa.default_config(d, causal, 2048) == fa.CONFIGS[d, causal]
    q, k, v = _qkv(sq=10, sk=2048, d=128)
    assert fa.check_inputs(q, k, v, False, None, "bshd", None)[3].BN == 128
    with pytest.raises(ValueError, match=r"no default config for head_dim = 96, causal = False"):
        fa.default_config(96, False, 2048)


class FakeTensor:
    """Shape, dtype, device and transpose of a tensor: enough for check_inputs (no torch)."""

    def __init__(self, shape, dtype="torch.bfloat16", device="cuda:0"):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.is_cuda = device.startswith("cuda")

    def dim(self):
        return len(self.shape)

    def transpose(self, a, b):
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return FakeTensor(shape, self.dtype, self.device)


def _qkv(sq=10, sk=12, hq=4, hk=2, d=64, **kw):
    return (FakeTensor((2, sq, hq, d), **kw), FakeTensor((2, sk, hk, d)),
            FakeTensor((2, sk, hk, d)))


@pytest.mark.parametrize("change, message", [
    (dict(layout="bsdh"), r"layout is 'bshd' .* or 'bhsd' .*, got 'bsdh'"),
    (dict(q=FakeTensor((2, 10, 64))), r"q is a 4-D tensor \(bshd\), got FakeTensor of shape "
                                      r"\(2, 10, 64\)"),
    (dict(k=FakeTensor((2, 12, 2, 64), dtype="torch.float16")),
     r"k is a bf16 tensor, got torch.float16"),
    (dict(v=FakeTensor((2, 13, 2, 64))), r"k and v are \(batch, seqlen_k, heads_kv, head_dim\) "
                                         r".*got k \(2, 12, 2, 64\) and v \(2, 13, 2, 64\)"),
    (dict(k=FakeTensor((3, 12, 2, 64)), v=FakeTensor((3, 12, 2, 64))), r"q's batch 2"),
    (dict(qkv=dict(d=96)), r"head_dim = 96 is not supported; the kernel handles 64, 128, 256"),
    (dict(qkv=dict(hq=3)), r"heads_q = 3 must be a multiple of heads_kv = 2"),
    (dict(causal=1), r"causal is True or False, got 1"),
    (dict(softmax_scale=float("nan")), r"softmax_scale is a finite float or None"),
    (dict(softmax_scale="0.1"), r"softmax_scale is a finite float or None .*got '0.1'"),
    (dict(softmax_scale=-0.125), r"softmax_scale is >= 0 .*got -0.125"),
    (dict(config={"BN": 64}), r"config is a Config, got \{'BN': 64\}"),
    (dict(causal=True, config=fa.Config(BN=112)), r"BN dividing 128 .*got config BN = 112"),
    (dict(config=fa.Config(BN=176, STAGES=3), qkv=dict(d=128)),
     r"needs 303104 bytes of shared memory at head_dim 128"),
    (dict(qkv=dict(device="cpu")), r"q is a CUDA tensor, got one on cpu"),
    (dict(v=FakeTensor((2, 12, 2, 64), device="cuda:1")),
     r"v is on q's device \(cuda:0\), got cuda:1"),
])
def test_argument_errors_name_the_argument(change, message):
    q, k, v = _qkv(**change.pop("qkv", {}))
    args = dict(q=q, k=k, v=v, causal=False, softmax_scale=None, layout="bshd", config=None)
    args.update(change)
    with pytest.raises(ValueError, match=message):
        fa.check_inputs(**args)


def test_bhsd_views_are_accepted():
    q, k, v = (x.transpose(1, 2) for x in _qkv())
    qs, ks, vs, cfg = fa.check_inputs(q, k, v, False, None, "bhsd", None)
    assert qs.shape == (2, 10, 4, 64) and ks.shape == (2, 12, 2, 64)
    assert cfg == fa.CONFIGS[64, False]
