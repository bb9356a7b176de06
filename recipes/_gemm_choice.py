"""The GEMM's config per shape (recipes/gemm_hopper.py's and recipes/gemm_fp8.py's config_for):
a documented heuristic, a cost model of the persistent kernel, with the measured default kept
wherever it fills the GPU. The operand type sets a k-step's BK (one 128-byte row: 64 bf16, 128
fp8), the tensor cores' rate (fp8 twice bf16's) and the bytes read from HBM.

    M > 256 and the default's tiles (128 x 256, 2-CTA clusters) >= resident clusters:
        the default (measured 0.93-0.98x cuBLAS on every such shape, docs/PERFORMANCE.md)
    otherwise (small M, or too few tiles for one wave): the candidate of least modelled time
        tiles BM x BN in {64, 128} x {64, 128, 256}, cluster 1 (and the default), SPLIT_K in
        1, 2, 3, 4, 6, 8, 12, 16 with at least MIN_SPLIT_STEPS k-steps per K range; the ring as
        deep as shared memory allows (at most MAX_STAGES); and where the recipe has it (bf16, fp8)
        and M <= MAX_SWAP_M, the swapped kernel's tiles (swap_candidates: 64 or 128 weight
        rows by M tokens rounded up to 8, one launch, no split)

The model, per candidate (all times in seconds, H200 constants below):
    grid      = min(#units, tiles * split)
    steps     = ceil(tiles * split / grid) * ceil(K_TILES / split)     (k-steps of one CTA)
    feed      = steps * (BM + BN / CLUSTER) * 128 B / SM_BYTES_PER_S    (operands into one SM)
    compute   = steps * 2 * BM * BN * BK / (SM_FLOPS * 2 / bytes * EFFICIENCY[BM, BN])
    hbm       = (M * K + N * K) * bytes / HBM_BYTES_PER_S   (every operand read once; bytes per
                                                             element: 2 bf16, 1 fp8)
    time      = max(feed, compute, hbm) + TILE_OVERHEAD_S * tiles per CTA
                + split > 1: the partials' write and re-read, (2 * split + 1) * M * N * 4 B
                  / HBM_BYTES_PER_S, and REDUCE_LAUNCH_S
              + START_S (the launch's ring fill and first wave, measured)
    swapped   max(ceil(tiles / grid) * K_TILES * SWAP_STEP_S[BM], hbm) + SWAP_START_S, tiles =
              ceil(N / BM) * ceil(M / BN) (_swapped_seconds; measured per k-step constants)
For M <= 64 the B stream dominates (hbm): the model then picks tiles and a split that put
enough CTAs to work for it; ties go to the earlier candidate (fewer splits; 64-row tiles
first when M <= 64: one consumer warpgroup, no MMA on rows past 64 that do not exist).
"""
from __future__ import annotations

from dataclasses import replace

import layoutkit as lk
from recipes._gemm_kernel import ROW_BYTES, TILE_M, Config, row_elements
from recipes._gemm_swap_kernel import TOKEN_STEP, padded_steps
from recipes._gemm_host import round_up

DEFAULT = Config(BN=256, STAGES=4)
SMEM_BYTES = 232448 - 1024          # the opt-in shared memory of an sm_90 CTA, barriers aside
MAX_STAGES = 8
# The swapped kernel's rings (9-18 KB a stage): 16 stages of 64 weight rows keep 128 KB of
# weights in flight, 2.4 us of one CTA's measured stream (~53 GB/s), well over a load's
# latency; the deepest rings shared memory holds (22-25 stages at BN 8-16) measured no faster
# on the H200 (2026-12-03, docs/PERFORMANCE.md)
MAX_SWAP_STAGES = 16
MAX_SWAP_M = 64                     # the swapped kernel serves M up to here (its token tile)
MIN_SPLIT_STEPS = 4                 # k-steps per K range at least (the ring's fill amortised)
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
# H200 constants of the model (the benchmark's ablation rows are what it is judged by)
SM_FLOPS = 989e12 / 132             # dense bf16 per SM (fp8: twice)
# the fraction of SM_FLOPS a BM x BN tile's MMAs reach: one consumer warpgroup (BM 64) or
# two, and a narrower wgmma N, issue less work per synchronisation
EFFICIENCY = {(128, 256): 0.85, (128, 128): 0.80, (128, 64): 0.65,
              (64, 256): 0.70, (64, 128): 0.65, (64, 64): 0.50}
