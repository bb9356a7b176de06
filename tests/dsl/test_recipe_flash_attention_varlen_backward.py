"""recipes/flash_attention_varlen_backward.py on the CPU: every default specialization (head dims
64, 128 and 256, causal and not) and its pre- and post-pass assemble for sm_90a with no spills and
no ptxas C75xx infos (and every ablation config's causal kernel without spills), dQ by TMA
reduce-adds (head dims 64, 128) or red.global.add.v2.f32 (256) and dK, dV by plain stores (no
TMA store); the protocol check walks a live key
block; the CPU interpreter runs the three kernels on packed batches (ragged, empty query and key
sequences, GQA, causal with seqlen_q > and < seqlen_k in one batch, a key block crossing a
sequence's end with the next sequence's keys behind it, every head dim, the other dQ splits) and
matches numpy's float64 gradients per sequence; the sequences' 64-row blocks of the f32 row buffers
are disjoint and inside them; a malformed cu_seqlens never reaches outside the tensors; the entry's
host path (run_steps) runs end to end on torch CPU tensors with the interpreter as its launch; every
argument error is a ValueError naming the argument."""
import dataclasses
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

from layoutkit.dsl.check.extract import extract
from layoutkit.dsl.interpreter import interpret
from layoutkit.ptx import assemble

from .test_recipe_flash_attention import FakeTensor
from .test_recipes_compile import load_recipe

fvb = load_recipe("flash_attention_varlen_backward")
km = fvb.kernel_module


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills, ignored setmaxnreg, protocol notes
        return {name: (ptx, assemble(ptx)) for name, ptx in fvb.compile_default().items()}


def test_default_specializations_assemble_without_spills_or_wgmma_infos(compiled):
    kernels = [f"attention_varlen_backward_d{d}{c}" for d in (64, 128, 256)
               for c in ("", "_causal")]
    passes = [f"attention_varlen_backward_{p}_pass_d{d}" for p in ("pre", "post")
              for d in (64, 128, 256)]
    assert sorted(compiled) == sorted(kernels + passes)
    for name, (_, cubin) in compiled.items():
        (usage,) = cubin.resources.values()
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert not usage.performance_notes, (name, usage.performance_notes)
    for name in kernels:
        ptx, d = compiled[name][0], int(re.search(r"_d(\d+)", name).group(1))
        if fvb.CONFIGS[d].DQ_WRITE == "tma_reduce":
            # two consumer tiles of 64 rows, 32-float boxes: 64 (rows, keys splits) or
            # head_dim / 2 columns each
            cols = fvb.padded.dq_writer.tile_columns(d, fvb.CONFIGS[d].DQ_SPLIT)
            assert ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile") \
                == 2 * cols // 32, name
            assert "red.global" not in ptx, name
        else:
            assert "red.global.add.v2.f32" in ptx and "red.global.add.f32" not in ptx, name
        assert "cp.async.bulk.tensor.4d.shared::cluster.global" in ptx, name   # TMA loads
        assert not re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx), name
        assert re.search(r"st\.global\.v4\.b32", ptx), name          # masked dK, dV stores


ABLATIONS = [(d, name) for d in fvb.HEAD_DIMS for name in fvb.ablations(d)
             if name != "default"]


