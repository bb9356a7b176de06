"""recipes/flash_attention_varlen.py on the CPU: every default specialization (head dims 64, 128
and 256, causal and not) assembles for sm_90a with no spills and no ptxas C75xx infos; its PTX
is the padded kernel's pipeline with TMA loads and masked plain O stores (no TMA store); the
protocol check walks a live tile (the sequence bounds it chose open the roles' branches); the
CPU interpreter matches numpy in float64 on packed batches (ragged, empty query and key
sequences, causal with seqlen_q > and < seqlen_k in one batch, GQA, 176-key blocks); a malformed
cu_seqlens never reaches outside the tensors; every argument error is a ValueError naming the
argument."""
import re
import warnings
from dataclasses import replace

import numpy as np
import pytest

from layoutkit.dsl.check.extract import extract
from layoutkit.dsl.interpreter import interpret
from layoutkit.ptx import assemble

from .test_recipe_flash_attention import FakeTensor
from .test_recipes_compile import load_recipe

fv = load_recipe("flash_attention_varlen")
padded = fv.padded


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills, ignored setmaxnreg, protocol notes
        return {name: (ptx, assemble(ptx)) for name, ptx in fv.compile_default().items()}


def test_default_specializations_assemble_without_spills_or_wgmma_infos(compiled):
    assert len(compiled) == len(padded.CONFIGS)
    for name, (ptx, cubin) in compiled.items():
        usage = cubin.resources["attention_varlen_body"]
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert usage.stack_frame_bytes == 0 and not usage.setmaxnreg_ignored, name
        for marker in ("Potential Performance Loss", "serialized", "injected", "C75"):
            assert marker not in cubin.ptxas_log, (name, cubin.ptxas_log)


def test_the_pipeline_is_the_padded_kernels_with_masked_o_stores(compiled):
    for cfg, (name, (ptx, _)) in zip(padded.CONFIGS.values(), compiled.items()):
        consumers = cfg.CONSUMERS                 # compile_default follows CONFIGS' order
        assert f"setmaxnreg.dec.sync.aligned.u32 {cfg.PRODUCER_REGISTERS}" in ptx, name
        assert "cp.async.bulk.tensor.4d.shared::cluster.global" in ptx, name   # Q, K, V
        assert "cp.async.bulk.tensor.4d.global.shared::cta" not in ptx, name   # no TMA store
        for wg in range(consumers):                                            # ping-pong ring
            barrier = padded.kernel_module.pingpong_barrier(consumers, wg)
            assert f"bar.sync {barrier}, 256" in ptx and f"bar.arrive {barrier}, 256" in ptx
        # O leaves in 16-byte masked stores; cu_seqlens are read once each, by every thread
        assert re.search(r"@%p\d+ st\.global\.v4\.b32", ptx), name
        assert len(re.findall(r"ld\.global\.s32", ptx)) == 4, name


