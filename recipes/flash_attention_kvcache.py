"""Decode attention over a KV cache, FlashAttention's `flash_attn_with_kvcache` semantics: a few
query rows per sequence (seqlen_q 1..16: decode, speculative decode) against each sequence's
cached keys and values, contiguous or paged, split over key ranges on long caches.

    o, lse = flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table,
                                          causal=True)

q is (batch, seqlen_q, heads_q, head_dim) bf16; k_cache and v_cache are either contiguous
(batch, seqlen_cache, heads_kv, head_dim) or, with block_table (batch, max_pages) int32, paged
(num_pages, page_size, heads_kv, head_dim): key t of sequence b is row t % page_size of page
block_table[b, t // page_size]. cache_seqlens (batch,) int32 gives each sequence's number of
valid keys; it lives on the GPU and the host never reads it (no synchronisation), so the
kernel clamps it to 0 .. the cache's capacity (seqlen_cache, or max_pages * page_size) and
reads no page past it. Causal masking is bottom-right aligned: query row i sees keys j <
cache_seqlen - seqlen_q + 1 + i. GQA: query head h reads key/value head h // (heads_q //
heads_kv). Head dims 64, 128 and 256; page_size a multiple of the key block BN = 64 (64, 128,
256, ...) or 16 or 32 (several pages a key block, one TMA box and one lookup each). Rows that
see no key (an empty cache, causal rows before the first key) get o = 0 and lse = -inf, as the
forward kernel does (recipes/flash_attention.py). o is bf16 (batch, seqlen_q, heads_q,
head_dim) and lse float32 (batch, heads_q, seqlen_q), natural log.
Positions past cache_seqlens may hold anything (NaN too): they never reach the result.

Design (recipes/_flash_attention_kvcache.py has the kernels): one warpgroup per CTA, which packs
the heads_q / heads_kv query heads of one KV head (rounded up to a power of two) and up to 64 /
that many query positions into the 64 rows of one wgmma, so each KV tile is read from memory
once for its whole group (decode is bound by that read: 2 * seqlen * heads_kv * head_dim * 2
bytes per sequence); a group times seqlen_q past 64 rows takes more query tiles, each reading
the cache again. The CTA's thread 0 feeds a ring of STAGES key/value tiles by TMA, one page
lookup per tile (per page, for pages smaller than a tile); the query tile stays in registers
(an RS wgmma; in shared memory at head dim 256). Small CTAs (no producer warpgroup, 96 KB of
shared memory at head dims 64 and 128) let two share an SM. Split-KV: `num_splits` CTAs per
(batch, KV head, query tile) take consecutive key ranges and write f32 partial (o, lse); a
combine kernel merges them. With one split the decode kernel writes o and lse itself (one
launch).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import layoutkit as lk
from layoutkit.ptx import MAX_GRID
from layoutkit.tools.dependencies import require_torch
from recipes import _flash_attention_kvcache as kernel_module
from recipes import flash_attention as padded
from recipes._device import sm_count

decode_kernel, combine_kernel = kernel_module.decode_kernel, kernel_module.combine_kernel
packing, LOG2E = kernel_module.packing, padded.LOG2E
WHAT = "flash_attention_with_kvcache"
HEAD_DIMS = (64, 128, 256)
MAX_SEQLEN_Q = 16
MAX_GROUP = 64                 # query heads per KV head: one 64-row tile holds them
MAX_SPLITS = 128
MAX_GRID_Z = MAX_GRID[2]       # batch * heads_kv is the grid's z extent
MIN_BLOCKS_PER_SPLIT = 4       # fewer key blocks per split than this: the split's fixed cost
MIN_PAGE = 16                  # pages below a key block: a TMA box (and a page lookup) each
SHARED_LIMIT = padded.SHARED_LIMIT


@dataclass(frozen=True)
class Config:
    """The decode kernel's constexprs: BN keys per block (page sizes are multiples of it),
    STAGES blocks of K and V in flight, Q_SHARED; ctas_per_sm is what the split heuristic
    counts on (shared memory: 2 * STAGES * BN * head_dim * 2 bytes per CTA, plus the Q tile;
    registers: two 128-thread CTAs fit at any count ptxas may take, 255, a third would need
    168 or fewer, which the kernel does not promise)."""

    BN: int = 64
    STAGES: int = 3
    Q_SHARED: bool = False     # Q in shared memory (SS wgmma) instead of registers

    def smem_bytes(self, head_dim: int) -> int:
        q = 2 * kernel_module.WG_ROWS * head_dim if self.Q_SHARED else 0
        return 4 * self.STAGES * self.BN * head_dim + q

    def ctas_per_sm(self, head_dim: int) -> int:
        return max(1, min(SM_SHARED // (self.smem_bytes(head_dim) + 1024), MAX_CTAS_PER_SM))


SM_SHARED = 233472             # an H100/H200 SM's shared memory, bytes (228 KB)
MAX_CTAS_PER_SM = 2            # by registers (Config's docstring)
# Two CTAs an SM at head dims 64 and 128 (96 KB of K and V rings each: 64 KB in flight while a
# block is computed); head dim 256 keeps Q in shared memory (O alone takes 128 registers a
# thread there), one CTA an SM.
CONFIGS = {64: Config(BN=64, STAGES=6), 128: Config(BN=64, STAGES=3),
           256: Config(BN=64, STAGES=3, Q_SHARED=True)}


def choose_splits(tiles: int, capacity_blocks: int, sms: int, ctas_per_sm: int) -> int:
    """num_splits for `tiles` CTAs of work (batch * heads_kv * query tiles) over caches of up
    to capacity_blocks key blocks: the most splits that keep every CTA in one wave of sms *
    ctas_per_sm (decode is bound by memory: more CTAs keep more bytes in flight, and a second,
    partial wave would leave SMs idle at the end), at most MAX_SPLITS and at most one per
    MIN_BLOCKS_PER_SPLIT key blocks (a split's fixed cost: its Q load, its first TMA round
    trip, its partial store and combine). The host never sees cache_seqlens: the capacity
    stands for the length.

    >>> [choose_splits(t, 1024, 132, 2) for t in (1, 8, 64, 200, 1024)]
    [128, 33, 4, 1, 1]
    >>> choose_splits(8, 16, 132, 2)            # a 1k cache in 64-key blocks
    4
    """
    most = max(1, min(MAX_SPLITS, capacity_blocks // MIN_BLOCKS_PER_SPLIT))
    return max(1, min(sms * ctas_per_sm // tiles, most))


_sm_count = sm_count


def kernel_arguments(q, k_cache, v_cache, block_table, cache_seqlens, o, o_part, lse, splits: int,
                     causal: bool, scale: float, cfg: Config) -> tuple:
    """(grid, positional arguments, constexprs) of the decode kernel: q, o (batch, seqlen_q,
    heads_q, head_dim); the caches; block_table (batch, max_pages) int32 or None (contiguous:
    a (1, 1) stand-in is passed); cache_seqlens (batch,); o_part (splits, batch, seqlen_q,
    heads_q, head_dim) f32 when splits > 1 (else a stand-in); lse (splits, batch, heads_q,
    seqlen_q). CUDA tensors, numpy arrays (the interpreter) or lk.TensorSpecs."""
    batch, sq, hq, d = q.shape
    hk = k_cache.shape[2]
    group = hq // hk
    _, s_tile = packing(group)
    paged = block_table is not None
    table = block_table if paged else _stand_in(cache_seqlens, (1, 1), "int32")
    rows = min(k_cache.shape[1], cfg.BN) if paged else cfg.BN       # rows of one TMA box
    args = (q, k_cache, v_cache, table, cache_seqlens, o, o_part, lse, splits,
            k_cache.shape[1] // rows if paged else 1, float(scale) * LOG2E)
    constexprs = dict(GROUP=group, D=d, BN=cfg.BN, STAGES=cfg.STAGES, Q_SHARED=cfg.Q_SHARED,
                      PAGED=paged, PAGE_ROWS=rows, CAUSAL=bool(causal), PARTIAL=splits > 1)
    return (splits, -(-sq // s_tile), batch * hk), args, constexprs


def _stand_in(like, shape, dtype: str):
    """An unused tensor argument of `shape` and dtype ('int32', 'float32') on like's device
    (or a numpy array / TensorSpec when `like` is one)."""
    if isinstance(like, lk.TensorSpec):
        return lk.TensorSpec(lk.i32 if dtype == "int32" else lk.f32, shape)
    if type(like).__module__.startswith("numpy"):
        import numpy as np
        return np.zeros(shape, dtype)
    return _torch_stand_in(like.device, shape, dtype)


@functools.lru_cache(maxsize=None)
def _torch_stand_in(device, shape, dtype: str):
    """One zero tensor per (device, shape, dtype), made once: the kernel never reads it."""
    import torch
    return torch.zeros(shape, dtype=getattr(torch, dtype), device=device)


def compile_default() -> dict[str, str]:
    """PTX of the decode kernel's default config per head dim (256-key pages, causal and not,
    one and several splits; GQA 32/8 heads, 4 query rows; at head dim 128 also 16-key pages)
    and of the combine kernel."""
    out = {}
    for d, cfg in CONFIGS.items():
        q = lk.TensorSpec(lk.bf16, (8, 4, 32, d))
        table, seqlens = lk.TensorSpec(lk.i32, (8, 64)), lk.TensorSpec(lk.i32, (8,))
        for causal, splits, page in ((False, 1, 256), (True, 4, 256)) + \
                (((False, 1, 16),) if d == 128 else ()):
            cache = lk.TensorSpec(lk.bf16, (512, page, 8, d))
            o_part = lk.TensorSpec(lk.f32, (splits, 8, 4, 32, d))
            lse = lk.TensorSpec(lk.f32, (splits, 8, 32, 4))
            grid, args, constexprs = kernel_arguments(q, cache, cache, table, seqlens, q, o_part,
                                                      lse, splits, causal, d ** -0.5, cfg)
            name = f"kvcache_d{d}_bn{cfg.BN}_s{cfg.STAGES}{'_causal' if causal else ''}" \
                   f"{'_split' if splits > 1 else ''}{f'_page{page}' if page < cfg.BN else ''}"
            out[name] = decode_kernel.ptx(*args, **constexprs)
        out[f"kvcache_combine_d{d}"] = combine_kernel.ptx(
            lk.TensorSpec(lk.f32, (4, 8, 4, 32, d)), lk.TensorSpec(lk.f32, (4, 8, 32, 4)), q,
            lk.TensorSpec(lk.f32, (8, 32, 4)), D=d)
    return out


# ---- the entry point ---------------------------------------------------------------------
def _int(name: str, x, lo: int, hi: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
        raise ValueError(f"{WHAT}: {name} is a Python int in {lo}..{hi}, got {x!r}")
    return x


def check_inputs(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
                 num_splits, config) -> Config:
    """Validate the arguments (torch tensors, or anything with their shape, dtype, device and
    dim()); returns the config. Every mistake is a ValueError naming the argument, the value
    and the rule; cache_seqlens' contents are not read (that would synchronise)."""
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not hasattr(x, "dim") or x.dim() != 4:
            raise ValueError(f"{WHAT}: {name} is a 4-D tensor, got {type(x).__name__} of shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
        if str(x.dtype) != "torch.bfloat16":
            raise ValueError(f"{WHAT}: {name} is a bf16 tensor, got {x.dtype}")
    (batch, sq, hq, d), cache = tuple(q.shape), tuple(k_cache.shape)
    if tuple(v_cache.shape) != cache or cache[3] != d:
        raise ValueError(f"{WHAT}: k_cache and v_cache have one shape (batch or num_pages, "
                         f"seqlen_cache or page_size, heads_kv, head_dim) with q's head_dim "
                         f"{d}, got k_cache {cache} and v_cache {tuple(v_cache.shape)}")
    if not 1 <= sq <= MAX_SEQLEN_Q:
        raise ValueError(f"{WHAT}: seqlen_q = {sq} (q's mode 1) is not in 1..{MAX_SEQLEN_Q} "
                         "(decode and speculative decode; use flash_attention for prefill)")
    if d not in HEAD_DIMS:
        raise ValueError(f"{WHAT}: head_dim = {d} is not supported; the kernel handles "
                         f"{', '.join(map(str, HEAD_DIMS))}")
    hk = cache[2]
    if hk == 0 or hq % hk:
        raise ValueError(f"{WHAT}: heads_q = {hq} must be a multiple of heads_kv = {hk} "
                         "(grouped-query attention)")
    if hq // hk > MAX_GROUP:
        raise ValueError(f"{WHAT}: heads_q / heads_kv = {hq // hk} query heads per KV head is "
                         f"over {MAX_GROUP} (one 64-row tile holds a group)")
    if batch * hk > MAX_GRID_Z:
        raise ValueError(f"{WHAT}: batch * heads_kv = {batch * hk} is over {MAX_GRID_Z} (the "
                         "grid's z extent)")
    if not hasattr(cache_seqlens, "dim") or cache_seqlens.dim() != 1 or \
            str(cache_seqlens.dtype) != "torch.int32" or cache_seqlens.shape[0] != batch:
        raise ValueError(f"{WHAT}: cache_seqlens is a 1-D int32 tensor of batch = {batch} "
                         f"lengths, got {type(cache_seqlens).__name__} "
                         f"{getattr(cache_seqlens, 'dtype', '')} of shape "
                         f"{tuple(getattr(cache_seqlens, 'shape', ()))}")
    cfg = config or CONFIGS[d]
    if not isinstance(cfg, Config):
        raise ValueError(f"{WHAT}: config is a Config, got {config!r}")
    if block_table is None:
        if cache[0] != batch:
            raise ValueError(f"{WHAT}: a contiguous cache is (batch = {batch}, seqlen_cache, "
                             f"heads_kv, head_dim), got k_cache {cache} (pass block_table for "
                             "a paged cache)")
    else:
        if not hasattr(block_table, "dim") or block_table.dim() != 2 or \
                str(block_table.dtype) != "torch.int32" or block_table.shape[0] != batch:
            raise ValueError(f"{WHAT}: block_table is a 2-D int32 tensor (batch = {batch}, "
                             f"max_pages), got {type(block_table).__name__} "
                             f"{getattr(block_table, 'dtype', '')} of shape "
                             f"{tuple(getattr(block_table, 'shape', ()))}")
        if not page_size_ok(cache[1], cfg.BN):
            raise ValueError(f"{WHAT}: page_size = {cache[1]} (k_cache's mode 1) must be a "
                             f"multiple of the key block {cfg.BN}, or a multiple of "
                             f"{MIN_PAGE} dividing it")
    if not isinstance(causal, bool):
        raise ValueError(f"{WHAT}: causal is True or False, got {causal!r}")
    if softmax_scale is not None and (isinstance(softmax_scale, bool) or
                                      not isinstance(softmax_scale, (int, float)) or
                                      not math.isfinite(softmax_scale) or softmax_scale < 0):
        raise ValueError(f"{WHAT}: softmax_scale is a finite float >= 0 or None "
                         f"(1/sqrt(head_dim)), got {softmax_scale!r}")
    if num_splits is not None:
        _int("num_splits", num_splits, 1, MAX_SPLITS)
    if cfg.smem_bytes(d) > SHARED_LIMIT:
        raise ValueError(f"{WHAT}: config {cfg} needs {cfg.smem_bytes(d)} bytes of shared "
                         f"memory at head_dim {d}, over the {SHARED_LIMIT} available")
    tensors = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
               ("cache_seqlens", cache_seqlens)] + \
        ([("block_table", block_table)] if block_table is not None else [])
    for name, x in tensors:
        if not x.is_cuda or x.device != q.device:
            raise ValueError(f"{WHAT}: {name} is a CUDA tensor on q's device ({q.device}), got "
                             f"one on {x.device}")
    return cfg


