"""recipes/flash_attention_kvcache.py on the CPU: every default specialization (head dims 64,
128 and 256, paged, causal and not, one split and several, and the combine kernel) assembles
for sm_90a with no spills and no ptxas C75xx infos; the decode kernel is one warpgroup with no
warp roles (so CTAs share an SM), TMA loads of K and V, RS wgmmas (S = Q K^T from shared Q at
head dim 256) and masked plain stores, and allocates the shared memory its Config counts; the
protocol check walks a live ring; the CPU interpreter matches numpy in float64 (paged and
contiguous, GQA, group 3, two query tiles, lengths 0 and 1, causal with seqlen_q > 1 and > the
cache, empty splits, more splits than a combine chunk, NaN in every unused cache slot, head
dims 64, 128, 256); malformed cache_seqlens and block tables never reach outside the tensors;
the split heuristic's choices; every argument error is a ValueError naming the argument."""
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutkit.dsl.check.extract import extract
from layoutkit.dsl.interpreter import interpret
from layoutkit.ptx import assemble

from .test_recipe_flash_attention import FakeTensor
from .test_recipes_compile import load_recipe

fk = load_recipe("flash_attention_kvcache")


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills, protocol notes
        return {name: (ptx, assemble(ptx)) for name, ptx in fk.compile_default().items()}


def test_default_specializations_assemble_without_spills_or_wgmma_infos(compiled):
    assert sorted(compiled) == [
        "kvcache_combine_d128", "kvcache_combine_d256", "kvcache_combine_d64",
        "kvcache_d128_bn64_s3", "kvcache_d128_bn64_s3_causal_split",
        "kvcache_d128_bn64_s3_page16", "kvcache_d256_bn64_s3",
        "kvcache_d256_bn64_s3_causal_split", "kvcache_d64_bn64_s6",
        "kvcache_d64_bn64_s6_causal_split"]
    for name, (_, cubin) in compiled.items():
        (usage,) = cubin.resources.values()
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert usage.stack_frame_bytes == 0, name
        for marker in ("Potential Performance Loss", "serialized", "injected", "C75"):
            assert marker not in cubin.ptxas_log, (name, cubin.ptxas_log)


def test_the_decode_kernel_is_one_warpgroup_of_tma_loads_and_rs_wgmmas(compiled):
    for name, (ptx, _) in compiled.items():
        if "combine" in name:
            assert "wgmma" not in ptx and "cp.async.bulk" not in ptx, name
            continue
        assert ".maxntid 128" in ptx or ".reqntid 128" in ptx, name
        assert "setmaxnreg" not in ptx, name               # no warp roles: CTAs share an SM
        assert "cp.async.bulk.tensor.4d.shared::cluster.global" in ptx, name    # K, V
        assert "cp.async.bulk.tensor" not in ptx.replace(
            "cp.async.bulk.tensor.4d.shared::cluster.global", ""), name      # no TMA store
        mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.\S+", ptx)
        assert mmas and all(".bf16.bf16" in m for m in mmas), name
        # A from registers ({a registers}, not a descriptor): both products, except S = Q K^T
        # at head dim 256, whose Q is read from shared memory (Q_SHARED)
        register_a = len(re.findall(r"wgmma\.mma_async[^;]*\{[^}]*\},\s*\{", ptx))
        s_products = len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16", ptx))
        expected = ptx.count("wgmma.mma_async") - (s_products if "d256" in name else 0)
        assert register_a == expected, name



@pytest.mark.parametrize("d", [64, 128, 256])
def test_the_configs_shared_memory_is_the_kernels(d):
    """Config.smem_bytes (what the split heuristic's CTAs per SM count on) is the kernel's
    allocation up to its mbarriers."""
    cfg = fk.CONFIGS[d]
    q = np.zeros((2, 1, 8, d), np.uint16)
    cache = np.zeros((2, 256, 2, d), np.uint16)
    _, args, constexprs = fk.kernel_arguments(q, cache, cache, None, np.zeros(2, np.int32), q,
                                              np.zeros((1,) * 5, np.float32),
                                              np.zeros((1, 2, 8, 1), np.float32), 1, False,
                                              0.1, cfg)
    allocated = fk.decode_kernel.ir(*args, **constexprs).shared_bytes
    assert 0 <= allocated - cfg.smem_bytes(d) < 1024


