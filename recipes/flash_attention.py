"""FlashAttention-3-class forward attention for Hopper: O = softmax(Q K^T * scale) V and the
log-sum-exp of every row, bf16 in and out, f32 accumulation and softmax.

Tensors are (batch, seqlen, heads, head_dim) like FlashAttention's API (any strides with a
contiguous head_dim; `layout="bhsd"` takes torch SDPA's (batch, heads, seqlen, head_dim)
instead); K and V may have fewer heads than Q (grouped-query attention: query head h reads
key/value head h // (heads_q // heads_kv)); seqlen_q and seqlen_k may differ and need not be
tile multiples. Causal masking is bottom-right aligned (FlashAttention >= 2.1): query i sees
keys j <= i + seqlen_k - seqlen_q. Rows that see no key get O = 0 and lse = -inf.

The kernel (one CTA per 128-row query tile, head and batch: a TMA producer warpgroup and
two ping-ponged wgmma consumer warpgroups; `Config.CONSUMERS = 3` takes 192-row tiles and
three), its numerics and its instruction budget are in
recipes/_flash_attention_kernel.py; this file holds the configs per head dim, the host entry
point `flash_attention`, the references, the checks and the benchmark.
"""
from __future__ import annotations

import math
from dataclasses import asdict, replace

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _flash_attention_kernel as kernel_module

Config, attention_kernel = kernel_module.Config, kernel_module.attention_kernel
kernel_for = kernel_module.kernel_for
BM, HEAD_DIMS, LOG2E = kernel_module.BM, kernel_module.HEAD_DIMS, kernel_module.LOG2E

# Defaults per (head dim, causal). Non-causal head dim 128 takes 176-key blocks (FlashAttention-
# 3's choice there): 10% fewer instructions per key than 128 (the kernel module's budget) and the
# SS wgmma's Q read amortized over 176 columns; causal head dim 128 keeps 128 (176: 0.93x at 2k,
# 1.01x at 16k). Head dim 256 is bound by shared memory (the 64 KB Q tile and two stages of K and
# V: 80 keys fill 224 KB) and by registers (O alone is 128 f32 per consumer thread; S of 80 keys
# adds 40); causal takes 80 too (1.03x / 1.09x the 64-key blocks at 2k / 16k). Non-causal head
# dim 64 takes three consumer warpgroups (192-row query tiles, THREE_CONSUMERS below): on the H200
# 1.067x (2k) and 1.147x (8k) the two-consumer kernel in one run; causal it was 0.93x / 1.04x,
# so causal keeps two (docs/PERFORMANCE.md, the three-consumer ablation).
CONFIGS = {(64, False): Config(BN=128, CONSUMERS=3), (64, True): Config(BN=128),
           (128, False): Config(BN=176), (128, True): Config(BN=128),
           (256, False): Config(BN=80), (256, True): Config(BN=80)}
# Where seqlen_k is not a multiple of BN, the last key block computes padding. Non-causal head
# dim 128 may also take 128-key blocks, which cost 1.3% more per key than 176 (the ablation in
# docs/PERFORMANCE.md, seqlen 8k): default_config picks whichever costs less in all.
ALTERNATIVE_BLOCKS = {(128, False): (128, 1.013)}    # (head dim, causal): (BN, cost per key)
# Three consumer warpgroups (192-row query tiles, 160 registers per consumer thread): ablation
# rows beside each default (FlashAttention-3's tile at head dim 64), amortizing each K/V tile
# over 1.5x the queries. In 160 registers the overlapped pipeline holds O, S_i and P_{i-1}
# without spills up to 128 keys at head dim 64 (144 spill) and 80 at head dim 128 (96 spill).
THREE_CONSUMERS = {
    64: {"3 consumers": Config(BN=128, CONSUMERS=3),
         "3 consumers, 3 stages": Config(BN=128, STAGES=3, CONSUMERS=3)},
    128: {"3 consumers": Config(BN=64, CONSUMERS=3),
          "3 consumers, 3 stages": Config(BN=64, STAGES=3, CONSUMERS=3),
          "3 consumers, BN=80": Config(BN=80, CONSUMERS=3)},
}
# Causal tiles take key blocks dividing BM, and these (query tile: key blocks): key_blocks is
# exact for any BN; the rule keeps each tile's masked blocks few (two for a divisor and
# 192: 128, FA3's causal tile; at most three for 128: 80 or 176, the non-causal defaults)
CAUSAL_BLOCKS = {192: (128,), 128: (80, 176)}
ALIGN_ELEMENTS = 8            # TMA: global addresses and strides are multiples of 16 bytes
SHARED_LIMIT = 232448 - 1024  # sm_90's opt-in shared memory, less room for the mbarriers
TUNED_BLOCKS = (64, 80, 128, 176)   # key blocks autotune_space tries
_TUNERS: dict = {}


