"""The attention backward on packed variable-length batches: (dq, dk, dv) of
recipes/flash_attention_varlen.py's forward (FlashAttention's varlen API: q (total_q, heads_q,
head_dim), k, v (total_k, heads_kv, head_dim), sequence b rows cu_seqlens_q[b] ..
cu_seqlens_q[b+1]-1 of q, cu_seqlens_k's of k and v), bf16 in and out, f32 accumulation; head
dims 64, 128, 256; GQA (dk, dv summed over the query heads of a group); causal bottom-right
aligned per sequence; a sequence may be empty on either side.

Design: the padded backward's three kernels (recipes/flash_attention_backward.py: pre-pass,
kernel, post-pass; its configs) on windows of the packed tensors, one launch each, no padding
or copy of q, k, v, no host sync (cu_seqlens are read on the GPU only):
  1. pre-pass, grid (ceil(max_seqlen_q / 64), heads_q, batch): D = rowsum(dO * O), -lse log2 e
     and the zeroed f32 dQ accumulator in per-sequence 64-row blocks of each head's rows
     (recipes/_flash_attention_varlen_backward.py says where each sequence's blocks are);
  2. the kernel, grid (ceil(max_seqlen_k / keys), heads_kv, batch): a live CTA's work is the
     padded kernel's on its sequence's lengths; a CTA past its sequence's keys exits; dQ by
     atomic f32 reductions into the sequence's rows of the accumulator;
  3. post-pass: dq = dQ_acc * scale as bf16 into the packed rows.
The log-sum-exp is the forward's (heads_q, total_q) float32 natural log. Rows of dq, dk, dv
that belong to no sequence (past cu_seqlens[-1]) are not written.
"""
from __future__ import annotations

from dataclasses import replace

from layoutkit.tools.dependencies import require_torch
from recipes import _flash_attention_varlen_backward as kernel_module
from recipes import flash_attention_backward as padded
from recipes import flash_attention_varlen as forward

backward_varlen_kernel = kernel_module.backward_varlen_kernel
BQ, HEAD_DIMS, Config = padded.BQ, padded.HEAD_DIMS, padded.Config
# the padded kernel's defaults (the TMA's dQ writer needs one issuing lane's registers; the
# producer warps' 16-byte reductions spill here: check_inputs) in 64-query steps: the row
# buffers are laid out in 64-row blocks per sequence (head_rows)
CONFIGS = {d: replace(cfg, DS_FIRST=False, LONGEST_FIRST=False,
                     **({} if cfg.BQ == BQ else dict(BQ=BQ, DQ_SPLIT="keys")))
           for d, cfg in padded.CONFIGS.items()}
WHAT = "flash_attention_varlen_backward"


