"""Forward attention on packed variable-length batches, FlashAttention's varlen API: the
sequences of a batch are concatenated along the token axis, q (total_q, heads_q, head_dim) and
k, v (total_k, heads_kv, head_dim), and sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1
of q (cu_seqlens_k for k and v). bf16 in and out, f32 accumulation and softmax; head dims 64,
128, 256; GQA (query head h reads key/value head h // (heads_q // heads_kv)); causal masking is
bottom-right aligned per sequence (query i of a sequence sees its keys j <= i + seqlen_k -
seqlen_q, FlashAttention >= 2.1); a sequence may be empty on either side (rows that see no key
get o = 0 and lse = -inf).

Design: the padded recipe's kernel (recipes/flash_attention.py and its kernel module) on
windows of the packed tensors, grid (ceil(max_seqlen_q / BM), heads_q, batch): each CTA reads
its sequence's bounds from cu_seqlens, does nothing where its tile starts past its sequence, and
otherwise runs the padded kernel's pipeline on the sequence's own lengths (its key-block counts,
causal diagonal and masks); O is stored with masked stores so that a tile crossing the
sequence's end leaves the next sequence's rows alone (recipes/_flash_attention_varlen.py says
why and what else differs). One launch, no padding, no copy of q, k or v, no host sync: the
sequence lengths are read on the GPU only. Why this design: the work of a live CTA is exactly
the padded kernel's on the same sequence (the same SASS main loop), so equal lengths run at the
padded kernel's speed and skewed batches pay only for their tokens; a CTA past a shorter
sequence's end costs four cached loads, the barrier init and an exit, far less than the padded
kernel's full tile of padding. A persistent tile scheduler (longest tiles first) would also
spread a skewed batch's long sequence better at the end of the grid; it is the padded kernel's
open item as well (issue 16), and would serve both.

The log-sum-exp is (heads_q, total_q) float32, natural log: FlashAttention's varlen layout
(flash_attn_varlen_func's softmax_lse; the padded API's is (batch, heads, seqlen_q)). Rows of o
and lse that belong to no sequence (past cu_seqlens_q[-1]) are not written.
"""
from __future__ import annotations

from layoutkit.ptx import MAX_GRID
from layoutkit.tools.dependencies import require_torch
from recipes import _flash_attention_varlen as kernel_module
from recipes import flash_attention as padded

attention_varlen_kernel = kernel_module.attention_varlen_kernel
BM, HEAD_DIMS, LOG2E, Config = padded.BM, padded.HEAD_DIMS, padded.LOG2E, padded.Config
MAX_BATCH = MAX_GRID[2]              # the grid's z extent: one row of CTAs per sequence
WHAT = "flash_attention_varlen"