def default_config(head_dim: int, causal: bool, seqlen_k: int) -> Config:
    """CONFIGS[head_dim, causal], or its ALTERNATIVE_BLOCKS key block where that costs less
    for seqlen_k keys (padding of the last block included).

    >>> [default_config(128, False, sk).BN for sk in (1000, 2048, 4096, 8192, 16384)]
    [128, 128, 128, 176, 176]
    """
    if (head_dim, causal) not in CONFIGS:
        raise ValueError(f"flash_attention: no default config for head_dim = {head_dim!r}, "
                         f"causal = {causal!r}; head_dim is one of {HEAD_DIMS}, causal a bool")
    cfg = CONFIGS[head_dim, causal]
    if (head_dim, causal) in ALTERNATIVE_BLOCKS:
        bn, cost = ALTERNATIVE_BLOCKS[head_dim, causal]
        if -(-seqlen_k // bn) * bn * cost < -(-seqlen_k // cfg.BN) * cfg.BN:
            return replace(cfg, BN=bn)
    return cfg


def autotune_space(head_dim: int, causal: bool) -> list[Config]:
    """The configs `layoutkit tune flash_attention` times for one head dim: the default's
    ablations and each key block of TUNED_BLOCKS that fits shared memory (and causal attention,
    causal_block_fits) with the default's pipeline."""
    base = CONFIGS[head_dim, causal]
    space = dict.fromkeys(ablations(head_dim, causal).values())
    for bn in TUNED_BLOCKS:
        cfg = replace(base, BN=bn)
        if cfg.smem_bytes(head_dim) <= SHARED_LIMIT and (not causal or causal_block_fits(cfg)):
            space.setdefault(cfg)
    return list(space)


def tuner(head_dim: int, causal: bool) -> lk.Autotuner:
    """The autotuner of one head dim (key: q's and k's shapes, strides and dtype, the other
    facts, the device); a key `layoutkit tune` never swept launches default_config."""
    found = _TUNERS.get((head_dim, causal))
    if found is None:
        def default(args):
            return _tuned(default_config(args["D"], args["CAUSAL"], args["k"].shape[1]))
        found = _TUNERS[head_dim, causal] = lk.autotune(
            [_tuned(c) for c in autotune_space(head_dim, causal)], key=["q", "k"],
            default=default)(attention_kernel)
    return found


def _call_facts(args: tuple) -> tuple:
    """What fixes a launch's tuning key and grid (Autotuner.launch_remembered's facts): each
    tensor's shape, strides, dtype, device and 16-byte alignment, and the group size."""
    return tuple((x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16)
                 for x in args[:5]) + (args[5],)


def _tuned(cfg: Config) -> lk.Config:
    """cfg as the autotuner's lk.Config (its fields are the kernel's constexprs)."""
    return lk.Config(num_warps=kernel_module.warps(cfg.CONSUMERS), **asdict(cfg))


def ablations(head_dim: int, causal: bool = False) -> dict[str, Config]:
    """The default config and one switched-off pipeline choice per entry (benchmark rows;
    causal: the query tiles in block order, not longest first), plus 128-key blocks where the
    default differs and they fit in shared memory (non-causal head dim 128, whose default is
    176), causal with the non-causal default's key block and with 64 where they differ, and the three-consumer rows (THREE_CONSUMERS: 192-row query tiles) of head dims 64
    and 128."""
    base = CONFIGS[head_dim, causal]
    rows = {"default": base, "no ping-pong": replace(base, PINGPONG=False),
            "no intra-warpgroup overlap": replace(base, OVERLAP=False),
            "no ping-pong, no overlap": replace(base, PINGPONG=False, OVERLAP=False),
            "1 stage": replace(base, STAGES=1)}
    if causal:
        rows["tiles in block order"] = replace(base, LONGEST_FIRST=False)
    bn128 = replace(base, BN=128)
    if base.BN != 128 and bn128.smem_bytes(head_dim) <= SHARED_LIMIT:
        rows["BN=128"] = bn128
    for bn in (CONFIGS[head_dim, False].BN, 64):      # causal: the non-causal block, and 64
        other = replace(base, BN=bn)
        if causal and bn != base.BN and causal_block_fits(other) and \
                other.smem_bytes(head_dim) <= SHARED_LIMIT:
            rows[f"BN={bn}"] = other
    if base.CONSUMERS != 2:
        rows["2 consumers"] = replace(base, CONSUMERS=2, PRODUCER_REGISTERS=None,
                                      CONSUMER_REGISTERS=None)   # that count's budgets
    for name, cfg in THREE_CONSUMERS.get(head_dim, {}).items():
        if (not causal or causal_block_fits(cfg)) and cfg != base:
            rows[name] = cfg
    return rows


def causal_block_fits(cfg: Config) -> bool:
    """Whether causal attention takes cfg's key block: BN divides BM, or CAUSAL_BLOCKS lists it."""
    return cfg.BM % cfg.BN == 0 or cfg.BN in CAUSAL_BLOCKS.get(cfg.BM, ())


def _or_blocks(bm: int) -> str:
    return f" or one of {CAUSAL_BLOCKS[bm]}" if bm in CAUSAL_BLOCKS else ""


def tuned_grid(sq: int, hq: int, batch: int):
    """The grid of a tuned launch, a function of the chosen config's constexprs (`meta`):
    one CTA per (64 * CONSUMERS query rows, head, batch)."""
    return lambda meta: (-(-sq // (kernel_module.WG_ROWS * meta["CONSUMERS"])), hq, batch)


def kernel_arguments(q, k, v, o, lse, causal: bool, scale: float, cfg: Config) -> tuple:
    """(grid, positional arguments, constexprs) of one launch: q, o (batch, seqlen_q, heads_q,
    head_dim), k, v (batch, seqlen_k, heads_kv, head_dim) and lse (batch * heads_q, seqlen_q), as
    CUDA tensors, numpy arrays (the CPU interpreter) or lk.TensorSpecs (PTX only)."""
    batch, sq, hq, d = q.shape
    hk = k.shape[2]
    args = (q, k, v, o, lse, hq // hk, float(scale) * LOG2E)
    return (-(-sq // cfg.BM), hq, batch), args, kernel_constexprs(cfg, d, causal)


def kernel_constexprs(cfg: Config, head_dim: int, causal: bool) -> dict:
    """The constexprs of a launch with `cfg` (the padded and varlen kernels take the same): every
    Config field, D and CAUSAL."""
    return dict(asdict(cfg), D=head_dim, CAUSAL=bool(causal))


def compile_default() -> dict[str, str]:
    """PTX of the default config of each head dim, non-causal and causal (a (4, 4096, 16, d)
    problem's specialization)."""
    out = {}
    for (d, causal), cfg in CONFIGS.items():
        t = lk.TensorSpec(lk.bf16, (4, 4096, 16, d))
        grid, args, constexprs = kernel_arguments(t, t, t, t, lk.TensorSpec(lk.f32, (64, 4096)),
                                                  causal, d ** -0.5, cfg)
        out[default_name(d, causal)] = kernel_for(cfg).ptx(*args, **constexprs)
    return out


def default_name(head_dim: int, causal: bool) -> str:
    """compile_default's name of the default specialization of (head_dim, causal)."""
    cfg = CONFIGS[head_dim, causal]
    return (f"attention_d{head_dim}_bn{cfg.BN}_s{cfg.STAGES}"
            f"{f'_c{cfg.CONSUMERS}' if cfg.CONSUMERS != 2 else ''}{'_causal' if causal else ''}")


def _tma_ready(x):
    """x itself when TMA can read it (head_dim contiguous, 16-byte aligned address and
    strides; a mode of extent 1 may have any stride, made a multiple of 16 bytes in a view),
    else a contiguous copy (a documented cost)."""
    aligned = x.stride(3) == 1 and x.data_ptr() % 16 == 0 and \
        all(x.stride(i) % ALIGN_ELEMENTS == 0 or x.shape[i] == 1 for i in range(3))
    if not aligned:
        return x.contiguous()
    if any(x.stride(i) % ALIGN_ELEMENTS for i in range(3)):      # extent 1: any stride will do
        strides = [s if s % ALIGN_ELEMENTS == 0 else x.numel() for s in x.stride()[:3]]
        return x.as_strided(x.shape, (*strides, 1))
    return x


def check_inputs(q, k, v, causal, softmax_scale, layout: str, config):
    """Validate flash_attention's arguments (torch tensors, or anything with the same shape,
    dtype, device, dim() and transpose()); returns q, k, v as (batch, seqlen, heads, head_dim)
    views and the config. Every mistake is a ValueError naming the argument, value and rule."""
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"flash_attention: layout is 'bshd' (batch, seqlen, heads, head_dim; "
                         f"FlashAttention's) or 'bhsd' (torch SDPA's), got {layout!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not hasattr(x, "dim") or x.dim() != 4:
            raise ValueError(f"flash_attention: {name} is a 4-D tensor ({layout}), got "
                             f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
        if str(x.dtype) != "torch.bfloat16":
            raise ValueError(f"flash_attention: {name} is a bf16 tensor, got {x.dtype}")
    q, k, v = ((x.transpose(1, 2) if layout == "bhsd" else x) for x in (q, k, v))
    (batch, _, hq, d), (bk, sk, hk, dk) = tuple(q.shape), tuple(k.shape)
    if tuple(v.shape) != tuple(k.shape) or bk != batch or dk != d:
        raise ValueError(f"flash_attention: k and v are (batch, seqlen_k, heads_kv, head_dim) "
                         f"with q's batch {batch} and head_dim {d} ({layout} order), got k "
                         f"{tuple(k.shape)} and v {tuple(v.shape)}")
    cfg = check_options("flash_attention", d, hq, hk, causal, softmax_scale, config, sk)
    if not q.is_cuda:
        raise ValueError(f"flash_attention: q is a CUDA tensor, got one on {q.device}")
    for name, x in (("k", k), ("v", v)):
        if x.device != q.device:
            raise ValueError(f"flash_attention: {name} is on q's device ({q.device}), got "
                             f"{x.device}")
    return q, k, v, cfg


def check_options(what: str, d: int, hq: int, hk: int, causal, softmax_scale, config,
                  seqlen_k: int) -> Config:
    """The rules on head_dim, the head counts, causal, softmax_scale and config that every
    entry point shares (`what` names it in the ValueError); returns the config to run
    (default_config for seqlen_k keys when config is None)."""
    if d not in HEAD_DIMS:
        raise ValueError(f"{what}: head_dim = {d} is not supported; the kernel "
                         f"handles {', '.join(map(str, HEAD_DIMS))}")
    if hk == 0 or hq % hk:
        raise ValueError(f"{what}: heads_q = {hq} must be a multiple of heads_kv = "
                         f"{hk} (grouped-query attention shares each K/V head among "
                         "heads_q // heads_kv query heads)")
    if not isinstance(causal, bool):
        raise ValueError(f"{what}: causal is True or False, got {causal!r}")
    if softmax_scale is not None and (isinstance(softmax_scale, bool) or
                                      not isinstance(softmax_scale, (int, float)) or
                                      not math.isfinite(softmax_scale)):
        raise ValueError(f"{what}: softmax_scale is a finite float or None "
                         f"(1/sqrt(head_dim)), got {softmax_scale!r}")
    if softmax_scale is not None and softmax_scale < 0:
        raise ValueError(f"{what}: softmax_scale is >= 0 (the running row max is "
                         f"taken over unscaled scores), got {softmax_scale!r}")
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"{what}: config is a Config, got {config!r}")
    cfg = config or default_config(d, causal, seqlen_k)
    if causal and not causal_block_fits(cfg):
        raise ValueError(f"{what}: causal attention needs a key block BN dividing "
                         f"{cfg.BM} (the query tile){_or_blocks(cfg.BM)}, got config BN = "
                         f"{cfg.BN}")
    if cfg.smem_bytes(d) > SHARED_LIMIT:
        raise ValueError(f"{what}: config {cfg} needs {cfg.smem_bytes(d)} bytes of "
                         f"shared memory at head_dim {d}, over the {SHARED_LIMIT} available")
    return cfg


def flash_attention(q, k, v, causal: bool = False, softmax_scale: float | None = None, *,
                    layout: str = "bshd", config: Config | None = None):
    """Forward attention on bf16 CUDA tensors: returns (o, lse). q is (batch, seqlen_q,
    heads_q, head_dim) and k, v (batch, seqlen_k, heads_kv, head_dim) for layout="bshd"; with
    layout="bhsd" every tensor (o too) is (batch, heads, seqlen, head_dim) as in torch SDPA.
    o is bf16 in q's layout, lse f32 (batch, heads_q, seqlen_q) in natural-log units;
    softmax_scale defaults to 1/sqrt(head_dim); causal is bottom-right aligned."""
    torch = require_torch("recipes.flash_attention.flash_attention")
    qs, ks, vs, cfg = check_inputs(q, k, v, causal, softmax_scale, layout, config)
    (batch, sq, hq, d), sk = qs.shape, ks.shape[1]
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    shape = (batch, hq, sq, d) if layout == "bhsd" else (batch, sq, hq, d)
    out = torch.empty(shape, device=q.device, dtype=torch.bfloat16)
    o = out.transpose(1, 2) if layout == "bhsd" else out
    lse = torch.empty(batch, hq, sq, device=q.device, dtype=torch.float32)
    if out.numel() == 0:
        return out, lse
    if sk == 0:                 # no key at all (a tensor map has no empty extents)
        o.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    qs, ks, vs = (_tma_ready(x) for x in (qs, ks, vs))
    o_run = _tma_ready(o)
    rows = lse.view(batch * hq, sq)
    grid, args, constexprs = kernel_arguments(qs, ks, vs, o_run, rows, causal, scale, cfg)
    if config is None:          # the swept winner of this key, else default_config's cfg
        tuner(d, causal).launch_remembered(_call_facts(args), tuned_grid(sq, hq, batch), *args,
                                           D=d, CAUSAL=causal)
    else:
        kernel_for(cfg)[grid](*args, **constexprs)
    if o_run.data_ptr() != o.data_ptr():
        o.copy_(o_run)
    return out, lse


def reference(q, k, v, causal: bool, scale: float):
    """float64 numpy attention on (batch, seqlen, heads, head_dim) arrays: (o, lse); rows that
    see no key give o = 0, lse = -inf."""
    import numpy as np
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = reference_scores(q, k, causal, scale)
    v = np.repeat(v, q.shape[2] // k.shape[2], axis=2)
    m = s.max(axis=-1, keepdims=True)
    m_use = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_use)
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.einsum("bhqk,bkhd->bqhd", np.where(l > 0, p / l, 0.0), v)
        lse = np.where(l > 0, m_use + np.log(l), -np.inf)[..., 0]
    return o, lse


def reference_scores(q, k, causal: bool, scale: float):
    """The references' float64 scores S = q k^T * scale, (batch, heads_q, seqlen_q, seqlen_k),
    of float64 (batch, seqlen, heads, head_dim) arrays (query head h reads key head h // group),
    -inf where bottom-right causal masking hides a key."""
    import numpy as np
    k = np.repeat(k, q.shape[2] // k.shape[2], axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    sq, sk = q.shape[1], k.shape[1]
    if causal:
        visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
        s = np.where(visible, s, -np.inf)
    return s


def _finite_error(got, want) -> float:
    """relative_to_max over finite entries; inf when the infinite entries differ."""
    import numpy as np
    inf = ~np.isfinite(want)
    if np.any(got[inf] != want[inf]) or np.any(~np.isfinite(got[~inf])):
        return float("inf")
    fin = want[~inf]
    return float(np.max(np.abs(got[~inf] - fin)) / max(np.max(np.abs(fin)), 1e-30)) \
        if fin.size else 0.0


CPU_CASES = ((1, 70, 150, 2, 1, 64, False), (1, 100, 200, 2, 2, 64, True),
             (1, 130, 40, 1, 1, 64, True))       # batch, sq, sk, hq, hk, d, causal


def check_cpu(seed: int = 0, cases=CPU_CASES, config: Config | None = None) -> float:
    """Run the kernel on the CPU interpreter (TMA, wgmma, mbarrier rings, roles, named barriers,
    with race checking) on small ragged problems (GQA, causal with seqlen_q < and > seqlen_k)
    against numpy in float64; returns the worst error relative to the largest |o| (or |lse|)
    (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch, sq, sk, hq, hk, d, causal in cases:
        cfg = config or default_config(d, causal, sk)
        q, k, v = (to_bf16(rng.standard_normal((batch, n, h, d)))
                   for n, h in ((sq, hq), (sk, hk), (sk, hk)))
        scale = d ** -0.5
        o_want, lse_want = reference(from_bf16(q), from_bf16(k), from_bf16(v), causal, scale)
        o = np.zeros((batch, sq, hq, d), np.uint16)
        lse = np.zeros((batch * hq, sq), np.float32)
        grid, args, constexprs = kernel_arguments(q, k, v, o, lse, causal, scale, cfg)
        worst = max(worst, check_on_cpu(
            kernel_for(cfg), grid, *args, **constexprs, error=_finite_error,
            expect={"o": o_want, "lse": lse_want.reshape(batch * hq, sq)},
            tolerance=2 ** -7))
    return worst


def check(seed: int = 0) -> float:
    """Random bf16 problems (ragged, GQA, causal with seqlen_q <, = and > seqlen_k, seqlen_q 1,
    both layouts, every ablation config) on the GPU against torch in float64; returns the
    worst error of o relative to max |o_ref| (AssertionError past 2**-7, or an lse off by more
    than 2e-3 + 1e-5 |lse| where finite, or an infinity in the wrong place)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cases = [(1, 1, 1, 1, 1, 64, False), (2, 300, 257, 4, 2, 64, False),
             (2, 257, 300, 4, 1, 128, True), (1, 1000, 600, 2, 2, 128, True),
             (1, 1, 1000, 8, 2, 128, True), (3, 129, 129, 2, 2, 64, True),
             (1, 512, 2048, 4, 4, 128, False)]
    worst = 0.0
    for i, (batch, sq, sk, hq, hk, d, causal) in enumerate(cases):
        q = torch.randn(batch, sq, hq, d, device="cuda", generator=gen).to(torch.bfloat16)
        k = torch.randn(batch, sk, hk, d, device="cuda", generator=gen).to(torch.bfloat16)
        v = torch.randn(batch, sk, hk, d, device="cuda", generator=gen).to(torch.bfloat16)
        configs = list(ablations(d, causal).values())
        cfg = configs[i % len(configs)]
        o, lse = flash_attention(q, k, v, causal=causal, config=cfg)
        o_ref, lse_ref = reference_torch(q, k, v, causal, d ** -0.5)
        worst = max(worst, compare(o, lse, o_ref, lse_ref, f"case {i} {cfg}"))
    return worst


def reference_torch(q, k, v, causal: bool, scale: float):
    """float64 torch attention on (batch, seqlen, heads, head_dim) tensors: (o, lse (batch,
    heads, seqlen_q)); rows that see no key give o = 0, lse = -inf."""
    import torch
    q, k, v = (x.double().transpose(1, 2) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    sq, sk = q.shape[2], k.shape[2]
    if causal:
        rows = torch.arange(sq, device=q.device)[:, None]
        visible = torch.arange(sk, device=q.device)[None, :] <= rows + sk - sq
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.clamp_min(-1e300)[..., None]).nan_to_num(0.0)
    return (p @ v).transpose(1, 2), lse


def compare(o, lse, o_ref, lse_ref, what: str) -> float:
    """Error of o relative to max |o_ref|; asserts it (2**-7) and lse (2e-3 + 1e-5 |lse| where
    finite, the same infinities)."""
    import torch
    assert not o.isnan().any(), f"{what}: NaN in o (an element not written?)"
    err = ((o.double() - o_ref).abs().max() / o_ref.abs().max().clamp_min(1e-30)).item()
    assert err < 2 ** -7, f"{what}: o off by {err:.3g} of max |o|"
    finite = torch.isfinite(lse_ref)
    assert torch.equal(torch.isfinite(lse), finite), f"{what}: lse infinities misplaced"
    assert (lse[~finite] == lse_ref[~finite]).all(), f"{what}: lse infinities differ"
    if finite.any():      # f32 scores: the error grows with the logits' magnitude
        off = (lse.double()[finite] - lse_ref[finite]).abs() - 1e-5 * lse_ref[finite].abs()
        assert off.max().item() < 2e-3, f"{what}: lse off by {off.max().item():.3g} + 1e-5|lse|"
    return err


def attention_flops(batch: int, heads: int, sq: int, sk: int, d: int, causal: bool) -> float:
    """4 * batch * heads * sq * sk * d, halved for causal (FlashAttention's convention)."""
    return 4.0 * batch * heads * sq * sk * d / (2 if causal else 1)


def tune(reps: int = 20) -> list[dict]:
    """`layoutkit tune flash_attention`: sweep autotune_space on the GPU for each head dim,
    causal and not, at the benchmark's shape (4 x 4096 tokens x 2048 channels); the winners are
    kept per key on disk, where flash_attention's later calls of that key find them."""
    import torch
    rows = []
    for d in HEAD_DIMS:
        for causal in (False, True):
            batch, heads, s = 4, 2048 // d, 4096
            q, k, v = (torch.randn(batch, s, heads, d, device="cuda").to(torch.bfloat16)
                       for _ in range(3))
            o = torch.empty_like(q)
            lse = torch.empty(batch * heads, s, device="cuda", dtype=torch.float32)
            _, args, _ = kernel_arguments(q, k, v, o, lse, causal, d ** -0.5,
                                          default_config(d, causal, s))
            t = tuner(d, causal)
            t.reps = reps
            best = t.tune(tuned_grid(s, heads, batch), *args, D=d, CAUSAL=causal)
            times = {c: ms for c, ms in t.report.items() if isinstance(ms, float)}
            default = str(_tuned(default_config(d, causal, s)))
            rows.append({"case": f"d{d} s{s} {'causal' if causal else 'full'}",
                         "best": str(best), "best_ms": times[str(best)],
                         "default_ms": times.get(default, float("nan")),
                         "configs": len(t.report), "dropped": len(t.report) - len(times)})
    return rows


def benchmark(reps: int = 20) -> list[dict]:
    """TFLOP/s of flash_attention against torch SDPA's best backend (benchmarks/
    bench_attention.py has the full table and the ablation rows)."""
    import torch

    from layoutkit.tools.benchmarking import interleaved, tflops
    rows = []
    for d in HEAD_DIMS:
        for causal in (False, True):
            batch, heads, s = 4, 2048 // d, 4096         # 16k tokens x 2048 channels
            q, k, v = (torch.randn(batch, s, heads, d, device="cuda").to(torch.bfloat16)
                       for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            sdpa = torch.nn.functional.scaled_dot_product_attention
            times = interleaved({"layoutkit": lambda: flash_attention(q, k, v, causal),
                                 "sdpa": lambda: sdpa(qt, kt, vt, is_causal=causal)}, reps=reps)
            flops = attention_flops(batch, heads, s, s, d, causal)
            ours, theirs = (tflops(flops, times[x].median_ms) for x in ("layoutkit", "sdpa"))
            rows.append({"case": f"d{d} s{s} {'causal' if causal else 'full'}",
                         "layoutkit_tflops": ours, "sdpa_tflops": theirs,
                         "speedup": ours / theirs})
            print(f"d={d} seqlen={s} causal={causal}: layoutkit {ours:.1f}, SDPA {theirs:.1f} "
                  f"TFLOP/s ({ours / theirs:.3f}x)")
    return rows


# the backward (recipes/flash_attention_backward.py), reached from here as the entry points are
from recipes.flash_attention_backward import flash_attention_backward  # noqa: E402,F401
