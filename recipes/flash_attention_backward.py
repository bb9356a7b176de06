"""FlashAttention's backward for Hopper: (dq, dk, dv) of recipes/flash_attention.py's forward,
bf16 in and out, f32 accumulation; causal (bottom-right aligned), GQA (dk, dv summed over the
query heads of a group), ragged seqlen_q and seqlen_k (they may differ), head_dim 64, 128 and
256.

Three kernels per call:
  1. pre-pass (recipes/_flash_attention_backward_passes.py): D = rowsum(dO * O) in f32 and
     -lse * log2 e, both in the kernel's row order (batch, head, query) padded to blocks of
     the kernel's step (D = 0, -inf there), and the f32 dQ accumulator zeroed;
  2. the kernel (recipes/_flash_attention_backward_kernel.py: pipeline, numerics and its
     switches, `Config`), one CTA per key block (128 keys; 64 at head dim 256), kv head and
     batch, 64 query rows per step (128 at head dim 64): dK, dV in registers, dQ by f32
     reductions into L2: TMA reduce-adds of each consumer's tile from shared memory, issued by
     one lane of the producer warpgroup;
  3. post-pass (the passes module): dq = dQ_acc * scale as bf16.
Head dims 64 and 128 split the CTA's keys between its two consumer warpgroups (128 keys per
CTA); head dim 256, where dK and dV of 64 keys alone would be 256 f32 registers per thread,
splits head_dim instead (64 keys per CTA; recipes/_flash_attention_backward_columns.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from layoutkit.tools.dependencies import require_torch
from recipes import _flash_attention_backward_kernel as kernel_module
from recipes import _flash_attention_backward_dq_writer as dq_writer
from recipes import _flash_attention_backward_passes as passes
from recipes._device import sm_count
from recipes._row_split import SMS

backward_kernel, BN, BQ = kernel_module.backward_kernel, kernel_module.BN, kernel_module.BQ
LOG2E = kernel_module.LOG2E
HEAD_DIMS = (64, 128, 256)
DKV_SPLITS = ("keys", "head_dim")
SHARED_LIMIT = 232448 - 1024  # sm_90's opt-in shared memory, less room for the mbarriers


@dataclass(frozen=True)
class Config:
    """One pipeline configuration (constexprs of the kernel; the module docstrings)."""

    STAGES: int = 2
    DQ_SPLIT: str = "head_dim"
    DKV_SPLIT: str = "keys"
    DQ_WRITE: str = "consumers"
    DS_STORE: str = "st"
    DQ_FIRST: bool = False
    PRODUCER_REGISTERS: int = 24
    CONSUMER_REGISTERS: int = 240
    BQ: int = BQ
    DS_FIRST: bool = False
    LONGEST_FIRST: bool = False

    @property
    def keys(self) -> int:
        """Keys per CTA: 128 when the consumers split keys, 64 when they split head_dim."""
        return BN if self.DKV_SPLIT == "keys" else kernel_module.WG_KEYS

    def smem_bytes(self, head_dim: int) -> int:
        """K, V, the Q and dO rings (64 rows, with their f32 neg_lse2 and D rows), two dS^T
        buffers (and two of P^T when splitting head_dim), bytes (less alignment padding)."""
        pt, bq = 2 if self.DKV_SPLIT == "head_dim" else 1, self.BQ
        dq = 4 * kernel_module.dq_halves_layout(head_dim).cosize() \
            if self.DQ_SPLIT == "keys_summed" else 0
        if self.DQ_WRITE == "producer_warps":
            dq = 4 * dq_writer.sdq_layout(head_dim, self.DQ_SPLIT).cosize()
        elif self.DQ_WRITE == "tma_reduce":
            dq = 4 * dq_writer.tma_sdq_layout(head_dim, self.DQ_SPLIT).cosize()
        return 2 * (2 * self.keys * head_dim + 2 * self.STAGES * bq * head_dim +
                    2 * pt * self.keys * bq) + 2 * self.STAGES * bq * 4 + dq

    def check(self, head_dim: int) -> None:
        """ValueError naming the field when this config cannot run at head_dim."""
        what = "flash_attention_backward: config"
        if self.DKV_SPLIT not in DKV_SPLITS or self.DQ_SPLIT not in kernel_module.DQ_SPLITS:
            raise ValueError(f"{what} {self}: DKV_SPLIT is one of {DKV_SPLITS} and DQ_SPLIT one "
                             f"of {kernel_module.DQ_SPLITS}")
        if self.DQ_WRITE not in kernel_module.DQ_WRITES:
            raise ValueError(f"{what} {self}: DQ_WRITE is one of {kernel_module.DQ_WRITES}")
        if self.DS_STORE not in kernel_module.DS_STORES:
            raise ValueError(f"{what} {self}: DS_STORE is one of {kernel_module.DS_STORES}")
        if not isinstance(self.DQ_FIRST, bool) or self.DQ_FIRST and self.DKV_SPLIT != "keys":
            raise ValueError(f"{what} {self}: DQ_FIRST is True or False, True only for the "
                             "DKV_SPLIT='keys' consumers")
        if not isinstance(self.LONGEST_FIRST, bool):
            raise ValueError(f"{what} {self}: LONGEST_FIRST is True or False")
        if not isinstance(self.DS_FIRST, bool) or self.DS_FIRST and self.DKV_SPLIT != "keys":
            raise ValueError(f"{what} {self}: DS_FIRST is True or False, True only for the "
                             "DKV_SPLIT='keys' consumers (head dim 256's compute dS apart)")
        if self.DS_STORE == "stmatrix" and self.DKV_SPLIT != "keys":
            raise ValueError(f"{what} {self}: DS_STORE='stmatrix' is the DKV_SPLIT='keys' "
                             "consumers' (head dim 256's store P^T and dS^T as they are)")
        if self.DQ_WRITE == "producer_warps" and self.DKV_SPLIT != "keys" or \
                self.DQ_WRITE != "consumers" and self.DQ_SPLIT == "keys_summed":
            raise ValueError(f"{what} {self}: DQ_WRITE={self.DQ_WRITE!r} hands dQ to the writer "
                             "warps from the consumers (DKV_SPLIT='keys' only for 'producer_warps')"
                             " with DQ_SPLIT 'head_dim', 'keys' or 'rows' (the writers or the TMA "
                             "sum the keys partials)")
        if self.BQ not in kernel_module.QUERY_BLOCKS or \
                (self.BQ == 128) != (self.DQ_SPLIT == "rows"):
            raise ValueError(f"{what} {self}: BQ (query rows per step) is one of "
                             f"{kernel_module.QUERY_BLOCKS}, and 128 exactly when DQ_SPLIT='rows' "
                             "(each consumer warpgroup takes 64 of the step's rows for dQ)")
        if self.BQ == 128 and (self.DKV_SPLIT != "keys" or self.DQ_WRITE == "producer_warps"
                               or head_dim != 64):
            raise ValueError(f"{what} {self}: BQ=128 runs at head_dim 64 with DKV_SPLIT='keys' "
                             "(S^T, dP^T of 64 keys x 128 queries and dK, dV of 64 keys in each "
                             "consumer's 240 registers) and DQ_WRITE 'tma_reduce' or "
                             f"'consumers'; got head_dim {head_dim}")
        if self.DKV_SPLIT == "head_dim" and self.DQ_SPLIT != "head_dim":
            raise ValueError(f"{what} {self}: DKV_SPLIT='head_dim' splits dQ by head_dim too "
                             "(DQ_SPLIT='head_dim')")
        if self.DKV_SPLIT == "keys" and head_dim == 256:
            raise ValueError(f"{what} {self}: DKV_SPLIT='keys' keeps dK and dV of 64 keys x "
                             "head_dim in each thread's registers, 256 f32 at head_dim 256; "
                             "use DKV_SPLIT='head_dim'")
        if self.DKV_SPLIT == "keys" and self.DQ_SPLIT == "head_dim" and head_dim % 128:
            raise ValueError(f"{what} {self}: DQ_SPLIT='head_dim' gives each warpgroup "
                             f"head_dim / 2 = {head_dim // 2} dQ columns, not a multiple of the "
                             "128-byte swizzle's 64; use DQ_SPLIT='keys'")
        if not isinstance(self.STAGES, int) or self.STAGES < 1 or \
                self.smem_bytes(head_dim) > SHARED_LIMIT:
            raise ValueError(f"{what} {self}: STAGES >= 1 and at most {SHARED_LIMIT} bytes of "
                             f"shared memory; it needs {self.smem_bytes(head_dim)} at head_dim "
                             f"{head_dim}")


# head dim 64 splits dQ by keys: a head_dim/2 = 32-column dQ would need a B operand narrower
# than the 128-byte swizzle's 64 columns; head dim 256 splits dK and dV by columns. Head dims
# 64 and 128 hand dQ to a TMA reduce-add issued by the producer warpgroup, store dS by stmatrix
# and issue dQ before dK (docs/PERFORMANCE.md, "Attention backward": the three against the
# consumers' own reductions, the TMA against the producer warps' 16-byte reductions)
FAST = dict(DQ_WRITE="tma_reduce", DS_STORE="stmatrix", DQ_FIRST=True)
# head dim 64 steps 128 queries at a time (dQ split by rows, dS computed before dV's wgmma so
# that the 64 x 128 S^T, dP^T and the bf16 P^T are not live at once in 240 registers): twice
# the work per step of the 64-query config (docs/PERFORMANCE.md, "Attention backward")
# head dim 256's TMA writer needs its 64 KB dQ tile where the ring's second stage was.
# Causal grids whose longest CTA is a large share of an SM's work run longest first, in
# sections of (kv head, batch) pairs (LONGEST_FIRST, longest_first_pays: 1.20x on causal GQA),
# and head dim 128 computes dS before dV's wgmma as 64 does (DS_FIRST: 1.04-1.05x non-causal,
# even causal; docs/PERFORMANCE.md, "Causal backward grid order")
CONFIGS = {64: Config(DQ_SPLIT="rows", BQ=128, DS_FIRST=True, LONGEST_FIRST=True, **FAST),
           128: Config(DQ_SPLIT="head_dim", DS_FIRST=True, LONGEST_FIRST=True, **FAST),
           256: Config(DKV_SPLIT="head_dim", DQ_WRITE="tma_reduce", STAGES=1,
                       LONGEST_FIRST=True)}


def ablations(head_dim: int, base: Config | None = None) -> dict[str, Config]:
    """The default config and one switched choice per entry (the benchmark's ablation rows):
    the other dQ splits where they can run, the other ring depths (1-3) where they fit, the
    other dQ writers (DQ_WRITE, with DQ_SPLIT head_dim and keys, or rows at BQ 128; head dim
    256: the consumers' own with the second ring stage back), the other dS^T store (DS_STORE),
    the other dQ and dS issue orders (DQ_FIRST, DS_FIRST), the other grid order (LONGEST_FIRST:
    causal's longest key blocks first where that pays, longest_first_pays), the 64-query step
    where the default takes 128, and the three of FAST switched together (or back); configs
    that spill are no rows. `base` instead of the head dim's default (the varlen recipe's)."""
    base = base or CONFIGS[head_dim]
    rows = {"default": base}
    candidates = {f"DQ_SPLIT={other}": replace(base, DQ_SPLIT=other)
                  for other in kernel_module.DQ_SPLITS if other != base.DQ_SPLIT}
    candidates.update({f"STAGES={n}": replace(base, STAGES=n) for n in (1, 2, 3)
                       if n != base.STAGES})
    splits = ("rows",) if base.BQ == 128 else ("head_dim", "keys")
    for write in kernel_module.DQ_WRITES:
        if write != base.DQ_WRITE:
            candidates.update({f"DQ_WRITE={write} DQ_SPLIT={split}": replace(
                base, DQ_WRITE=write, DQ_SPLIT=split) for split in splits})
    candidates.update({f"DS_STORE={store}": replace(base, DS_STORE=store)
                       for store in kernel_module.DS_STORES if store != base.DS_STORE})
    candidates["DQ_FIRST=False" if base.DQ_FIRST else "DQ_FIRST"] = replace(
        base, DQ_FIRST=not base.DQ_FIRST)
    candidates["DS_FIRST=False" if base.DS_FIRST else "DS_FIRST"] = replace(
        base, DS_FIRST=not base.DS_FIRST)
    candidates["LONGEST_FIRST=False" if base.LONGEST_FIRST else "LONGEST_FIRST"] = replace(
        base, LONGEST_FIRST=not base.LONGEST_FIRST)
    if base.DKV_SPLIT == "head_dim" and base.DQ_WRITE == "tma_reduce":
        # the consumers' own reductions with the ring stage the TMA's dQ tile displaced
        candidates["DQ_WRITE=consumers STAGES=2"] = replace(base, DQ_WRITE="consumers", STAGES=2)
    if base.BQ == 128:               # the 64-query step (each warpgroup's dQ over its keys)
        candidates["BQ=64 DQ_SPLIT=keys DS_FIRST=False"] = replace(
            base, BQ=64, DQ_SPLIT="keys", DS_FIRST=False)
    if (base.DQ_WRITE, base.DS_STORE, base.DQ_FIRST) == ("consumers", "st", False):
        candidates.update({          # the three together
            f"DQ_WRITE={FAST['DQ_WRITE']} DQ_SPLIT={split} DS_STORE=stmatrix DQ_FIRST": replace(
                base, **FAST, DQ_SPLIT=split) for split in ("head_dim", "keys")})
    if all(getattr(base, k) == v for k, v in FAST.items()):     # the three undone
        candidates["DQ_WRITE=consumers DS_STORE=st DQ_FIRST=False"] = replace(
            base, DQ_WRITE="consumers", DS_STORE="st", DQ_FIRST=False)
    for name, cfg in candidates.items():
        try:
            cfg.check(head_dim)
        except ValueError:
            continue
        # configs that spill are no rows: the writer warps summing two partials at head dim
        # 128 (24 bytes where heads_q = heads_kv; 0.88 of the head_dim split), and 128-query
        # steps with dS computed under dV's wgmma (8-20 bytes)
        if not (head_dim == 128 and cfg.DQ_WRITE == "producer_warps" and cfg.DQ_SPLIT == "keys"
                or cfg.BQ == 128 and not cfg.DS_FIRST):
            rows[name] = cfg
    return rows


def padded_rows(batch: int, heads_q: int, seqlen_q: int, bq: int = BQ) -> int:
    """Rows of the dQ accumulator and the lse2 / D vectors: (batch, head, query) with seqlen_q
    padded to blocks of the kernel's step (bq rows)."""
    return batch * heads_q * -(-seqlen_q // bq) * bq


def pass_grids(batch: int, heads_q: int, seqlen_q: int, bq: int = BQ) -> tuple:
    """(the pre-pass's grid, the post-pass's): 64-row blocks of the padded rows (padding
    written) and of seqlen_q (padding dropped)."""
    return ((-(-seqlen_q // bq) * bq // passes.BQ, heads_q, batch),
            (-(-seqlen_q // passes.BQ), heads_q, batch))


_sm_count = sm_count


def kernel_arguments(q, k, v, do, dk, dv, dq_acc, neg_lse2, delta, causal: bool, scale: float,
                     cfg: Config, sms: int = SMS) -> tuple:
    """(grid, positional arguments, constexprs) of one launch: q, do (batch, seqlen_q, heads_q,
    d), k, v, dk, dv (batch, seqlen_k, heads_kv, d), dq_acc (padded_rows, d) f32, neg_lse2,
    delta (padded_rows,) f32; CUDA tensors, numpy arrays (the interpreter) or lk.TensorSpecs."""
    batch, _, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    args = (q, k, v, do, dk, dv, dq_acc, neg_lse2, delta, hq // hk, float(scale),
            float(scale) * LOG2E)
    constexprs = dict(D=d, STAGES=cfg.STAGES, CAUSAL=bool(causal), DQ_SPLIT=cfg.DQ_SPLIT,
                      DKV_SPLIT=cfg.DKV_SPLIT, DQ_WRITE=cfg.DQ_WRITE, DS_STORE=cfg.DS_STORE,
                      DQ_FIRST=cfg.DQ_FIRST,
                      PRODUCER_REGISTERS=cfg.PRODUCER_REGISTERS,
                      CONSUMER_REGISTERS=cfg.CONSUMER_REGISTERS, BQ=cfg.BQ,
                      DS_FIRST=cfg.DS_FIRST, LONGEST_FIRST=0)
    blocks = -(-sk // cfg.keys)
    if cfg.LONGEST_FIRST and causal and kernel_module.longest_first_pays(
            q.shape[1], sk, cfg.keys, cfg.BQ, hk * batch, hq // hk, sms):
        # sections of pairs along x, key blocks along y (key_block_ids)
        section = kernel_module.longest_first_section(hk * batch)
        constexprs["LONGEST_FIRST"] = section
        return (section, blocks, hk * batch // section), args, constexprs
    return (blocks, hk, batch), args, constexprs


def compile_default() -> dict[str, str]:
    """PTX of the default config of each head dim, non-causal and causal, and of the pre- and
    post-pass (a (4, 4096, 16, d) problem with 8 kv heads)."""
    import layoutkit as lk
    out = {}
    for d, cfg in CONFIGS.items():
        for causal in (False, True):
            t, tk = (lk.TensorSpec(lk.bf16, (4, 4096, h, d)) for h in (16, 8))
            rows = padded_rows(4, 16, 4096, cfg.BQ)
            grid, args, constexprs = kernel_arguments(
                t, tk, tk, t, tk, tk, lk.TensorSpec(lk.f32, (rows, d)),
                lk.TensorSpec(lk.f32, (rows,)), lk.TensorSpec(lk.f32, (rows,)), causal,
                d ** -0.5, cfg)
            name = f"attention_backward_d{d}{'_causal' if causal else ''}"
            out[name] = backward_kernel.ptx(*args, **constexprs)
        vector = lk.TensorSpec(lk.f32, (rows,))
        out[f"attention_backward_pre_pass_d{d}"] = passes.pre_pass.ptx(
            t, t, lk.TensorSpec(lk.f32, (4, 16, 4096)), vector, vector,
            lk.TensorSpec(lk.f32, (rows, d)), D=d, ROWS=cfg.BQ)
        out[f"attention_backward_post_pass_d{d}"] = passes.post_pass.ptx(
            lk.TensorSpec(lk.f32, (rows, d)), t, d ** -0.5, D=d, ROWS=cfg.BQ)
    return out


def check_inputs(grad_o, q, k, v, o, lse, causal, softmax_scale, layout: str):
    """Validate flash_attention_backward's arguments: returns grad_o, q, k, v, o as (batch,
    seqlen, heads, head_dim) views and the config. Each mistake is a ValueError naming the
    argument, its value and the rule."""
    from recipes import flash_attention as fa
    what = "flash_attention_backward"
    qs, ks, vs, _ = fa.check_inputs(q, k, v, causal, softmax_scale, layout, None)
    batch, sq, hq, d = qs.shape
    views = []
    for name, x in (("grad_o", grad_o), ("o", o)):
        if not hasattr(x, "dim") or x.dim() != 4 or str(x.dtype) != "torch.bfloat16" or \
                tuple(x.shape) != tuple(q.shape):
            raise ValueError(f"{what}: {name} is a bf16 tensor of q's shape {tuple(q.shape)} "
                             f"({layout}), got {getattr(x, 'dtype', type(x).__name__)} of shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
        if x.device != q.device:
            raise ValueError(f"{what}: {name} is on q's device ({q.device}), got {x.device}")
        views.append(x.transpose(1, 2) if layout == "bhsd" else x)
    if not hasattr(lse, "dim") or str(lse.dtype) != "torch.float32" or \
            tuple(lse.shape) != (batch, hq, sq):
        raise ValueError(f"{what}: lse is the forward's f32 (batch, heads_q, seqlen_q) = "
                         f"{(batch, hq, sq)} log-sum-exp, got {getattr(lse, 'dtype', None)} of "
                         f"shape {tuple(getattr(lse, 'shape', ()))}")
    if lse.device != q.device:
        raise ValueError(f"{what}: lse is on q's device ({q.device}), got {lse.device}")
    return views[0], qs, ks, vs, views[1], CONFIGS[d]


def flash_attention_backward(grad_o, q, k, v, o, lse, causal: bool = False,
                             softmax_scale: float | None = None, layout: str = "bshd",
                             config: Config | None = None):
    """(dq, dk, dv) of flash_attention(q, k, v, causal, softmax_scale, layout=layout) -> (o,
    lse) for the output gradient grad_o; bf16 CUDA tensors in the layout's order (dq, dk, dv
    new tensors shaped as q, k, v), lse f32 (batch, heads_q, seqlen_q) in natural log."""
    torch = require_torch("recipes.flash_attention_backward.flash_attention_backward")
    views = check_inputs(grad_o, q, k, v, o, lse, causal, softmax_scale, layout)
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"flash_attention_backward: config is a Config, got {config!r}")
    if config is not None:
        config.check(views[1].shape[-1])

    def launch(kernel, grid, *args, **constexprs):
        kernel[grid](*args, **constexprs)
    return run_steps(torch, views[:5], lse, causal, softmax_scale, layout,
                     config or views[5], launch)


def run_steps(torch, views, lse, causal: bool, softmax_scale, layout: str, cfg: Config,
              launch):
    """The pre-pass, the kernel and the post-pass (each run by launch(kernel, grid, *args,
    **constexprs)) on checked (batch, seqlen, heads, head_dim) views (grad_o, q, k, v, o) of
    any device: returns (dq, dk, dv) in the layout's order."""
    from recipes import flash_attention as fa
    dos, qs, ks, vs, os_ = views
    (batch, sq, hq, d), sk = qs.shape, ks.shape[1]
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    order = (lambda x: x.transpose(1, 2)) if layout == "bhsd" else (lambda x: x)
    nothing = qs.numel() == 0 or sk == 0                # no kernel runs: zero gradients
    grads = [(torch.zeros if nothing else torch.empty)(order(x).shape, device=x.device,
                                                     dtype=torch.bfloat16)
             for x in (qs, ks, vs)]
    dq, dk, dv = (order(g) for g in grads)
    if nothing:
        return tuple(grads)
    rows, (grid_pre, grid_post) = padded_rows(batch, hq, sq, cfg.BQ), pass_grids(batch, hq, sq,
                                                                                 cfg.BQ)
    neg_lse2, delta = (torch.empty(rows, device=qs.device, dtype=torch.float32)
                       for _ in range(2))
    dq_acc = torch.empty(rows, d, device=qs.device, dtype=torch.float32)
    launch(passes.pre_pass, grid_pre, dos, os_, lse, neg_lse2, delta, dq_acc, D=d, ROWS=cfg.BQ)
    qs, ks, vs, dos = (fa._tma_ready(x) for x in (qs, ks, vs, dos))
    dk_run, dv_run = (fa._tma_ready(x) for x in (dk, dv))
    grid, args, constexprs = kernel_arguments(qs, ks, vs, dos, dk_run, dv_run, dq_acc,
                                              neg_lse2, delta, causal, scale, cfg,
                                              _sm_count(qs.device))
    launch(backward_kernel, grid, *args, **constexprs)
    for run, out in ((dk_run, dk), (dv_run, dv)):
        if run.data_ptr() != out.data_ptr():
            out.copy_(run)
    launch(passes.post_pass, grid_post, dq_acc, dq, scale, D=d, ROWS=cfg.BQ)
    return tuple(grads)


def reference(q, k, v, do, causal: bool, scale: float):
    """float64 numpy (dq, dk, dv) on (batch, seqlen, heads, head_dim) arrays (rows that see no
    key get dq = 0 and add nothing)."""
    import numpy as np

    from recipes import flash_attention as fa
    q, k, v, do = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    group = q.shape[2] // k.shape[2]
    kr, vr = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    s = fa.reference_scores(q, k, causal, scale)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    l = p.sum(axis=-1, keepdims=True)
    p = np.where(l > 0, p / np.where(l > 0, l, 1.0), 0.0)
    dp = np.einsum("bqhd,bkhd->bhqk", do, vr)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True)) * scale
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kr)
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q)
    dv = np.einsum("bhqk,bqhd->bkhd", p, do)
    fold = lambda x: x.reshape(x.shape[0], x.shape[1], k.shape[2], group, -1).sum(axis=3)
    return dq, fold(dk), fold(dv)


ERROR_FLOOR = 1e-2     # a gradient that is 0 (one visible key: dS = 0) is compared absolutely
CPU_CASES = ((1, 70, 150, 2, 1, 64, False), (1, 100, 130, 2, 2, 64, True),
             (1, 130, 60, 2, 1, 128, True), (1, 70, 100, 2, 1, 256, True))
# batch, sq, sk, hq, hk, d, causal


def check_cpu(seed: int = 0, cases=CPU_CASES, config: Config | None = None) -> float:
    """Run the three kernels on the CPU interpreter on small ragged problems (GQA, causal with
    seqlen_q < and > seqlen_k, every split; `config` instead of each head dim's default)
    against numpy in float64; returns the worst
    error of dq, dk, dv relative to each one's largest reference entry (at least ERROR_FLOOR;
    AssertionError past 2**-6)."""
    import numpy as np

    from recipes import flash_attention as fa
    from layoutkit.dsl.interpreter import from_bf16, interpret, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch, sq, sk, hq, hk, d, causal in cases:
        cfg = config or CONFIGS[d]
        q, k, v, do = (to_bf16(rng.standard_normal((batch, n, h, d)))
                       for n, h in ((sq, hq), (sk, hk), (sk, hk), (sq, hq)))
        scale = d ** -0.5
        o, lse = fa.reference(from_bf16(q), from_bf16(k), from_bf16(v), causal, scale)
        o = to_bf16(o)
        want = reference(from_bf16(q), from_bf16(k), from_bf16(v), from_bf16(do), causal, scale)
        rows, (grid_pre, grid_post) = padded_rows(batch, hq, sq, cfg.BQ), \
            pass_grids(batch, hq, sq, cfg.BQ)
        neg_lse2, delta = (np.full(rows, np.nan, np.float32) for _ in range(2))
        dq_acc = np.full((rows, d), np.nan, np.float32)      # the pre-pass zeroes it
        interpret(passes.pre_pass, grid_pre, do, o, lse.astype(np.float32), neg_lse2, delta,
                  dq_acc, D=d, ROWS=cfg.BQ)
        dk, dv = (np.zeros((batch, sk, hk, d), np.uint16) for _ in range(2))
        grid, args, constexprs = kernel_arguments(q, k, v, do, dk, dv, dq_acc, neg_lse2,
                                                  delta, causal, scale, cfg)
        interpret(backward_kernel, grid, *args, **constexprs)
        dq = np.zeros((batch, sq, hq, d), np.uint16)
        interpret(passes.post_pass, grid_post, dq_acc, dq, scale, D=d, ROWS=cfg.BQ)
        dq = from_bf16(dq)
        for name, got, ref in (("dq", dq, want[0]), ("dk", from_bf16(dk), want[1]),
                               ("dv", from_bf16(dv), want[2])):
            err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), ERROR_FLOOR))
            assert err < 2 ** -6, f"{name} off by {err:.3g} of its max in case " \
                                  f"{(batch, sq, sk, hq, hk, d, causal)}"
            worst = max(worst, err)
    return worst


def reference_torch(q, k, v, grad_o, causal: bool, scale: float):
    """(dq, dk, dv) by torch autograd in float64 of attention on (batch, seqlen, heads,
    head_dim) tensors (recipes.flash_attention.reference_torch's forward)."""
    import torch

    from recipes import flash_attention as fa
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    o, _ = fa.reference_torch(q, k, v, causal, scale)
    return torch.autograd.grad(o, (q, k, v), grad_o.double())


def check(seed: int = 0) -> float:
    """Random bf16 problems (every head dim, causal and not, GQA, ragged seqlen_q != seqlen_k,
    seqlen_q 1) on the GPU against torch autograd in float64; returns the worst error of dq,
    dk, dv relative to each one's largest reference entry (at least ERROR_FLOOR;
    AssertionError past 2**-7)."""
    import torch

    from recipes import flash_attention as fa
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cases = [(1, 1, 300, 4, 2, 64, False), (2, 300, 77, 4, 2, 64, True),
             (2, 333, 517, 4, 2, 128, True), (1, 1000, 1000, 2, 1, 128, False),
             (1, 77, 300, 2, 2, 256, True), (1, 513, 700, 2, 1, 256, False)]
    worst = 0.0
    for batch, sq, sk, hq, hk, d, causal in cases:
        q, do = (torch.randn(batch, sq, hq, d, device="cuda", generator=gen).to(torch.bfloat16)
                 for _ in range(2))
        k, v = (torch.randn(batch, sk, hk, d, device="cuda", generator=gen).to(torch.bfloat16)
                for _ in range(2))
        o, lse = fa.flash_attention(q, k, v, causal)
        got = flash_attention_backward(do, q, k, v, o, lse, causal)
        want = reference_torch(q, k, v, do, causal, d ** -0.5)
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            err = ((g.double() - w).abs().max() / w.abs().max().clamp_min(ERROR_FLOOR)).item()
            assert err < 2 ** -7, f"{name} off by {err:.3g} in case {(batch, sq, sk, hq, hk, d)}"
            worst = max(worst, err)
    return worst


def benchmark(reps: int = 20) -> list[dict]:
    """TFLOP/s (2.5 x the forward's FLOPs) of the backward against torch SDPA's Flash backend
    at seqlen 4096, 16 heads, batch 4 (benchmarks/bench_attention_backward.py has the full
    table: cuDNN, FA4, every seqlen, GQA)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from layoutkit.tools.benchmarking import interleaved, tflops
    from recipes import flash_attention as fa
    rows = []
    for d in HEAD_DIMS:
        for causal in (False, True):
            q, k, v, do = (torch.randn(4, 4096, 16, d, device="cuda").to(torch.bfloat16)
                           for _ in range(4))
            o, lse = fa.flash_attention(q, k, v, causal)
            leaves = [x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v)]
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
            dout = do.transpose(1, 2)
            times = interleaved({
                "layoutkit": lambda: flash_attention_backward(do, q, k, v, o, lse, causal),
                "sdpa": lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)},
                reps=reps)
            flops = 2.5 * fa.attention_flops(4, 16, 4096, 4096, d, causal)
            ours, theirs = (tflops(flops, times[x].median_ms) for x in ("layoutkit", "sdpa"))
            rows.append({"case": f"d{d} s4096 {'causal' if causal else 'full'}",
                         "layoutkit_tflops": ours, "sdpa_tflops": theirs,
                         "speedup": ours / theirs})
            print(f"d={d} causal={causal}: layoutkit {ours:.1f}, SDPA flash {theirs:.1f} "
                  f"TFLOP/s ({ours / theirs:.3f}x)")
    return rows