def page_size_ok(page_size: int, bn: int) -> bool:
    """Whether the kernel reads pages of page_size keys in key blocks of bn: a multiple of bn
    (bn-row TMA boxes of one page), or a multiple of MIN_PAGE that divides bn (one box per page,
    bn / page_size pages a block: 16 and 32 at bn = 64).

    >>> [p for p in (8, 16, 24, 32, 48, 64, 96, 128, 256) if page_size_ok(p, 64)]
    [16, 32, 64, 128, 256]
    """
    return page_size % bn == 0 or (page_size % MIN_PAGE == 0 and bn % page_size == 0)


def capacity(k_cache, block_table) -> int:
    """The most keys a sequence can have: seqlen_cache, or max_pages * page_size."""
    return k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])


def flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=None, *,
                                 causal: bool = False, softmax_scale: float | None = None,
                                 num_splits: int | None = None, config: Config | None = None):
    """Attention of q against the cache (see the module docstring): returns (o, lse). num_splits
    (1..128) fixes the key split; None picks it with choose_splits from batch * heads_kv, the
    SM count and the cache's capacity."""
    torch = require_torch(f"recipes.flash_attention_kvcache.{WHAT}")
    cfg = check_inputs(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
                       num_splits, config)
    batch, sq, hq, d = q.shape
    hk = k_cache.shape[2]
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    o = torch.empty(batch, sq, hq, d, device=q.device, dtype=torch.bfloat16)
    lse = torch.empty(batch, hq, sq, device=q.device, dtype=torch.float32)
    if o.numel() == 0:
        return o, lse
    keys = capacity(k_cache, block_table)
    if keys == 0 or k_cache.shape[0] == 0:     # no key anywhere (a tensor map has no empty extent)
        o.zero_()
        lse.fill_(float("-inf"))
        return o, lse
    if num_splits is None:
        tiles = batch * hk * -(-sq // packing(hq // hk)[1])
        num_splits = choose_splits(tiles, -(-keys // cfg.BN), _sm_count(q.device),
                                   cfg.ctas_per_sm(d))
    qs, ks, vs = (padded._tma_ready(x) for x in (q, k_cache, v_cache))
    if num_splits > 1:
        o_part = torch.empty(num_splits, batch, sq, hq, d, device=q.device,
                             dtype=torch.float32)
        lse_part = torch.empty(num_splits, batch, hq, sq, device=q.device, dtype=torch.float32)
    else:
        o_part, lse_part = _stand_in(q, (1, 1, 1, 1, 1), "float32"), lse[None]
    grid, args, constexprs = kernel_arguments(qs, ks, vs, block_table, cache_seqlens, o, o_part,
                                              lse_part, num_splits, causal, scale, cfg)
    decode_kernel[grid](*args, **constexprs)
    if num_splits > 1:
        combine_kernel[(-(-hq // kernel_module.COMBINE_HEADS), sq, batch)](o_part, lse_part, o,
                                                                          lse, D=d)
    return o, lse


# ---- references and checks ---------------------------------------------------------------
def gather_cache(k_cache, block_table, batch: int):
    """The cache as (batch, capacity, heads_kv, head_dim): the pages of each sequence in its
    block table's order (numpy or torch; a contiguous cache as it is)."""
    if block_table is None:
        return k_cache
    pages = k_cache[block_table.reshape(-1)]          # (batch * max_pages, page_size, ...)
    return pages.reshape(batch, -1, *k_cache.shape[2:])


def reference(q, k_cache, v_cache, cache_seqlens, block_table, causal: bool, scale: float):
    """float64 numpy attention of each sequence's first cache_seqlens[b] keys: (o, lse (batch,
    heads_q, seqlen_q)); rows that see no key give o = 0, lse = -inf."""
    import numpy as np
    batch, sq, hq, d = q.shape
    k, v = (gather_cache(np.asarray(x, np.float64), block_table, batch) for x in
            (k_cache, v_cache))
    o = np.zeros((batch, sq, hq, d))
    lse = np.full((batch, hq, sq), -np.inf)
    for b in range(batch):
        n = int(min(max(int(cache_seqlens[b]), 0), k.shape[1]))
        if n == 0:
            continue
        ob, lb = padded.reference(np.asarray(q[b:b + 1], np.float64), k[b:b + 1, :n],
                                  v[b:b + 1, :n], causal, scale)
        o[b], lse[b] = ob[0], lb[0]
    return o, lse


def random_cache(rng, batch, capacity_keys, hk, d, page_size=None):
    """bf16 bits of random k_cache, v_cache and, with page_size, a block table that is a random
    permutation of batch * capacity_keys / page_size pages (numpy)."""
    import numpy as np

    from layoutkit.dsl.interpreter import to_bf16
    if page_size is None:
        shape, table = (batch, capacity_keys, hk, d), None
    else:
        pages = batch * capacity_keys // page_size
        shape = (pages, page_size, hk, d)
        table = rng.permutation(pages).astype(np.int32).reshape(batch, -1)
    return to_bf16(rng.standard_normal(shape)), to_bf16(rng.standard_normal(shape)), table


# (batch, seqlen_q, heads_q, heads_kv, head_dim, cache capacity, page size or None, cache
# lengths, causal, splits): paged and contiguous, GQA, ragged lengths incl. 0 and 1, causal
# with seqlen_q > 1 (and > the cache length), one split and several (some with no key), a
# ring of more blocks than stages, a group of 3 heads (rows padded to 4), two query tiles
CPU_CASES = ((2, 1, 4, 2, 64, 192, 64, (130, 0), False, 1),
             (2, 3, 2, 1, 64, 128, None, (70, 2), True, 2),
             (1, 2, 4, 1, 64, 256, 64, (1,), True, 3),
             (1, 1, 3, 1, 64, 512, 128, (450,), False, 1),
             (1, 9, 8, 1, 64, 64, None, (40,), True, 1))


def check_cpu(seed: int = 0, cases=CPU_CASES) -> float:
    """Run the decode and combine kernels on the CPU interpreter (with race checking) against
    numpy in float64; returns the worst error relative to the largest |o| (or |lse|)
    (AssertionError past 2**-7). Unused cache slots hold NaN (they must not leak)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, interpret, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch, sq, hq, hk, d, keys, page, lengths, causal, splits in cases:
        cfg = CONFIGS[d]
        q = to_bf16(rng.standard_normal((batch, sq, hq, d)))
        k, v, table = random_cache(rng, batch, keys, hk, d, page)
        seqlens = np.array(lengths, np.int32)
        _poison_unused(k, v, table, seqlens)
        scale = d ** -0.5
        o_want, lse_want = reference(from_bf16(q), from_bf16(k), from_bf16(v), seqlens, table,
                                     causal, scale)
        o = np.zeros((batch, sq, hq, d), np.uint16)
        lse_part = np.zeros((splits, batch, hq, sq), np.float32)
        o_part = np.zeros((splits, batch, sq, hq, d) if splits > 1 else (1,) * 5, np.float32)
        grid, args, constexprs = kernel_arguments(q, k, v, table, seqlens, o, o_part, lse_part,
                                                  splits, causal, scale, cfg)
        if splits == 1:
            worst = max(worst, check_on_cpu(
                decode_kernel, grid, *args, **constexprs, error=padded._finite_error,
                expect={"o": o_want, "lse": lse_want[None]}, tolerance=2 ** -7))
            continue
        interpret(decode_kernel, grid, *args, **constexprs)
        lse = np.zeros((batch, hq, sq), np.float32)
        worst = max(worst, check_on_cpu(
            combine_kernel, (-(-hq // kernel_module.COMBINE_HEADS), sq, batch), o_part, lse_part,
            o, lse, D=d, error=padded._finite_error, expect={"o": o_want, "lse": lse_want},
            tolerance=2 ** -7))
    return worst


def _poison_unused(k, v, table, seqlens) -> None:
    """NaN (bf16 0x7fc0) in every cache slot past its sequence's length, in place."""
    batch = len(seqlens)
    for b in range(batch):
        n = int(seqlens[b])
        if table is None:
            k[b, n:], v[b, n:] = 0x7FC0, 0x7FC0
            continue
        page = k.shape[1]
        for slot, p in enumerate(table[b]):
            start = max(n - slot * page, 0)
            k[p, start:], v[p, start:] = 0x7FC0, 0x7FC0


def reference_torch(q, k_cache, v_cache, cache_seqlens, block_table, causal: bool, scale: float):
    """float64 torch attention: the pages gathered in block-table order, then each sequence's
    first cache_seqlens[b] keys (recipes.flash_attention.reference_torch): (o, lse (batch,
    heads_q, seqlen_q)); rows that see no key give o = 0, lse = -inf."""
    import torch
    batch, sq, hq, d = q.shape
    k, v = (gather_cache(x, block_table, batch) for x in (k_cache, v_cache))
    o = torch.zeros(batch, sq, hq, d, dtype=torch.float64, device=q.device)
    lse = torch.full((batch, hq, sq), float("-inf"), dtype=torch.float64, device=q.device)
    for b, n in enumerate(cache_seqlens.tolist()):
        n = min(max(n, 0), k.shape[1])
        if n:
            o[b:b + 1], lse[b:b + 1] = padded.reference_torch(q[b:b + 1], k[b:b + 1, :n],
                                                              v[b:b + 1, :n], causal, scale)
    return o, lse


def random_case(gen, batch: int, sq: int, hq: int, hk: int, d: int, keys: int, page_size,
                lengths, device="cuda"):
    """CUDA tensors of one problem: q, k_cache, v_cache (paged when page_size, its block table a
    random permutation of batch * keys / page_size pages), cache_seqlens = lengths and the
    block table (or None); every cache slot past its sequence's length holds NaN."""
    import torch
    q = torch.randn(batch, sq, hq, d, generator=gen).to(device, torch.bfloat16)
    if page_size is None:
        shape, table = (batch, keys, hk, d), None
    else:
        pages = batch * -(-keys // page_size)
        shape = (pages, page_size, hk, d)
        table = torch.randperm(pages, generator=gen).to(device, torch.int32).view(batch, -1)
    k, v = (torch.randn(shape, generator=gen).to(device, torch.bfloat16) for _ in range(2))
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
    for x in (k, v):               # NaN past each sequence's length, where the kernel must not look
        full = gather_cache(x, table, batch)
        mask = torch.arange(full.shape[1], device=device)[None, :] >= seqlens[:, None]
        full[mask] = float("nan")
        if table is not None:
            x[table.reshape(-1).long()] = full.reshape(-1, *x.shape[1:])
    return q, k, v, seqlens, table


def check_case(gen, batch, sq, hq, hk, d, keys, page_size, lengths, causal, splits=None,
               config=None, what: str = "") -> float:
    """One random problem on the GPU against reference_torch (recipes.flash_attention.compare:
    o within 2**-7 of max |o|, lse within 2e-3 + 1e-5 |lse|, the same infinities); returns o's
    error."""
    q, k, v, seqlens, table = random_case(gen, batch, sq, hq, hk, d, keys, page_size, lengths)
    scale = d ** -0.5
    o, lse = flash_attention_with_kvcache(q, k, v, seqlens, table, causal=causal,
                                          num_splits=splits, config=config)
    o_ref, lse_ref = reference_torch(q, k, v, seqlens, table, causal, scale)
    what = what or f"{(batch, sq, hq, hk, d, keys, page_size, lengths, causal, splits)}"
    return padded.compare(o, lse, o_ref, lse_ref, what)


def random_lengths(gen, batch: int, keys: int) -> list[int]:
    """`batch` cache lengths in 0..keys (torch generator `gen`), with keys, 0 and 1 among them
    where batch allows."""
    import torch
    n = torch.randint(0, keys + 1, (batch,), generator=gen).tolist()
    for i, special in enumerate((keys, 0, 1)[:batch]):
        n[i] = special
    return n


def check(seed: int = 0) -> float:
    """Random problems on the GPU (paged with random block tables and contiguous caches, ragged
    lengths with 0 and 1, GQA, causal with seqlen_q > 1, one split and several, each head dim)
    against torch in float64; returns the worst error of o relative to max |o_ref|."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    cases = [(4, 1, 32, 8, 128, 2048, 128, False, None), (3, 4, 32, 8, 128, 1000, None, True, None),
             (5, 2, 8, 8, 64, 4096, 64, True, 7), (2, 16, 4, 1, 128, 512, 256, True, 1),
             (6, 1, 16, 2, 64, 3000, None, False, 3), (1, 3, 12, 4, 128, 20000, 64, True, None)]
    worst = 0.0
    for batch, sq, hq, hk, d, keys, page, causal, splits in cases:
        lengths = random_lengths(gen, batch, keys)
        worst = max(worst, check_case(gen, batch, sq, hq, hk, d, keys, page, lengths, causal,
                                      splits))
    return worst


def benchmark(reps: int = 20) -> list[dict]:
    """GB/s of KV read of flash_attention_with_kvcache against torch (the pages gathered, then
    SDPA) on decode shapes (benchmarks/bench_attention_kvcache.py has the full table, FA4 and
    SDPA on a contiguous cache)."""
    import torch

    from layoutkit.tools.benchmarking import gbps, interleaved
    rows = []
    gen = torch.Generator().manual_seed(0)
    for batch, keys in ((1, 16384), (32, 4096), (128, 1024)):
        q, k, v, seqlens, table = random_case(gen, batch, 1, 32, 8, 128, keys, 128,
                                              [keys] * batch)
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def gathered():
            kk, vv = (gather_cache(x, table, batch).transpose(1, 2) for x in (k, v))
            return sdpa(q.transpose(1, 2), kk, vv, enable_gqa=True)
        times = interleaved({"layoutkit": lambda: flash_attention_with_kvcache(
            q, k, v, seqlens, table), "gather+sdpa": gathered}, reps=reps)
        nbytes = kv_bytes(batch, keys, 8, 128)
        ours, theirs = (gbps(nbytes, times[x].median_ms) for x in ("layoutkit", "gather+sdpa"))
        rows.append({"case": f"batch {batch} cache {keys}", "layoutkit_gbps": ours,
                     "gather_sdpa_gbps": theirs, "speedup": ours / theirs})
        print(f"batch {batch} cache {keys}: layoutkit {ours:.0f}, gather + SDPA {theirs:.0f} "
              f"GB/s of KV ({ours / theirs:.2f}x)")
    return rows


def kv_bytes(batch: int, keys: int, hk: int, d: int) -> int:
    """Bytes of K and V the problem must read (bf16): 2 * batch * keys * heads_kv * head_dim * 2."""
    return 4 * batch * keys * hk * d