# operand bytes one SM takes in: the measured default (128 x 256, cluster 2: 32 KB per CTA
# and k-step) runs at ~720 TFLOP/s at 4096^3, ~0.65 us per k-step, so at least ~50 GB/s
SM_BYTES_PER_S = 50e9
HBM_BYTES_PER_S = 3.3e12
TILE_OVERHEAD_S = 0.6e-6            # ring fill and epilogue not hidden, per tile of a CTA
REDUCE_LAUNCH_S = 2.0e-6            # the reduction kernel's launch and tail
# The start of a launch of the persistent kernel (ring fill, first wave), beyond the terms
# above: what the H200 measured above the model on ~20-45 us decode shapes (6.8-8.5 us;
# docs/PERFORMANCE.md). The same for every candidate of that kernel, so it only weighs
# against the swapped kernel's:
START_S = 6e-6
# the swapped kernel on the H200 (bench_gemm_small_m.py, 2026-12-03, 18:18 UTC, with the
# token-tile count a constexpr): one CTA's k-step of BM weight rows (0.155 us at 64 rows: ~53
# GB/s of weights a CTA, whatever the token tile; the bare kernels of 64 CTAs at 64 and 224
# k-steps, 17.1-18.1 and 42.4 us, fitted by a line), and its start (the line's 7.7 us at 64
# rows, 5.4 at 128)
SWAP_STEP_S = {64: 0.155e-6, 128: 0.22e-6}
SWAP_START_S = 6.5e-6


def max_stages(bm: int, bn: int) -> int:
    """The deepest ring (at most MAX_STAGES) of a BM x BN tile that fits shared memory beside
    an f32 C chunk (the largest: f32 partials or f32 out)."""
    return max(s for s in range(2, MAX_STAGES + 1)
               if Config(BM=bm, BN=bn, STAGES=s).smem_bytes(lk.f32) <= SMEM_BYTES)


def max_swap_stages(bm: int, bn: int, parts: int = 1) -> int:
    """The deepest ring (at most MAX_SWAP_STAGES) of the swapped kernel's BM weight rows by BN
    tokens (`parts` consumer warpgroups per 64 rows: a multiple of parts) that fits shared
    memory (it has no C buffer; a split tile's partials aside)."""
    return max(s for s in range(2, MAX_SWAP_STAGES + 1) if s % parts == 0 and
               Config(BM=bm, BN=bn, STAGES=s, CLUSTER=1, SWAP=True,
                      SPLIT_K=parts).smem_bytes() <= SMEM_BYTES)


def swap_candidates(m: int, default: Config = DEFAULT) -> list[Config]:
    """The swapped kernel's tiles for M <= MAX_SWAP_M token rows (none past it): 64 and 128
    weight rows by the M tokens rounded up to TOKEN_STEP, the ring as deep as shared memory
    allows (of default's type, its other fields kept)."""
    if m > MAX_SWAP_M:
        return []
    bn = round_up(m, TOKEN_STEP)
    return [replace(default, BM=bm, BN=bn, CLUSTER=1, STAGES=max_swap_stages(bm, bn),
                    GROUP_M=DEFAULT.GROUP_M, SPLIT_K=1, SWAP=True) for bm in TILE_M]


def candidates(m: int, default: Config = DEFAULT) -> list[Config]:
    """The tile shapes the model chooses among for M rows, `default` first, then the
    cluster-1 tiles (of default's type, its other fields kept), smaller rows first where M
    fits in 64 (ties go to them)."""
    out = [default]
    for bm in sorted(TILE_M, reverse=m > min(TILE_M)):
        for bn in (256, 128, 64):
            out.append(replace(default, BM=bm, BN=bn, CLUSTER=1, STAGES=max_stages(bm, bn),
                               GROUP_M=DEFAULT.GROUP_M, SPLIT_K=1))
    return out