@pytest.mark.parametrize("paged", [False, True])
def test_the_protocol_check_walks_a_ring_of_several_laps(paged):
    cfg = fk.CONFIGS[64]
    batch, hk, d = 2, 2, 64
    q = np.zeros((batch, 2, 8, d), np.uint16)
    keys = 64 * 3 * cfg.STAGES
    cache = np.zeros((batch * 3 * cfg.STAGES, 64, hk, d) if paged else (batch, keys, hk, d),
                     np.uint16)
    table = np.arange(batch * 3 * cfg.STAGES, dtype=np.int32).reshape(batch, -1) if paged \
        else None
    seqlens = np.array([keys, 5], np.int32)
    lse = np.zeros((1, batch, 8, 2), np.float32)
    _, args, constexprs = fk.kernel_arguments(q, cache, cache, table, seqlens, q,
                                              np.zeros((1,) * 5, np.float32), lse, 1, True,
                                              d ** -0.5, cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        protocol = extract(fk.decode_kernel.ir(*args, **constexprs))
    loads = [e for c in protocol.classes for e in c.events if type(e).__name__ == "Copy"]
    assert len(loads) >= 2 * (cfg.STAGES + 1)          # the prefill and refills of K and V


def test_interpreter_matches_numpy():
    assert fk.check_cpu(0) < 2 ** -7


def test_interpreter_matches_numpy_at_head_dim_128_with_splits():
    # one kv head of a group of 4 (a second kv head: CPU_CASES' first); 200 keys over 3
    # splits, and 64 keys, which leave two splits empty
    case = (2, 4, 4, 1, 128, 256, 128, (200, 64), True, 3)
    assert fk.check_cpu(1, cases=(case,)) < 2 ** -7


def test_interpreter_matches_numpy_with_pages_smaller_than_a_key_block():
    """16- and 32-key pages: a 64-key block is 4 or 2 TMA boxes, each from its own page."""
    cases = ((2, 1, 4, 2, 64, 128, 16, (100, 37), False, 1),
             (1, 3, 2, 1, 64, 320, 32, (300,), True, 2))
    assert fk.check_cpu(5, cases=cases) < 2 ** -7


def test_pages_smaller_than_a_block_load_one_box_per_page(compiled):
    small, big = (compiled[name][0] for name in ("kvcache_d128_bn64_s3_page16",
                                                 "kvcache_d128_bn64_s3"))
    load = "cp.async.bulk.tensor.4d.shared::cluster.global"
    assert small.count(load) == 4 * big.count(load)    # 4 pages of 16 keys a 64-key block
    lookups = r"ld\.global(\.\w+)*\.[su]32"
    assert len(re.findall(lookups, small)) > len(re.findall(lookups, big))


def test_interpreter_matches_numpy_with_more_splits_than_a_combine_chunk():
    case = (1, 1, 2, 1, 64, 1024, None, (1000,), False, 11)       # 11 splits, chunks of 8
    assert fk.kernel_module.SPLIT_CHUNK < 11
    assert fk.check_cpu(2, cases=(case,)) < 2 ** -7


def test_interpreter_matches_numpy_at_head_dim_256_with_q_in_shared_memory():
    case = (1, 2, 2, 1, 256, 192, 64, (150,), True, 2)
    assert fk.CONFIGS[256].Q_SHARED
    assert fk.check_cpu(4, cases=(case,)) < 2 ** -7


def test_malformed_lengths_and_block_tables_stay_inside_the_tensors():
    """Lengths that are negative or past the cache's capacity and page numbers that are negative
    or past the pool compute garbage rows but never reach outside an argument (the interpreter
    faults on any such access): the kernel clamps lengths and TMA zero-fills pages outside."""
    cfg = fk.CONFIGS[64]
    rng = np.random.default_rng(3)
    q = rng.integers(0, 1 << 14, (3, 1, 2, 64)).astype(np.uint16)
    k, v, table = fk.random_cache(rng, 3, 128, 1, 64, 64)
    table[0, 0], table[1, 1] = -7, 10 ** 6
    seqlens = np.array([10 ** 6, -5, 100], np.int32)
    o = np.zeros(q.shape, np.uint16)
    lse = np.zeros((1, 3, 2, 1), np.float32)
    grid, args, constexprs = fk.kernel_arguments(q, k, v, table, seqlens, o,
                                                 np.zeros((1,) * 5, np.float32), lse, 1, False,
                                                 0.125, cfg)
    interpret(fk.decode_kernel, grid, *args, **constexprs)
    assert np.isfinite(lse[0, 0]).all() and np.isfinite(lse[0, 2]).all()
    assert (lse[0, 1] == -np.inf).all()                  # a negative length is an empty cache


@pytest.mark.parametrize("tiles, capacity_blocks, expected", [
    (1, 1024, 128), (8, 1024, 33), (64, 1024, 4), (100, 1024, 2), (133, 1024, 1),
    (1024, 1024, 1), (8, 16, 4), (8, 3, 1), (1, 0, 1)])
def test_the_split_heuristic(tiles, capacity_blocks, expected):
    """132 SMs x 2 CTAs: the most splits that keep one wave (264 CTAs), at most 128 and one
    per 4 key blocks."""
    assert fk.choose_splits(tiles, capacity_blocks, 132, 2) == expected


@given(tiles=st.integers(1, 5000), blocks=st.integers(0, 20000), sms=st.integers(1, 200),
       per_sm=st.integers(1, 4))
def test_the_split_heuristic_fills_one_wave_at_most(tiles, blocks, sms, per_sm):
    """The count is the largest that keeps tiles * splits within one wave, at most MAX_SPLITS
    and one split per MIN_BLOCKS_PER_SPLIT blocks (and at least 1)."""
    n = fk.choose_splits(tiles, blocks, sms, per_sm)
    most = max(1, min(fk.MAX_SPLITS, blocks // fk.MIN_BLOCKS_PER_SPLIT))
    assert 1 <= n <= most
    assert n == 1 or tiles * n <= sms * per_sm
    assert n == most or tiles * (n + 1) > sms * per_sm


def test_the_heuristic_counts_ctas_per_sm_by_shared_memory_and_registers(compiled):
    assert [fk.CONFIGS[d].ctas_per_sm(d) for d in (64, 128, 256)] == [2, 2, 1]
    assert fk.Config(BN=64, STAGES=2).ctas_per_sm(64) == fk.MAX_CTAS_PER_SM
    for name, (_, cubin) in compiled.items():          # what ptxas took fits that many CTAs
        (usage,) = cubin.resources.values()
        per_warp = -(-usage.registers * 32 // 256) * 256   # allocated in units of 256
        assert per_warp * 4 * fk.MAX_CTAS_PER_SM <= 65536, name


def _inputs(batch=2, sq=1, hq=8, hk=2, d=64, pages=None, page_size=64, **kw):
    q = FakeTensor((batch, sq, hq, d), **kw)
    shape = (batch, 256, hk, d) if pages is None else (pages, page_size, hk, d)
    table = None if pages is None else FakeTensor((batch, 4), dtype="torch.int32")
    return dict(q=q, k_cache=FakeTensor(shape), v_cache=FakeTensor(shape),
                cache_seqlens=FakeTensor((batch,), dtype="torch.int32"), block_table=table,
                causal=False, softmax_scale=None, num_splits=None, config=None)


@pytest.mark.parametrize("change, message", [
    (dict(q=FakeTensor((2, 8, 64))), r"q is a 4-D tensor, got FakeTensor of shape \(2, 8, 64\)"),
    (dict(k_cache=FakeTensor((2, 256, 2, 64), dtype="torch.float16")),
     r"k_cache is a bf16 tensor, got torch.float16"),
    (dict(v_cache=FakeTensor((2, 255, 2, 64))), r"k_cache and v_cache have one shape .* got "
     r"k_cache \(2, 256, 2, 64\) and v_cache \(2, 255, 2, 64\)"),
    (dict(k_cache=FakeTensor((2, 256, 2, 128)), v_cache=FakeTensor((2, 256, 2, 128))),
     r"k_cache and v_cache have one shape .* with q's head_dim 64"),
    (dict(inputs=dict(sq=17)), r"seqlen_q = 17 \(q's mode 1\) is not in 1..16"),
    (dict(inputs=dict(sq=0)), r"seqlen_q = 0 \(q's mode 1\) is not in 1..16"),
    (dict(inputs=dict(d=96)), r"head_dim = 96 is not supported; the kernel handles 64, 128, "
                              r"256"),
    (dict(inputs=dict(hq=7)), r"heads_q = 7 must be a multiple of heads_kv = 2"),
    (dict(inputs=dict(hq=130, hk=1)), r"heads_q / heads_kv = 130 query heads per KV head is "
                                      r"over 64"),
    (dict(inputs=dict(batch=40000)), r"batch \* heads_kv = 80000 is over 65535"),
    (dict(cache_seqlens=FakeTensor((2,), dtype="torch.int64")), r"cache_seqlens is a 1-D int32 "
     r"tensor of batch = 2 lengths, got FakeTensor torch.int64 of shape \(2,\)"),
    (dict(cache_seqlens=FakeTensor((3,), dtype="torch.int32")), r"cache_seqlens .* of shape "
                                                                r"\(3,\)"),
    (dict(cache_seqlens=[3, 4]), r"cache_seqlens is a 1-D int32 tensor .* got list"),
    (dict(k_cache=FakeTensor((3, 256, 2, 64)), v_cache=FakeTensor((3, 256, 2, 64))),
     r"a contiguous cache is \(batch = 2, seqlen_cache, heads_kv, head_dim\), got k_cache "
     r"\(3, 256, 2, 64\) \(pass block_table for a paged cache\)"),
    (dict(inputs=dict(pages=9), block_table=FakeTensor((2, 4), dtype="torch.int64")),
     r"block_table is a 2-D int32 tensor \(batch = 2, max_pages\), got FakeTensor torch.int64"),
    (dict(inputs=dict(pages=9), block_table=FakeTensor((3, 4), dtype="torch.int32")),
     r"block_table is a 2-D int32 tensor .* of shape \(3, 4\)"),
    (dict(inputs=dict(pages=9), block_table=FakeTensor((8,), dtype="torch.int32")),
     r"block_table is a 2-D int32 tensor .* of shape \(8,\)"),
    (dict(inputs=dict(pages=9, page_size=96)), r"page_size = 96 \(k_cache's mode 1\) must be "
                                               r"a multiple of the key block 64, or a multiple "
                                               r"of 16 dividing it"),
    (dict(inputs=dict(pages=9, page_size=8)), r"page_size = 8 .* multiple of the key block"),
    (dict(inputs=dict(pages=9, page_size=48)), r"page_size = 48 .* multiple of the key block"),
    (dict(causal=1), r"causal is True or False, got 1"),
    (dict(softmax_scale=float("nan")), r"softmax_scale is a finite float >= 0 or None"),
    (dict(softmax_scale=-0.5), r"softmax_scale is a finite float >= 0 or None"),
    (dict(num_splits=0), r"num_splits is a Python int in 1..128, got 0"),
    (dict(num_splits=129), r"num_splits is a Python int in 1..128, got 129"),
    (dict(num_splits=2.0), r"num_splits is a Python int in 1..128, got 2.0"),
    (dict(config="fast"), r"config is a Config, got 'fast'"),
    (dict(config=fk.Config(STAGES=16)), r"config .* needs 262144 bytes of shared memory at "
                                        r"head_dim 64, over the 231424 available"),
    (dict(inputs=dict(device="cpu")), r"q is a CUDA tensor on q's device \(cpu\), got one on "
                                      r"cpu"),
    (dict(v_cache=FakeTensor((2, 256, 2, 64), device="cuda:1")),
     r"v_cache is a CUDA tensor on q's device \(cuda:0\), got one on cuda:1"),
    (dict(cache_seqlens=FakeTensor((2,), dtype="torch.int32", device="cpu")),
     r"cache_seqlens is a CUDA tensor on q's device \(cuda:0\), got one on cpu"),
    (dict(inputs=dict(pages=9), block_table=FakeTensor((2, 4), dtype="torch.int32",
                                                       device="cpu")),
     r"block_table is a CUDA tensor on q's device \(cuda:0\), got one on cpu"),
])
def test_argument_errors_name_the_argument(change, message):
    args = _inputs(**change.pop("inputs", {}))
    args.update(change)
    with pytest.raises(ValueError, match="flash_attention_with_kvcache: " + message):
        fk.check_inputs(**args)


@pytest.mark.parametrize("inputs", [dict(), dict(pages=9), dict(pages=9, page_size=128),
                                    dict(pages=9, page_size=16), dict(pages=9, page_size=32),
                                    dict(d=128, hq=32, hk=8, sq=16)])
def test_valid_arguments_give_the_config(inputs):
    d = inputs.get("d", 64)
    assert fk.check_inputs(**_inputs(**inputs)) == fk.CONFIGS[d]


def test_gather_cache_orders_pages_by_the_block_table():
    k = np.arange(4 * 2 * 1 * 1).reshape(4, 2, 1, 1)
    table = np.array([[2, 0], [3, 1]], np.int32)
    assert fk.gather_cache(k, table, 2)[:, :, 0, 0].tolist() == [[4, 5, 0, 1], [6, 7, 2, 3]]
    assert fk.gather_cache(k, None, 4) is k