def _arguments(lengths_q, lengths_k, hq=2, hk=1, d=64, causal=True, cfg=None, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v, cu_q, cu_k = fv.packed_batch(rng, lengths_q, lengths_k, hq, hk, d)
    o = np.zeros((1,) + q.shape, np.uint16)
    lse = np.zeros((hq, q.shape[0]), np.float32)
    cfg = cfg or padded.default_config(d, causal, max(lengths_k))
    return fv.kernel_arguments(q[None], k[None], v[None], o, lse, cu_q, cu_k, max(lengths_q),
                               causal, d ** -0.5, cfg)


@pytest.mark.parametrize("causal", [False, True])
def test_the_protocol_check_walks_a_live_tile(causal):
    _, args, constexprs = _arguments((70, 0, 130), (150, 20, 0), causal=causal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = fv.kernel_module.kernel_for(padded.default_config(64, causal, 150))
        protocol = extract(kernel.ir(*args, **constexprs))
    chosen = dict(item.split("=") for item in protocol.assumed.split(", "))
    assert int(chosen["cu_q1"]) > int(chosen["cu_q0"])         # the tile's rows exist
    producer = next(c for c in protocol.classes if c.role == "producer")
    loads = [e for e in producer.events if type(e).__name__ == "Copy"]
    assert len(loads) >= 1 + 2 * (2 * padded.CONFIGS[64, causal].STAGES + 1)   # Q, 5 x (K, V)


def test_interpreter_matches_numpy():
    assert fv.check_cpu(0) < 2 ** -7


@pytest.mark.parametrize("longest_first", [True, False])
def test_interpreter_matches_numpy_with_several_causal_query_tiles(longest_first):
    # sequence 0 has two 128-row query tiles (taken in reverse when longest_first), sequence
    # 1 one, so its second CTA along grid x has no tile
    case = ((130, 5), (140, 5), 1, 1, 64, True)
    cfg = replace(padded.CONFIGS[64, True], LONGEST_FIRST=longest_first)
    assert fv.check_cpu(2, cases=(case,), config=cfg) < 2 ** -7


def test_interpreter_matches_numpy_with_176_key_blocks():
    case = ((90, 40), (300, 77), 1, 1, 128, False)     # one head: GQA is CPU_CASES' subject
    assert fv.check_cpu(1, cases=(case,), config=padded.Config(BN=176)) < 2 ** -7


def test_a_malformed_cu_seqlens_stays_inside_the_tensors():
    """Offsets that decrease, go negative or pass the tensors' ends compute garbage rows but
    never reach outside an argument (the interpreter faults on any such access). One head:
    the offsets are per sequence, the same for every head (GQA's head mapping: CPU_CASES)."""
    grid, args, constexprs = _arguments((40, 30), (50, 20), hq=1)
    q, k, v, o, lse, cu_q, cu_k, *rest = args
    bad_q = np.array([-5, 90, 10], np.int32)     # negative, past total_q = 70, then decreasing
    bad_k = np.array([0, 250, 500], np.int32)    # past total_k = 70: a crossing block, then past
    interpret(fv.attention_varlen_kernel, (2, 1, 2), q, k, v, o, lse, bad_q, bad_k, *rest,
              **constexprs)
    assert np.isfinite(lse).all()                # every row was sequence 0's, stored once


def _inputs(total_q=10, total_k=12, hq=4, hk=2, d=64, batch=2, **kw):
    q = FakeTensor((total_q, hq, d), **kw)
    k, v = FakeTensor((total_k, hk, d)), FakeTensor((total_k, hk, d))
    cu = FakeTensor((batch + 1,), dtype="torch.int32")
    return dict(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=7,
                max_seqlen_k=9, causal=False, softmax_scale=None, config=None)


@pytest.mark.parametrize("change, message", [
    (dict(q=FakeTensor((1, 10, 4, 64))), r"q is a 3-D tensor \(total_tokens, heads, head_dim\), "
                                         r"got FakeTensor of shape \(1, 10, 4, 64\)"),
    (dict(v=FakeTensor((12, 2, 64), dtype="torch.float16")), r"v is a bf16 tensor, got "
                                                             r"torch.float16"),
    (dict(v=FakeTensor((13, 2, 64))), r"k and v are \(total_k, heads_kv, head_dim\) with q's "
                                      r"head_dim 64, got k \(12, 2, 64\) and v \(13, 2, 64\)"),
    (dict(cu_seqlens_q=FakeTensor((3,), dtype="torch.int64")), r"cu_seqlens_q is a 1-D int32 "
     r"tensor of batch \+ 1 offsets, got FakeTensor torch.int64 of shape \(3,\)"),
    (dict(cu_seqlens_k=FakeTensor((0,), dtype="torch.int32")), r"cu_seqlens_k is a 1-D int32 "
     r"tensor .* of shape \(0,\)"),
    (dict(cu_seqlens_k=FakeTensor((4,), dtype="torch.int32")), r"cu_seqlens_q and cu_seqlens_k "
     r"hold batch \+ 1 offsets each, got 3 and 4"),
    (dict(cu_seqlens_q=FakeTensor((65537,), dtype="torch.int32"),
          cu_seqlens_k=FakeTensor((65537,), dtype="torch.int32")),
     r"batch = 65536 sequences is over 65535"),
    (dict(max_seqlen_q=-1), r"max_seqlen_q is a non-negative Python int .* got -1"),
    (dict(max_seqlen_k=7.0), r"max_seqlen_k is a non-negative Python int .* got 7.0"),
    (dict(inputs=dict(d=96)), r"head_dim = 96 is not supported; the kernel handles 64, 128, 256"),
    (dict(inputs=dict(hq=3)), r"heads_q = 3 must be a multiple of heads_kv = 2"),
    (dict(causal="yes"), r"causal is True or False, got 'yes'"),
    (dict(softmax_scale=-1.0), r"softmax_scale is >= 0"),
    (dict(causal=True, config=padded.Config(BN=112)), r"causal attention needs a key block BN "
     r"dividing 128 \(the query tile\) or one of \(80, 176\), got config BN = 112"),
    (dict(inputs=dict(device="cpu")), r"q is a CUDA tensor on q's device \(cpu\), got one on "
                                      r"cpu"),
    (dict(cu_seqlens_k=FakeTensor((3,), dtype="torch.int32", device="cuda:1")),
     r"cu_seqlens_k is a CUDA tensor on q's device \(cuda:0\), got one on cuda:1"),
])
def test_argument_errors_name_the_argument(change, message):
    args = _inputs(**change.pop("inputs", {}))
    args.update(change)
    with pytest.raises(ValueError, match="flash_attention_varlen: " + message):
        fv.check_inputs(**args)


def test_valid_arguments_give_the_default_config():
    assert fv.check_inputs(**_inputs()) == padded.CONFIGS[64, False]
    args = _inputs(d=128)
    args["max_seqlen_k"] = 8192
    assert fv.check_inputs(**args) == padded.default_config(128, False, 8192)


def test_describe_names_runs_of_lengths():
    assert fv.describe([4096] * 4) == "4096x4"
    assert fv.describe([8192] + [512] * 12 + [0]) == "8192x1+512x12+0x1"


def test_the_grid_covers_the_longest_sequence():
    grid, _, _ = _arguments((300, 0, 129), (10, 10, 10), causal=False)
    assert grid == (2, 2, 3)                    # ceil(300 / 192) tiles, heads_q, batch
    assert _arguments((300, 0, 129), (10, 10, 10))[0] == (3, 2, 3)   # causal: 128-row tiles