@pytest.mark.parametrize("d, name", ABLATIONS, ids=lambda x: str(x))
def test_every_ablation_config_assembles_without_spills(d, name):
    """The padded backward's ablation configs (the GPU tests run each on packed batches), the
    causal kernel: its masked span beside the unmasked one holds more live values than the
    non-causal kernel's spans. With the consumers' budget lowered until they spill (216 and 200
    registers at head dims 128 and 256, 152 and 136 at 64), every one of these configs' causal
    kernels spilled about twice the non-causal one's bytes, and no non-causal kernel spilled
    where its causal one did not. Both causal values of each head dim's default: the
    `compiled` fixture."""
    import layoutkit as lk
    cfg = fvb.ablations(d)[name]
    t, tk = (lk.TensorSpec(lk.bf16, (1, 4096, h, d)) for h in (8, 4))
    rows = 8 * fvb.head_rows(4096, 4)
    acc, vector = lk.TensorSpec(lk.f32, (rows, d)), lk.TensorSpec(lk.f32, (rows,))
    cu = lk.TensorSpec(lk.i32, (5,))
    _, args, constexprs = fvb.kernel_arguments(t, tk, tk, t, tk, tk, acc, vector, vector, cu, cu,
                                               4096, True, 0.125, cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills are warnings
        assemble(fvb.backward_varlen_kernel.ptx(*args, **constexprs))


def _batch(lengths_q, lengths_k, hq=2, hk=1, d=64, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v, cu_q, cu_k = fvb.forward.packed_batch(rng, lengths_q, lengths_k, hq, hk, d)
    rows = hq * fvb.head_rows(q.shape[0], len(lengths_q))
    buffers = dict(dq_acc=np.zeros((rows, d), np.float32),
                   neg_lse2=np.zeros(rows, np.float32), delta=np.zeros(rows, np.float32))
    return q, k, v, cu_q, cu_k, buffers


@pytest.mark.parametrize("causal", [False, True])
def test_the_protocol_check_walks_a_live_key_block(causal):
    q, k, v, cu_q, cu_k, buf = _batch((70, 0, 130), (150, 20, 0))
    grads = [np.zeros((1,) + x.shape, np.uint16) for x in (k, v)]
    _, args, constexprs = fvb.kernel_arguments(
        q[None], k[None], v[None], q[None], *grads, buf["dq_acc"], buf["neg_lse2"],
        buf["delta"], cu_q, cu_k, 150, causal, 0.125, fvb.CONFIGS[64])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        protocol = extract(fvb.backward_varlen_kernel.ir(*args, **constexprs))
    chosen = dict(item.split("=") for item in protocol.assumed.split(", "))
    assert int(chosen["cu_k1"]) > int(chosen["cu_k0"])         # the block's keys exist
    producer = next(c for c in protocol.classes if c.role == "producer")
    assert sum(type(e).__name__ == "Copy" for e in producer.events) >= 2 + 4   # K, V, a step


# The kernel's work is a (key block, query block, query head) step per live CTA, so each case
# below takes the fewest steps that still reach its paths: two key blocks of one sequence (a
# block crossing the sequence's end, dQ accumulated from two CTAs), a second query block only
# where the causal diagonal needs one, and query heads only where GQA or a second kv head is
# the subject. The sequences (CPU_CASES, what `layoutkit run --cpu` runs) are the same shapes
# with more blocks and heads. Head dim 64's default kernels, causal and not, run through the
# entry's host path (test_run_steps_end_to_end_on_the_interpreter below).
def test_interpreter_head_dim_128_causal():
    # seqlen_q < seqlen_k over two key blocks; seqlen_q > seqlen_k over two query blocks
    assert fvb.check_cpu(2, cases=(((20, 70), (130, 50), 1, 1, 128, True),)) < 2 ** -6


def test_interpreter_head_dim_256_split_by_columns():
    # 64-key blocks (the consumers split the head dim): two of sequence 0, the second ragged
    assert fvb.check_cpu(3, cases=(((30, 40), (70, 20), 1, 1, 256, False),)) < 2 ** -6


def test_interpreter_head_dim_256_causal_gqa():
    # two kv heads of two query heads each (the group's heads summed into the second kv
    # head's dk, dv); causal seqlen_q < seqlen_k, then seqlen_q > seqlen_k (rows that see no
    # key), one block each (two query blocks of a causal tile: the cases above)
    assert fvb.check_cpu(4, cases=(((50, 30), (60, 20), 4, 2, 256, True),)) < 2 ** -6


@pytest.mark.parametrize("d, split, write", [(128, "keys", "tma_reduce"),
                                             (64, "keys_summed", "consumers")])
def test_interpreter_other_dq_splits(d, split, write):
    """The dQ splits that are no head dim's default (head_dim is 128's and 256's, keys 64's):
    two key blocks of sequence 0 add into the same dQ rows (the keys split at 128: each
    consumer's full-width tile by its own TMA reduce-add; keys_summed: the consumers' own
    reductions, the only writer it has)."""
    cfg = dataclasses.replace(fvb.CONFIGS[d], DQ_SPLIT=split, DQ_WRITE=write)
    if write == "tma_reduce":
        assert cfg in fvb.ablations(d).values()
    case = ((50,), (200,), 1, 1, d, False)      # a second sequence: the default splits' cases
    assert fvb.check_cpu(5, cases=(case,), config=cfg) < 2 ** -6


@given(st.lists(st.integers(0, 300), min_size=1, max_size=12))
def test_each_sequence_owns_disjoint_blocks_inside_the_buffers(lengths):
    cu = np.concatenate([[0], np.cumsum(lengths)])
    head_blocks = fvb.head_rows(int(cu[-1]), len(lengths)) // 64
    owned = set()
    for s, n in enumerate(lengths):
        first = int(cu[s]) // 64 + s
        blocks = set(range(first, first + -(-n // 64)))
        assert not blocks & owned and all(0 <= b < head_blocks for b in blocks)
        owned |= blocks


def test_a_malformed_cu_seqlens_stays_inside_the_tensors():
    """Offsets that decrease, go negative or pass the tensors' ends compute garbage rows but
    never reach outside an argument (the interpreter faults on any such access)."""
    q, k, v, cu_q, cu_k, buf = _batch((40, 30), (50, 20), hq=1)
    bad_q = np.array([-5, 90, 10], np.int32)     # negative, past total_q = 70, then decreasing
    # past total_k = 70: sequence 0's first 128-key block crosses the tensor's end, its second
    # lies past it, as do all of sequence 1's keys
    bad_k = np.array([0, 250, 500], np.int32)
    do, o = q.copy(), q.copy()
    lse = np.zeros((1, q.shape[0]), np.float32)
    grid_q = fvb.pass_grid(200, 1, 2)
    interpret(km.pre_pass_varlen, grid_q, do[None], o[None], lse, buf["neg_lse2"], buf["delta"],
              buf["dq_acc"], bad_q, D=64)
    grads = [np.zeros((1,) + x.shape, np.uint16) for x in (k, v)]
    for causal in (False, True):
        grid, args, constexprs = fvb.kernel_arguments(
            q[None], k[None], v[None], do[None], *grads, buf["dq_acc"], buf["neg_lse2"],
            buf["delta"], bad_q, bad_k, 250, causal, 0.125, fvb.CONFIGS[64])
        interpret(fvb.backward_varlen_kernel, grid, *args, **constexprs)
    dq = np.zeros((1,) + q.shape, np.uint16)
    interpret(km.post_pass_varlen, grid_q, buf["dq_acc"], dq, bad_q, 0.125, D=64)


def test_the_grids_cover_the_longest_sequences():
    q, k, v, cu_q, cu_k, buf = _batch((300, 0, 129), (10, 260, 10))
    grads = [np.zeros((1,) + x.shape, np.uint16) for x in (k, v)]
    for d, keys in ((64, 128), (256, 64)):
        grid, args, _ = fvb.kernel_arguments(
            q[None], k[None], v[None], q[None], *grads, buf["dq_acc"], buf["neg_lse2"],
            buf["delta"], cu_q, cu_k, 260, False, 0.125, fvb.CONFIGS[d])
        assert grid == (-(-260 // keys), 1, 3)              # key blocks, heads_kv, batch
    assert args[11] == fvb.head_rows(429, 3) // 64 == 7 + 3    # HEAD_BLOCKS
    assert fvb.pass_grid(300, 2, 3) == (5, 2, 3) and fvb.pass_grid(0, 2, 3) == (1, 2, 3)


class Recorder:
    """A launch that records (kernel, grid) instead of running anything."""

    def __init__(self):
        self.calls = []

    def __call__(self, kernel, grid, *args, **constexprs):
        self.calls.append((kernel, grid))


torch = pytest.importorskip("torch", reason="run_steps allocates torch tensors")


def _tensors(total_q, total_k, batch=2, hq=4, hk=2, d=64):
    q, do, o = (torch.zeros(total_q, hq, d, dtype=torch.bfloat16) for _ in range(3))
    k, v = (torch.zeros(total_k, hk, d, dtype=torch.bfloat16) for _ in range(2))
    lse = torch.zeros(hq, total_q)
    cu = torch.zeros(batch + 1, dtype=torch.int32)
    return dict(grad_o=do, q=q, k=k, v=v, o=o, lse=lse, cu_seqlens_q=cu, cu_seqlens_k=cu)


@pytest.mark.parametrize("total_q, total_k, batch, max_q", [(0, 9, 2, 5), (7, 0, 2, 5),
                                                             (7, 9, 0, 5), (7, 9, 2, 0)])
def test_nothing_to_compute_gives_zero_gradients_without_a_launch(total_q, total_k, batch,
                                                                   max_q):
    launch = Recorder()
    t = _tensors(total_q, total_k, batch)
    got = fvb.run_steps(torch, *t.values(), max_q, 5, False, None, fvb.CONFIGS[64], launch)
    assert not launch.calls
    assert [g.shape for g in got] == [t[n].shape for n in ("q", "k", "v")]
    assert all(not g.any() for g in got)


def test_one_launch_of_each_kernel_in_order():
    launch = Recorder()
    t = _tensors(70, 90, batch=3)
    fvb.run_steps(torch, *t.values(), 40, 50, True, 0.3, fvb.CONFIGS[64], launch)
    assert launch.calls == [(km.pre_pass_varlen, (1, 4, 3)),
                            (fvb.backward_varlen_kernel, (1, 2, 3)),
                            (km.post_pass_varlen, (1, 4, 3))]


def _inputs(total_q=10, total_k=12, hq=4, hk=2, d=64, batch=2, **kw):
    q = FakeTensor((total_q, hq, d), **kw)
    k, v = FakeTensor((total_k, hk, d)), FakeTensor((total_k, hk, d))
    cu = FakeTensor((batch + 1,), dtype="torch.int32")
    return dict(grad_o=FakeTensor((total_q, hq, d)), q=q, k=k, v=v,
                o=FakeTensor((total_q, hq, d)), lse=FakeTensor((hq, total_q),
                                                               dtype="torch.float32"),
                cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=7, max_seqlen_k=9,
                causal=False, softmax_scale=None, config=None)


@pytest.mark.parametrize("change, message", [
    (dict(q=FakeTensor((1, 10, 4, 64))), r"q is a 3-D tensor \(total_tokens, heads, head_dim\)"),
    (dict(v=FakeTensor((13, 2, 64))), r"k and v are \(total_k, heads_kv, head_dim\)"),
    (dict(cu_seqlens_k=FakeTensor((4,), dtype="torch.int32")), r"cu_seqlens_q and cu_seqlens_k "
     r"hold batch \+ 1 offsets each, got 3 and 4"),
    (dict(max_seqlen_q=-1), r"max_seqlen_q is a non-negative Python int .* got -1"),
    (dict(inputs=dict(d=96)), r"head_dim = 96 is not supported"),
    (dict(causal="yes"), r"causal is True or False, got 'yes'"),
    (dict(inputs=dict(device="cpu")), r"q is a CUDA tensor on q's device"),
    (dict(grad_o=FakeTensor((10, 4, 128))), r"grad_o is a bf16 tensor of q's shape "
                                             r"\(10, 4, 64\), got torch.bfloat16 of shape "
                                             r"\(10, 4, 128\)"),
    (dict(o=FakeTensor((10, 4, 64), dtype="torch.float16")), r"o is a bf16 tensor of q's "
                                                             r"shape .* got torch.float16"),
    (dict(o=object()), r"o is a bf16 tensor of q's shape .* got object of shape \(\)"),
    (dict(lse=FakeTensor((10, 4), dtype="torch.float32")), r"lse is the varlen forward's f32 "
     r"\(heads_q, total_q\) = \(4, 10\) log-sum-exp, got torch.float32 of shape \(10, 4\)"),
    (dict(lse=FakeTensor((4, 10))), r"lse is the varlen forward's f32 .* got torch.bfloat16"),
    (dict(grad_o=FakeTensor((10, 4, 64), device="cuda:1")), r"grad_o is on q's device "
                                                             r"\(cuda:0\), got cuda:1"),
    (dict(lse=FakeTensor((4, 10), dtype="torch.float32", device="cuda:1")),
     r"lse is on q's device"),
    (dict(config="fast"), r"config is a recipes.flash_attention_backward.Config, got 'fast'"),
    (dict(config=fvb.Config(DQ_SPLIT="head_dim")), r"head_dim / 2 = 32 dQ columns"),
    (dict(config=fvb.Config(STAGES=0, DQ_SPLIT="keys")), r"STAGES >= 1"),
    (dict(config=fvb.Config(DQ_SPLIT="keys", DQ_WRITE="producer_warps")),
     r"DQ_WRITE='producer_warps' is the padded kernel's"),
    (dict(config=fvb.Config(DQ_SPLIT="keys", LONGEST_FIRST=True)),
     "LONGEST_FIRST is the padded kernel's grid order"),
    (dict(config=fvb.Config(DQ_SPLIT="rows", BQ=128, DS_FIRST=True)),
     "BQ=128 is the padded kernel's"),
])
def test_argument_errors_name_the_argument(change, message):
    args = _inputs(**change.pop("inputs", {}))
    args.update(change)
    with pytest.raises(ValueError, match=message) as caught:
        fvb.check_inputs(**args)
    assert str(caught.value).startswith(("flash_attention_varlen_backward: ",
                                         "flash_attention_backward: config"))


def test_valid_arguments_give_each_head_dims_default_config():
    assert fvb.check_inputs(**_inputs()) == fvb.CONFIGS[64]
    assert fvb.check_inputs(**_inputs(d=256)) == fvb.CONFIGS[256]


def interpreting_launch(kernel, grid, *args, **constexprs):
    """run_steps' launch on the CPU interpreter: torch CPU tensors as numpy views of their
    memory (bf16 as its bits), so the kernels write the tensors run_steps returns."""
    def as_numpy(x):
        if not isinstance(x, torch.Tensor):
            return x
        return x.view(torch.int16).numpy().view(np.uint16) if x.dtype == torch.bfloat16 \
            else x.numpy()
    interpret(kernel, grid, *map(as_numpy, args), **constexprs)


@pytest.mark.parametrize("lengths_q, lengths_k, hq, hk, causal", [
    # an empty query sequence, an empty key sequence, sequence 0's second key block past its
    # end with sequence 1's keys behind it; dk, dv summed over two query heads (GQA)
    ((40, 0, 50), (150, 20, 0), 2, 1, False),
    # seqlen_q > (two query blocks, the first partly masked), < and = seqlen_k; two kv heads
    # (a second kv head's group, q head = kv head x group + g: the head dim 256 causal case)
    ((100, 1, 40), (60, 90, 40), 2, 2, True),
], ids=["non-causal-gqa-empty-crossing", "causal-sq-above-and-below-sk"])
def test_run_steps_end_to_end_on_the_interpreter(lengths_q, lengths_k, hq, hk, causal):
    """The entry's host path (allocations, the three launches and their arguments) on torch
    CPU tensors with a custom scale, against numpy's float64 gradients: head dim 64's default
    kernels on the paths of each case."""
    from layoutkit.dsl.interpreter import from_bf16, to_bf16
    d = 64
    rng = np.random.default_rng(7)
    q, k, v, cu_q, cu_k = fvb.forward.packed_batch(rng, lengths_q, lengths_k, hq, hk, d)
    do = to_bf16(rng.standard_normal(q.shape))
    o, lse = fvb.forward.reference(*map(from_bf16, (q, k, v)), cu_q, cu_k, causal, 0.3)
    bits = [torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
            for x in (do, q, k, v, to_bf16(o))]
    lse = torch.from_numpy(np.nan_to_num(lse, nan=0.0, neginf=-np.inf).astype(np.float32))
    got = fvb.run_steps(torch, *bits, lse, *map(torch.from_numpy, (cu_q, cu_k)),
                        max(lengths_q), max(lengths_k), causal, 0.3, fvb.CONFIGS[d],
                        interpreting_launch)
    want = fvb.reference(*map(from_bf16, (q, k, v, do)), cu_q, cu_k, causal, 0.3)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        g = g.float().numpy()
        err = np.max(np.abs(g - w)) / max(np.max(np.abs(w)), fvb.padded.ERROR_FLOOR)
        assert err < 2 ** -6, (name, err)