def kernel_arguments(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                     causal: bool, scale: float, cfg: Config) -> tuple:
    """(grid, positional arguments, constexprs) of one launch: q, o (1, total_q, heads_q,
    head_dim), k, v (1, total_k, heads_kv, head_dim), lse (heads_q, total_q), cu_seqlens int32
    (batch + 1,), as CUDA tensors, numpy arrays (the CPU interpreter) or lk.TensorSpecs."""
    _, _, hq, d = q.shape
    hk = k.shape[2]
    batch = cu_seqlens_q.shape[0] - 1
    args = (q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, hq // hk, float(scale) * LOG2E)
    return (max(1, -(-max_seqlen_q // cfg.BM)), hq, batch), args, \
        padded.kernel_constexprs(cfg, d, causal)


def compile_default() -> dict[str, str]:
    """PTX of the default config of each head dim, non-causal and causal (a 16k-token, 16-head
    packed batch of 4 sequences)."""
    import layoutkit as lk
    out = {}
    for (d, causal), cfg in padded.CONFIGS.items():
        t, cu = lk.TensorSpec(lk.bf16, (1, 16384, 16, d)), lk.TensorSpec(lk.i32, (5,))
        grid, args, constexprs = kernel_arguments(t, t, t, t, lk.TensorSpec(lk.f32, (16, 16384)),
                                                  cu, cu, 4096, causal, d ** -0.5, cfg)
        name = f"attention_varlen_d{d}_bn{cfg.BN}_s{cfg.STAGES}{'_causal' if causal else ''}"
        out[name] = kernel_module.kernel_for(cfg).ptx(*args, **constexprs)
    return out


def _count(name: str, x, what: str = WHAT) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"{what}: {name} is a non-negative Python int (the longest sequence's "
                         f"length, a promise the kernel relies on), got {x!r}")
    return x


def check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                 softmax_scale, config, what: str = WHAT) -> Config:
    """Validate flash_attention_varlen's arguments (torch tensors; `what` starts the errors,
    the backward checks the same); returns the config. Every mistake is a ValueError naming the
    argument, value and rule. The contents of cu_seqlens are not read on the host (that would
    synchronise); the kernel never reaches outside the tensors whatever they hold."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not hasattr(x, "dim") or x.dim() != 3:
            raise ValueError(f"{what}: {name} is a 3-D tensor (total_tokens, heads, head_dim), "
                             f"got {type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
        if str(x.dtype) != "torch.bfloat16":
            raise ValueError(f"{what}: {name} is a bf16 tensor, got {x.dtype}")
    (_, hq, d), (_, hk, dk) = tuple(q.shape), tuple(k.shape)
    if tuple(v.shape) != tuple(k.shape) or dk != d:
        raise ValueError(f"{what}: k and v are (total_k, heads_kv, head_dim) with q's head_dim "
                         f"{d}, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not hasattr(cu, "dim") or cu.dim() != 1 or str(cu.dtype) != "torch.int32" or \
                cu.shape[0] < 1:
            raise ValueError(f"{what}: {name} is a 1-D int32 tensor of batch + 1 offsets, got "
                             f"{type(cu).__name__} {getattr(cu, 'dtype', '')} of shape "
                             f"{tuple(getattr(cu, 'shape', ()))}")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(f"{what}: cu_seqlens_q and cu_seqlens_k hold batch + 1 offsets each, "
                         f"got {cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}")
    if cu_seqlens_q.shape[0] - 1 > MAX_BATCH:
        raise ValueError(f"{what}: batch = {cu_seqlens_q.shape[0] - 1} sequences is over "
                         f"{MAX_BATCH} (one grid row of CTAs per sequence)")
    _count("max_seqlen_q", max_seqlen_q, what)
    cfg = padded.check_options(what, d, hq, hk, causal, softmax_scale, config,
                               _count("max_seqlen_k", max_seqlen_k, what))
    for name, x in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q),
                    ("cu_seqlens_k", cu_seqlens_k)):
        if not x.is_cuda or x.device != q.device:
            raise ValueError(f"{what}: {name} is a CUDA tensor on q's device ({q.device}), got "
                             f"one on {x.device}")
    return cfg


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                           max_seqlen_k: int, causal: bool = False,
                           softmax_scale: float | None = None, *, config: Config | None = None):
    """Forward attention on packed sequences (see the module docstring): returns (o, lse), o
    bf16 (total_q, heads_q, head_dim), lse float32 (heads_q, total_q) in natural-log units.
    max_seqlen_q and max_seqlen_k bound the sequences' lengths (FlashAttention's promise: a
    longer query sequence's rows past max_seqlen_q are not computed); softmax_scale defaults to
    1/sqrt(head_dim); causal is bottom-right aligned per sequence."""
    torch = require_torch(f"recipes.flash_attention_varlen.{WHAT}")
    cfg = check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                       softmax_scale, config)
    total_q, hq, d = q.shape
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    o = torch.empty(total_q, hq, d, device=q.device, dtype=torch.bfloat16)
    lse = torch.empty(hq, total_q, device=q.device, dtype=torch.float32)
    if total_q == 0 or max_seqlen_q == 0 or cu_seqlens_q.shape[0] == 1:
        return o, lse
    if k.shape[0] == 0:         # no key in any sequence (a tensor map has no empty extents)
        o.zero_()
        lse.fill_(float("-inf"))
        return o, lse
    qs, ks, vs = (padded._tma_ready(x.unsqueeze(0)) for x in (q, k, v))
    grid, args, constexprs = kernel_arguments(qs, ks, vs, o.unsqueeze(0), lse, cu_seqlens_q,
                                              cu_seqlens_k, max_seqlen_q, causal, scale, cfg)
    kernel_module.kernel_for(cfg)[grid](*args, **constexprs)
    return o, lse


# ---- references and checks ---------------------------------------------------------------
def reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal: bool, scale: float):
    """float64 numpy attention per sequence of packed (total, heads, head_dim) arrays: (o, lse
    (heads_q, total_q)); rows of no sequence are 0 (o) and nan (lse)."""
    import numpy as np
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    o = np.zeros(q.shape)
    lse = np.full((q.shape[1], q.shape[0]), np.nan)
    for b in range(len(cu_seqlens_q) - 1):
        (q0, q1), (k0, k1) = ((int(cu[b]), int(cu[b + 1])) for cu in (cu_seqlens_q, cu_seqlens_k))
        if q1 == q0:
            continue
        if k1 == k0:                                # no key: o = 0, lse = -inf
            lse[:, q0:q1] = -np.inf
            continue
        ob, lb = padded.reference(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal, scale)
        o[q0:q1], lse[:, q0:q1] = ob[0], lb[0]
    return o, lse


def packed_batch(rng, lengths_q, lengths_k, hq: int, hk: int, d: int):
    """Random bf16 bits of q (total_q, hq, d), k and v (total_k, hk, d) and the int32
    cu_seqlens of the lengths, as numpy arrays."""
    import numpy as np

    from layoutkit.dsl.interpreter import to_bf16
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32)
                  for n in (lengths_q, lengths_k))
    q = to_bf16(rng.standard_normal((int(cu_q[-1]), hq, d)))
    k, v = (to_bf16(rng.standard_normal((int(cu_k[-1]), hk, d))) for _ in range(2))
    return q, k, v, cu_q, cu_k


# (sequence lengths of q, of k, heads_q, heads_kv, head_dim, causal): ragged, an empty query
# sequence and an empty key sequence, causal with seqlen_q > and < seqlen_k in one batch, GQA
CPU_CASES = (((70, 0, 130), (150, 20, 0), 2, 1, 64, False),
             ((100, 1, 40), (60, 90, 40), 2, 2, 64, True),
             ((20, 3), (200, 3), 2, 1, 128, True))


def check_cpu(seed: int = 0, cases=CPU_CASES, config: Config | None = None) -> float:
    """Run the kernel on the CPU interpreter (with race checking) on small packed batches
    against numpy in float64; returns the worst error relative to the largest |o| (or |lse|)
    (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for lengths_q, lengths_k, hq, hk, d, causal in cases:
        cfg = config or padded.default_config(d, causal, max(lengths_k))
        q, k, v, cu_q, cu_k = packed_batch(rng, lengths_q, lengths_k, hq, hk, d)
        scale = d ** -0.5
        o_want, lse_want = reference(from_bf16(q), from_bf16(k), from_bf16(v), cu_q, cu_k,
                                     causal, scale)
        o = np.zeros((1,) + q.shape, np.uint16)
        lse = np.zeros(lse_want.shape, np.float32)
        grid, args, constexprs = kernel_arguments(q[None], k[None], v[None], o, lse, cu_q, cu_k,
                                                  max(lengths_q), causal, scale, cfg)
        worst = max(worst, check_on_cpu(
            kernel_module.kernel_for(cfg), grid, *args, **constexprs, error=padded._finite_error,
            expect={"o": o_want[None], "lse": lse_want}, tolerance=2 ** -7, seeds=(seed,)))
    return worst


def random_lengths(gen, batch: int, longest: int, empty: bool = True) -> list[int]:
    """`batch` sequence lengths in 0..longest (torch generator `gen`), one of them `longest`
    and, with `empty`, one 0."""
    import torch
    n = torch.randint(0, longest + 1, (batch,), generator=gen).tolist()
    n[0] = longest
    if empty and batch > 1:
        n[-1] = 0
    return n


def check(seed: int = 0) -> float:
    """Random packed batches on the GPU (ragged, empty sequences on either side, causal with
    seqlen_q <, = and > seqlen_k in one batch, GQA, each head dim, the ablation configs) against
    torch in float64 per sequence, and every sequence bit for bit against the padded kernel run
    on it alone; returns the worst error of o relative to max |o_ref| (AssertionError past
    2**-7, or lse off, see recipes.flash_attention.compare)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    cases = [(5, 300, 300, 4, 2, 64, False), (6, 257, 700, 4, 1, 128, True),
             (4, 1000, 129, 2, 2, 128, False), (3, 130, 130, 8, 2, 256, True),
             (7, 600, 600, 2, 1, 64, True), (2, 1, 1000, 4, 4, 128, True)]
    worst = 0.0
    for i, (batch, longest_q, longest_k, hq, hk, d, causal) in enumerate(cases):
        lengths_q = random_lengths(gen, batch, longest_q)
        lengths_k = random_lengths(gen, batch, longest_k, empty=i % 2 == 0)
        configs = list(padded.ablations(d, causal).values())
        cfg = configs[i % len(configs)]
        worst = max(worst, check_batch(gen, lengths_q, lengths_k, hq, hk, d, causal, cfg,
                                       f"case {i} {cfg}"))
    return worst


def check_batch(gen, lengths_q, lengths_k, hq, hk, d, causal, cfg, what: str) -> float:
    """One packed batch on the GPU against float64 torch and the padded kernel (check())."""
    import torch
    cu_q, cu_k = (torch.tensor([0] + torch.tensor(n).cumsum(0).tolist(), dtype=torch.int32,
                               device="cuda") for n in (lengths_q, lengths_k))
    q = torch.randn(sum(lengths_q), hq, d, generator=gen).to("cuda", torch.bfloat16)
    k, v = (torch.randn(sum(lengths_k), hk, d, generator=gen).to("cuda", torch.bfloat16)
            for _ in range(2))
    o, lse = flash_attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k),
                                    causal=causal, config=cfg)
    worst = 0.0
    for b, (nq, nk) in enumerate(zip(lengths_q, lengths_k)):
        if nq == 0:
            continue
        q0, k0 = int(cu_q[b]), int(cu_k[b])
        qb, kb, vb = q[None, q0:q0 + nq], k[None, k0:k0 + nk], v[None, k0:k0 + nk]
        ob, lb = o[None, q0:q0 + nq], lse[None, :, q0:q0 + nq]
        o_ref, lse_ref = padded.reference_torch(qb, kb, vb, causal, d ** -0.5)
        worst = max(worst, padded.compare(ob, lb, o_ref, lse_ref, f"{what} sequence {b}"))
        o_pad, lse_pad = padded.flash_attention(qb, kb, vb, causal, config=cfg)
        assert torch.equal(ob, o_pad) and torch.equal(lb, lse_pad), \
            f"{what} sequence {b}: differs from the padded kernel on the same sequence"
    return worst


def benchmark(reps: int = 20) -> list[dict]:
    """TFLOP/s of flash_attention_varlen against the padded kernel on the same equal-length
    batch, and on a skewed batch against padding it to its longest sequence
    (benchmarks/bench_attention_varlen.py has the full table and FA4's varlen)."""
    import torch

    from layoutkit.tools.benchmarking import interleaved, tflops
    rows = []
    for d in HEAD_DIMS:
        for causal in (False, True):
            heads, s = 2048 // d, 4096
            for lengths in ([s] * 4, [s] + [s // 8] * 12):
                rows.append(_bench_case(torch, interleaved, tflops, lengths, heads, d, causal,
                                        reps))
    return rows


def describe(lengths) -> str:
    """'4096x4' for equal lengths, '4096x1+512x12' for runs of equal lengths."""
    runs: list = []
    for n in lengths:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return "+".join(f"{n}x{count}" for n, count in runs)


def _bench_case(torch, interleaved, tflops, lengths, heads, d, causal, reps) -> dict:
    batch, longest, total = len(lengths), max(lengths), sum(lengths)
    q, k, v = (torch.randn(total, heads, d, device="cuda").to(torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32,
                      device="cuda")
    qp, kp, vp = (torch.zeros(batch, longest, heads, d, device="cuda", dtype=torch.bfloat16)
                  for _ in range(3))
    for b, (start, n) in enumerate(zip(cu.tolist(), lengths)):
        for padded_x, x in ((qp, q), (kp, k), (vp, v)):
            padded_x[b, :n] = x[start:start + n]
    times = interleaved({
        "varlen": lambda: flash_attention_varlen(q, k, v, cu, cu, longest, longest, causal),
        "padded": lambda: padded.flash_attention(qp, kp, vp, causal)}, reps=reps)
    flops = sum(padded.attention_flops(1, heads, n, n, d, causal) for n in lengths)
    ours, pad = (tflops(flops, times[x].median_ms) for x in ("varlen", "padded"))
    case = f"d{d} {'causal' if causal else 'full'} {describe(lengths)}"
    print(f"{case}: varlen {ours:.1f}, padded {pad:.1f} TFLOP/s of the batch's work "
          f"({ours / pad:.3f}x)")
    return {"case": case, "varlen_tflops": ours, "padded_tflops": pad, "speedup": ours / pad}