def head_rows(total_q: int, batch: int) -> int:
    """Rows of each query head in the dQ accumulator and the neg_lse2 / D vectors: a 64-row
    block per 64 packed rows and one more per sequence (its ragged end)."""
    return BQ * (-(-total_q // BQ) + batch)


def kernel_arguments(q, k, v, do, dk, dv, dq_acc, neg_lse2, delta, cu_seqlens_q, cu_seqlens_k,
                     max_seqlen_k: int, causal: bool, scale: float, cfg: Config) -> tuple:
    """(grid, positional arguments, constexprs) of the kernel: q, do (1, total_q, heads_q, d),
    k, v, dk, dv (1, total_k, heads_kv, d), dq_acc (heads_q * head_rows, d) f32, neg_lse2, delta
    (heads_q * head_rows,) f32, cu_seqlens int32 (batch + 1,); CUDA tensors, numpy arrays (the
    interpreter) or lk.TensorSpecs."""
    _, _, hq, d = q.shape
    hk, batch = k.shape[2], cu_seqlens_q.shape[0] - 1
    args = (q, k, v, do, dk, dv, dq_acc, neg_lse2, delta, cu_seqlens_q, cu_seqlens_k,
            neg_lse2.shape[0] // (hq * BQ), hq // hk, float(scale), float(scale) * padded.LOG2E)
    constexprs = dict(D=d, STAGES=cfg.STAGES, CAUSAL=bool(causal), DQ_SPLIT=cfg.DQ_SPLIT,
                      DKV_SPLIT=cfg.DKV_SPLIT, DQ_WRITE=cfg.DQ_WRITE, DS_STORE=cfg.DS_STORE,
                      DQ_FIRST=cfg.DQ_FIRST,
                      PRODUCER_REGISTERS=cfg.PRODUCER_REGISTERS,
                      CONSUMER_REGISTERS=cfg.CONSUMER_REGISTERS, BQ=cfg.BQ,
                      DS_FIRST=cfg.DS_FIRST, LONGEST_FIRST=False)
    return (max(1, -(-max_seqlen_k // cfg.keys)), hk, batch), args, constexprs


def pass_grid(max_seqlen_q: int, heads_q: int, batch: int) -> tuple:
    """The pre- and post-pass's grid: a CTA per 64-query block of the longest sequence, head
    and sequence."""
    return max(1, -(-max_seqlen_q // BQ)), heads_q, batch


def compile_default() -> dict[str, str]:
    """PTX of the default config of each head dim, non-causal and causal, and of the passes (a
    16k-token packed batch of 4 sequences, 16 query heads, 8 kv heads)."""
    import layoutkit as lk
    out = {}
    cu = lk.TensorSpec(lk.i32, (5,))
    rows = 16 * head_rows(16384, 4)
    for d, cfg in CONFIGS.items():
        t, tk = (lk.TensorSpec(lk.bf16, (1, 16384, h, d)) for h in (16, 8))
        acc, vector = lk.TensorSpec(lk.f32, (rows, d)), lk.TensorSpec(lk.f32, (rows,))
        for causal in (False, True):
            _, args, constexprs = kernel_arguments(t, tk, tk, t, tk, tk, acc, vector, vector,
                                                   cu, cu, 4096, causal, d ** -0.5, cfg)
            name = f"attention_varlen_backward_d{d}{'_causal' if causal else ''}"
            out[name] = backward_varlen_kernel.ptx(*args, **constexprs)
        out[f"attention_varlen_backward_pre_pass_d{d}"] = kernel_module.pre_pass_varlen.ptx(
            t, t, lk.TensorSpec(lk.f32, (16, 16384)), vector, vector, acc, cu, D=d)
        out[f"attention_varlen_backward_post_pass_d{d}"] = kernel_module.post_pass_varlen.ptx(
            acc, t, cu, d ** -0.5, D=d)
    return out


def check_inputs(grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, causal, softmax_scale, config) -> Config:
    """Validate flash_attention_varlen_backward's arguments (the forward's rules, and grad_o,
    o, lse, config's); returns the config. Each mistake is a ValueError naming the argument,
    its value and the rule."""
    forward.check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         causal, softmax_scale, None, WHAT)
    for name, x in (("grad_o", grad_o), ("o", o)):
        if not hasattr(x, "dim") or str(x.dtype) != "torch.bfloat16" or \
                tuple(x.shape) != tuple(q.shape):
            raise ValueError(f"{WHAT}: {name} is a bf16 tensor of q's shape {tuple(q.shape)}, "
                             f"got {getattr(x, 'dtype', type(x).__name__)} of shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
    want = (q.shape[1], q.shape[0])
    if not hasattr(lse, "dim") or str(lse.dtype) != "torch.float32" or \
            tuple(lse.shape) != want:
        raise ValueError(f"{WHAT}: lse is the varlen forward's f32 (heads_q, total_q) = {want} "
                         f"log-sum-exp, got {getattr(lse, 'dtype', type(lse).__name__)} of "
                         f"shape {tuple(getattr(lse, 'shape', ()))}")
    for name, x in (("grad_o", grad_o), ("o", o), ("lse", lse)):
        if x.device != q.device:
            raise ValueError(f"{WHAT}: {name} is on q's device ({q.device}), got {x.device}")
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"{WHAT}: config is a recipes.flash_attention_backward.Config, got "
                         f"{config!r}")
    cfg = config or CONFIGS[q.shape[2]]
    cfg.check(q.shape[2])
    if cfg.LONGEST_FIRST:
        raise ValueError(f"{WHAT}: config {cfg}: LONGEST_FIRST is the padded kernel's grid "
                         "order; the varlen grid keeps key blocks along x")
    if cfg.BQ != BQ:
        raise ValueError(f"{WHAT}: config {cfg}: BQ={cfg.BQ} is the padded kernel's; the varlen "
                         f"row buffers hold each sequence in {BQ}-row blocks (use BQ={BQ})")
    if cfg.DQ_WRITE == "producer_warps":
        raise ValueError(f"{WHAT}: config {cfg}: DQ_WRITE={cfg.DQ_WRITE!r} is the padded "
                         "kernel's; the varlen producer warpgroup's 24 registers hold the "
                         "sequence bounds through its branch, and the writer warps' loop there "
                         "spills (use DQ_WRITE='tma_reduce' or 'consumers')")
    return cfg


def ablations(head_dim: int) -> dict:
    """The padded backward's ablation configs that the varlen kernel runs (all but the
    DQ_WRITE='producer_warps' and BQ=128 rows: check_inputs)."""
    return {name: cfg for name, cfg in padded.ablations(head_dim, CONFIGS[head_dim]).items()
            if cfg.DQ_WRITE != "producer_warps" and cfg.BQ == BQ and not cfg.LONGEST_FIRST}


def flash_attention_varlen_backward(grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                    max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                                    softmax_scale: float | None = None, *,
                                    config: Config | None = None):
    """(dq, dk, dv) of flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
    max_seqlen_q, max_seqlen_k, causal, softmax_scale) -> (o, lse) for the output gradient
    grad_o (bf16, q's shape): new bf16 tensors shaped as q, k, v (module docstring)."""
    torch = require_torch(f"recipes.flash_attention_varlen_backward.{WHAT}")
    cfg = check_inputs(grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                       max_seqlen_k, causal, softmax_scale, config)

    def launch(kernel, grid, *args, **constexprs):
        kernel[grid](*args, **constexprs)
    return run_steps(torch, grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, causal, softmax_scale, cfg, launch)


def run_steps(torch, grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
              max_seqlen_k: int, causal: bool, softmax_scale, cfg: Config, launch):
    """The pre-pass, the kernel and the post-pass (each run by launch(kernel, grid, *args,
    **constexprs)) on checked packed tensors: returns (dq, dk, dv)."""
    (total_q, hq, d), total_k = q.shape, k.shape[0]
    batch = cu_seqlens_q.shape[0] - 1
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    nothing = total_q == 0 or total_k == 0 or batch == 0 or max_seqlen_q == 0
    dq, dk, dv = ((torch.zeros if nothing else torch.empty)(x.shape, device=x.device,
                                                           dtype=torch.bfloat16)
                  for x in (q, k, v))
    if nothing:                     # no kernel (a tensor map has no empty extents)
        return dq, dk, dv
    rows = hq * head_rows(total_q, batch)
    neg_lse2, delta = (torch.empty(rows, device=q.device, dtype=torch.float32)
                       for _ in range(2))
    dq_acc = torch.empty(rows, d, device=q.device, dtype=torch.float32)
    grid_q = pass_grid(max_seqlen_q, hq, batch)
    launch(kernel_module.pre_pass_varlen, grid_q, grad_o.unsqueeze(0), o.unsqueeze(0), lse,
           neg_lse2, delta, dq_acc, cu_seqlens_q, D=d)
    qs, ks, vs, dos = (forward.padded._tma_ready(x.unsqueeze(0)) for x in (q, k, v, grad_o))
    grid, args, constexprs = kernel_arguments(qs, ks, vs, dos, dk.unsqueeze(0),
                                              dv.unsqueeze(0), dq_acc, neg_lse2, delta,
                                              cu_seqlens_q, cu_seqlens_k, max_seqlen_k, causal,
                                              scale, cfg)
    launch(backward_varlen_kernel, grid, *args, **constexprs)
    launch(kernel_module.post_pass_varlen, grid_q, dq_acc, dq.unsqueeze(0), cu_seqlens_q, scale,
           D=d)
    return dq, dk, dv


# ---- references and checks ---------------------------------------------------------------
def reference(q, k, v, do, cu_seqlens_q, cu_seqlens_k, causal: bool, scale: float):
    """float64 numpy (dq, dk, dv) per sequence of packed (total, heads, head_dim) arrays (the
    padded reference on each sequence); rows of no sequence, and of sequences without a key or
    a query, are 0."""
    import numpy as np
    q, k, v, do = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    grads = [np.zeros(x.shape) for x in (q, k, v)]
    for b in range(len(cu_seqlens_q) - 1):
        (q0, q1), (k0, k1) = ((int(cu[b]), int(cu[b + 1])) for cu in (cu_seqlens_q, cu_seqlens_k))
        if q1 == q0 or k1 == k0:
            continue
        parts = padded.reference(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                                 do[None, q0:q1], causal, scale)
        for g, part, (r0, r1) in zip(grads, parts, ((q0, q1), (k0, k1), (k0, k1))):
            g[r0:r1] = part[0]
    return tuple(grads)


# (sequence lengths of q, of k, heads_q, heads_kv, head_dim, causal): ragged, empty query and
# key sequences, a key block crossing a sequence's end with the next sequence's keys behind it,
# causal with seqlen_q > and < seqlen_k in one batch, GQA
CPU_CASES = (((70, 0, 50), (150, 20, 0), 2, 1, 64, False),
             ((100, 1, 40), (60, 90, 40), 2, 2, 64, True),
             ((20, 70), (130, 50), 2, 1, 128, True),
             ((30, 40), (70, 20), 2, 1, 256, False))


def check_cpu(seed: int = 0, cases=CPU_CASES, config: Config | None = None) -> float:
    """Run the three kernels on the CPU interpreter on small packed batches against numpy in
    float64 per sequence; returns the worst error of dq, dk, dv relative to each one's largest
    reference entry (at least padded.ERROR_FLOOR; AssertionError past 2**-6), rows of no
    sequence excluded."""
    import numpy as np

    from layoutkit.dsl.interpreter import from_bf16, interpret, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for lengths_q, lengths_k, hq, hk, d, causal in cases:
        cfg = config or CONFIGS[d]
        q, k, v, cu_q, cu_k = forward.packed_batch(rng, lengths_q, lengths_k, hq, hk, d)
        do = to_bf16(rng.standard_normal(q.shape))
        scale = d ** -0.5
        o, lse = forward.reference(from_bf16(q), from_bf16(k), from_bf16(v), cu_q, cu_k, causal,
                                   scale)
        o = to_bf16(o)
        lse = np.nan_to_num(lse, nan=0.0, neginf=-np.inf).astype(np.float32)
        want = reference(from_bf16(q), from_bf16(k), from_bf16(v), from_bf16(do), cu_q, cu_k,
                         causal, scale)
        batch, total_q = len(lengths_q), q.shape[0]
        rows = hq * head_rows(total_q, batch)
        neg_lse2, delta = (np.full(rows, np.nan, np.float32) for _ in range(2))
        dq_acc = np.full((rows, d), np.nan, np.float32)      # the pre-pass zeroes its blocks
        grid_q = pass_grid(max(lengths_q), hq, batch)
        interpret(kernel_module.pre_pass_varlen, grid_q, do[None], o[None], lse, neg_lse2,
                  delta, dq_acc, cu_q, D=d)
        dk, dv = (np.zeros((1,) + k.shape, np.uint16) for _ in range(2))
        grid, args, constexprs = kernel_arguments(q[None], k[None], v[None], do[None], dk, dv,
                                                  dq_acc, neg_lse2, delta, cu_q, cu_k,
                                                  max(lengths_k), causal, scale, cfg)
        interpret(backward_varlen_kernel, grid, *args, **constexprs)
        dq = np.zeros((1,) + q.shape, np.uint16)
        interpret(kernel_module.post_pass_varlen, grid_q, dq_acc, dq, cu_q, scale, D=d)
        for name, got, ref in (("dq", from_bf16(dq[0]), want[0]),
                               ("dk", from_bf16(dk[0]), want[1]),
                               ("dv", from_bf16(dv[0]), want[2])):
            err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), padded.ERROR_FLOOR))
            assert err < 2 ** -6, f"{name} off by {err:.3g} of its max in case " \
                                  f"{(lengths_q, lengths_k, hq, hk, d, causal)}"
            worst = max(worst, err)
    return worst


# (sequences, longest q, longest k, heads_q, heads_kv, head_dim, causal) of check(): ragged,
# empty sequences on either side, causal with seqlen_q <, = and > seqlen_k in one batch, GQA
GPU_CASES = ((5, 300, 300, 4, 2, 64, False), (6, 257, 700, 4, 1, 128, True),
             (4, 1000, 129, 2, 2, 128, False), (3, 130, 130, 8, 2, 256, True),
             (7, 600, 600, 2, 1, 64, True), (3, 513, 300, 2, 1, 256, False),
             (2, 1, 1000, 4, 4, 128, True))


def check(seed: int = 0, cases=GPU_CASES, config: Config | None = None) -> float:
    """Random packed batches on the GPU (GPU_CASES; lengths by the forward's random_lengths,
    one sequence the longest and one empty) against torch autograd in float64 per sequence;
    returns the worst error of dq, dk, dv relative to each one's largest reference entry (at
    least padded.ERROR_FLOOR; AssertionError past 2**-7)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    for i, (batch, longest_q, longest_k, hq, hk, d, causal) in enumerate(cases):
        lengths_q = forward.random_lengths(gen, batch, longest_q)
        lengths_k = forward.random_lengths(gen, batch, longest_k, empty=i % 2 == 0)
        worst = max(worst, check_batch(gen, lengths_q, lengths_k, hq, hk, d, causal, config,
                                       f"case {i}"))
    return worst


def check_batch(gen, lengths_q, lengths_k, hq: int, hk: int, d: int, causal: bool,
                config: Config | None, what: str, scale: float | None = None) -> float:
    """One packed batch on the GPU: the varlen forward, this backward, and each sequence's
    gradients against padded.reference_torch on it alone (check())."""
    import torch
    cu_q, cu_k = (torch.tensor([0] + torch.tensor(n).cumsum(0).tolist(), dtype=torch.int32,
                               device="cuda") for n in (lengths_q, lengths_k))
    q, do = (torch.randn(sum(lengths_q), hq, d, generator=gen).to("cuda", torch.bfloat16)
             for _ in range(2))
    k, v = (torch.randn(sum(lengths_k), hk, d, generator=gen).to("cuda", torch.bfloat16)
            for _ in range(2))
    args = (cu_q, cu_k, max(lengths_q), max(lengths_k), causal, scale)
    o, lse = forward.flash_attention_varlen(q, k, v, *args)
    dq, dk, dv = flash_attention_varlen_backward(do, q, k, v, o, lse, *args, config=config)
    scale = d ** -0.5 if scale is None else scale
    worst = 0.0
    for b, (nq, nk) in enumerate(zip(lengths_q, lengths_k)):
        q0, k0 = int(cu_q[b]), int(cu_k[b])
        rq, rk = slice(q0, q0 + nq), slice(k0, k0 + nk)
        got = (dq[rq], dk[rk], dv[rk])
        if nq == 0 or nk == 0:              # no score: every gradient of the sequence is 0
            assert all(not g.any() for g in got), f"{what} sequence {b}: nonzero gradients"
            continue
        want = padded.reference_torch(q[None, rq], k[None, rk], v[None, rk], do[None, rq],
                                      causal, scale)
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            err = ((g.double() - w[0]).abs().max() /
                   w.abs().max().clamp_min(padded.ERROR_FLOOR)).item()
            assert err < 2 ** -7, f"{name} off by {err:.3g} in {what} sequence {b} " \
                                  f"({nq} queries, {nk} keys, {hq}/{hk} heads, d {d}, " \
                                  f"causal {causal})"
            worst = max(worst, err)
    return worst