def modelled_seconds(m: int, n: int, k: int, cfg: Config, units: int,
                     dtype=lk.bf16) -> float:
    """The model's time (module docstring) of an M x N x K problem of `dtype` operands under
    `cfg` with `units` scheduling units (CTAs or clusters) resident."""
    bk = row_elements(dtype)
    if cfg.SWAP:
        return _swapped_seconds(m, n, k, cfg, units, dtype)
    tiles = round_up(-(-m // cfg.BM), cfg.CLUSTER) * -(-n // cfg.BN)      # CTAs' tiles
    k_tiles = -(-k // bk)
    per_split = -(-k_tiles // cfg.SPLIT_K)
    split = -(-k_tiles // per_split)
    grid = min(units * cfg.CLUSTER, tiles * split)
    waves = -(-tiles * split // grid)
    steps = waves * per_split
    feed = steps * (cfg.BM + cfg.BN / cfg.CLUSTER) * ROW_BYTES / SM_BYTES_PER_S
    compute = steps * 2 * cfg.BM * cfg.BN * bk / (SM_FLOPS * 2 / dtype.nbytes *
                                                  EFFICIENCY[cfg.BM, cfg.BN])
    hbm = (m * k + n * k) * dtype.nbytes / HBM_BYTES_PER_S
    time = max(feed, compute, hbm) + TILE_OVERHEAD_S * waves + START_S
    if split > 1:
        time += (2 * split + 1) * m * n * 4 / HBM_BYTES_PER_S + REDUCE_LAUNCH_S
    return time


def _swapped_seconds(m: int, n: int, k: int, cfg: Config, units: int, dtype) -> float:
    """modelled_seconds of the swapped kernel: tiles of BM weight rows by BN tokens on
    min(units, tiles) CTAs, one launch; a CTA's k-step takes SWAP_STEP_S[BM] (measured: the
    consumer's pace, whatever BN), the whole problem at least its HBM time."""
    tiles = -(-n // cfg.BM) * -(-m // cfg.BN)
    waves = -(-tiles // min(units, tiles))
    chains = padded_steps(-(-k // row_elements(dtype)), cfg.SPLIT_K,   # SPLIT_K: its parts
                          getattr(cfg, "PROMOTE", 0))     # fp8's Config promotes (gemm_fp8)
    hbm = (m * k + n * k) * dtype.nbytes / HBM_BYTES_PER_S
    return max(waves * chains * SWAP_STEP_S[cfg.BM], hbm) + SWAP_START_S


def best_split(m: int, n: int, k: int, tile: Config, sms: int = 132, dtype=lk.bf16) -> Config:
    """`tile` (a cluster-1 candidate) with the SPLIT_K of least modelled time."""
    k_tiles = -(-k // row_elements(dtype))
    best, best_time = tile, None
    for split in SPLITS:
        if split > 1 and k_tiles < MIN_SPLIT_STEPS * split:
            break
        trial = replace(tile, SPLIT_K=split)
        time = modelled_seconds(m, n, k, trial, sms, dtype)
        if best_time is None or time < best_time:
            best, best_time = trial, time
    return best


def choose(m: int, n: int, k: int, sms: int = 132, dtype=lk.bf16,
           default: Config = DEFAULT, swap: bool = False) -> Config:
    """The config of an M x N x K GEMM of `dtype` operands on a GPU of `sms` SMs (module
    docstring); `default` is the recipe's measured 128 x 256 config in 2-CTA clusters (a
    Config subclass: the candidates are of its type); `swap`: the recipe has the swapped
    kernel (swap_candidates join the others)."""
    clusters = sms // default.CLUSTER
    default_tiles = -(-m // default.BM) * -(-n // default.BN)
    if m > 256 and default_tiles >= clusters:
        return default
    best, best_time = default, modelled_seconds(m, n, k, default, clusters, dtype)
    trials = [best_split(m, n, k, tile, sms, dtype) for tile in candidates(m, default)[1:]]
    for trial in trials + (swap_candidates(m, default) if swap else []):
        time = modelled_seconds(m, n, k, trial, sms, dtype)
        if time < best_time:
            best, best_time = trial, time
    return best
