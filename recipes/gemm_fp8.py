"""Scaled fp8 GEMM for Hopper: D = scale_a * scale_b * (A @ B), e4m3/e5m2 in, f32 accumulate,
bf16 or f32 out (torch._scaled_mm's computation).

A is M x K with K contiguous (row-major); B is K x N stored column-major, i.e. b.t() is an
N x K row-major tensor (torch._scaled_mm's convention, and the only operand layout fp8 wgmma
reads: both operands K-major). scale_a is one f32 (shape (), (1,) or (1, 1): per tensor) or
one per row of A (M, 1) (per token); scale_b one f32 or one per column of B (1, N) (per
channel); None is a scale of 1. The kernel is recipes/_gemm_kernel.py's pipeline, as for the bf16 GEMM, with fp8
tiles (BK = 128 elements, one 128-byte swizzled row; 4 wgmma m64nNk32 per k-step) and the
scales applied in the epilogue to the f32 accumulator:

    epilogue(chunk, at) = chunk * (at.load(scale_a) * at.load(scale_b))

where scale_a and scale_b reach the kernel as (M, N) views of strides (1, 0) / (0, 0) and
(0, 1) / (0, 0): a per-row scale is one load per row of the thread's accumulator fragment, a
per-tensor one a single load (recipes._gemm_kernel.Fragment.load). Ragged M, N, K are exact
(TMA bounds); rows not a multiple of 16 bytes, and a B stored row-major, are copied into
TMA-ready buffers on the host first (a documented cost). Per-tensor scales are loaded before
each tile's main loop (PerTensorScales), per-row ones in the epilogue.

Configs: 128 x 256 tiles in 2-CTA clusters (CONFIGS[0]) wherever they fill the GPU; small M and
few tiles take recipes/_gemm_choice.py's cost model (64-row tiles, narrower BN, split-K: unscaled
f32 partials, then a reduction that applies the scales; for M <= 64, the swapped kernel of
recipes/_gemm_swap_kernel.py, Config.SWAP: the weights on the wgmma's 64-row side, the tokens
on its N side, one launch, each of its accumulators promoted every PROMOTE k-steps).
`launches` describes a call's kernel launches; a repeated call signature launches its plan
(recipes/_gemm_plans.py, shared with the bf16 gemm).

Every argument is checked before anything reaches the GPU (`check_inputs`): each mistake a
TypeError or ValueError naming the argument, its value and the rule. Numerics: the tensor cores
add fp8 products with fewer bits than f32 (NVIDIA does not document how many; about 14
significant bits): the consumers add the wgmma accumulator into an f32 register accumulator
every PROMOTE k-steps (Config.PROMOTE, default 2 = 256 K elements) and restart it, as
cuBLASLt's default does (H200, 2026-12-01: PROMOTE 1 gives cuBLASLt's default error to three
digits, 2 about 1.7x it, 4 about 3x, 0 -- all of K in the fp8 accumulator, cuBLASLt's
use_fast_accum -- 20-50x at K >= 4096; docs/PERFORMANCE.md). The interpreter (`check_cpu`) models the 14-bit accumulator
(layoutkit.dsl.interpreter.wgmma_math).
"""
import functools
from dataclasses import dataclass

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _gemm_choice as choice
from recipes import _gemm_host as host
from recipes import _gemm_plans as plans
from recipes._device import sm_count
from recipes._gemm_kernel import CONSUMERS, PROMOTE_COLUMNS, TILE_M, WG_ROWS, gemm_tiles, \
    row_elements, warps
from recipes._gemm_swap_kernel import gemm_tiles_swapped
from recipes._gemm_splitk import REDUCE_WARPS, reduce_grid, reduce_splits
from recipes._gemm_kernel import Config as TileConfig

ATOM_K = row_elements(lk.e4m3)     # BK: fp8 elements in one 128-byte swizzled row (128)
BM = CONSUMERS * WG_ROWS           # the default tile's rows: two consumer warpgroups
PROMOTE = 2                        # k-steps (2 x 128 = 256 K elements) per promotion


@dataclass(frozen=True)
class Config(TileConfig):
    """A tile config (recipes._gemm_kernel.Config) and PROMOTE: the k-steps the fp8 wgmma
    accumulator sums before it is added into the f32 register accumulator (0: all of K in the
    wgmma accumulator, as cuBLASLt's use_fast_accum). Promotion runs a BN-column tile in parts
    of 128 columns (recipes._gemm_kernel._promoted_k_steps): BN / 2 + 64 f32 registers a
    consumer thread."""

    PROMOTE: int = PROMOTE


CONFIGS = (Config(BN=256, STAGES=4), Config(BN=256, STAGES=4, CLUSTER=1),
           Config(BN=256, STAGES=3), Config(BN=256, STAGES=4, PROMOTE=4),
           Config(BN=256, STAGES=4, GROUP_M=16), Config(BN=128, STAGES=4),
           Config(BN=128, STAGES=4, CLUSTER=1), Config(BN=128, STAGES=6))
# The fast-accumulation kernels (cuBLASLt's use_fast_accum: less accurate at deep K), given
# only as an explicit config, never chosen: the unpromoted BN 256 pipeline and BN 128's.
FAST_ACCUM_CONFIGS = (Config(BN=256, STAGES=4, PROMOTE=0),
                      Config(BN=128, STAGES=6, PROMOTE=0))
# Measured per-shape winners (none yet): config_for asks recipes/_gemm_choice.py otherwise. The
# H200 sweep of 2026-12-02 at 4096^3 and 8192^3 (docs/PERFORMANCE.md) put CONFIGS[0] first:
# 128 x 256 in parts 9-14% ahead of 128 x 128, 4 stages ahead of 3, PROMOTE 2 ahead of 1 and 4.
BEST_CONFIGS: dict = {}


def promotion(cfg) -> int:
    """The PROMOTE of `cfg` (a plain recipes._gemm_kernel.Config: the default PROMOTE)."""
    return getattr(cfg, "PROMOTE", PROMOTE)


class PerTensorScales:
    """The epilogue D = acc * (scale_a * scale_b) of two per-tensor scales ((M, N) views of
    strides (0, 0)) in recipes/_gemm_kernel's load / apply steps: the two registers a chunk's
    `load` holds fit its prefetch budget (prefetched_chunks), so every chunk's loads are issued
    before the tile's main loop, which hides their latency."""

    def __init__(self, scale_a, scale_b):
        self.scales = {"scale_a": scale_a, "scale_b": scale_b}

    def staged(self, out_dtype) -> None:
        return None                      # no epilogue input comes through shared memory

    def load_bytes(self, values: int) -> int:
        """Register bytes per thread `load` holds for a chunk of any size: one f32 per scale."""
        return 4 * len(self.scales)

    def load(self, at, skip=()) -> dict:
        """The chunk's scales (register tensors in its layout, one value each) at `at`."""
        return {n: at.load(t) for n, t in self.scales.items() if n not in skip}

    def apply(self, acc, values: dict):
        return acc * (values["scale_a"] * values["scale_b"])

    def __call__(self, acc, at):
        return self.apply(acc, self.load(at))


def _per_tensor(t) -> bool:
    """Whether the (M, N) scale view `t` broadcasts one element (both strides 0)."""
    return all(isinstance(s, int) and s == 0 for s in t.stride)


def scaled(scale_a, scale_b):
    """The epilogue D = acc * (scale_a * scale_b) at each element: the scales are (M, N) global
    tensors whose stride-0 modes broadcast (one load per distinct element). Per-tensor scales
    are a PerTensorScales (loaded before the main loop); a per-row or per-column one is loaded
    in the epilogue (a chunk's 2 rows and 32 columns of scales would not fit the prefetch
    budget beside the promoted accumulators)."""
    if _per_tensor(scale_a) and _per_tensor(scale_b):
        return PerTensorScales(scale_a, scale_b)

    def epilogue(acc, at):
        return acc * (at.load(scale_a) * at.load(scale_b))
    return epilogue


@functools.cache
def kernel(a_type, b_type, c_type, cluster: int, bm: int = BM):
    """The kernel for `a_type` x `b_type` operands (lk.e4m3 / lk.e5m2) and a `c_type` output
    (lk.bf16 / lk.f32) of BM = `bm` row tiles (64: one consumer warpgroup, 128: two),
    launched in clusters of `cluster` CTAs (1 or 2)."""
    def gemm_fp8(a: lk.Tensor[a_type, 2], b: lk.Tensor[b_type, 2], c: lk.Tensor[c_type, 2],
                 scale_a: lk.Tensor[lk.f32, 2], scale_b: lk.Tensor[lk.f32, 2],
                 GRID: lk.constexpr, BN: lk.constexpr, STAGES: lk.constexpr, GROUP_M: lk.constexpr,
                 CLUSTER: lk.constexpr, PROMOTE: lk.constexpr):
        """D (M x N, c) = scale_a * scale_b * (A (M x K) @ B), B given as the N x K tensor b
        (b[n, k], K contiguous); scale_a and scale_b are M x N views (module docstring)."""
        gemm_tiles(a, b, c, GRID=GRID, B_MAJOR="K", BN=BN, BM=bm,
                   STAGES=STAGES, GROUP_M=GROUP_M, CLUSTER=CLUSTER,
                   epilogue=scaled(scale_a, scale_b), PROMOTE=PROMOTE)
    options = {"cluster": (cluster, 1, 1)} if cluster > 1 else {}
    return lk.kernel(gemm_fp8, num_warps=warps(bm), **options)


@functools.cache
def swap_kernel(a_type, b_type, c_type, bm: int, parts: int = 1):
    """The swapped kernel (recipes/_gemm_swap_kernel.py, decode: M <= 64 tokens): C^T = B^T
    A^T with BM = `bm` weight rows on the wgmma's M side and BN tokens on its N side, `parts`
    consumer warpgroups per 64 rows sharing a tile's k-steps, promoted every PROMOTE k-steps
    of an accumulator, the scales applied to the f32 sum, C stored from registers; one
    launch, no split."""
    def gemm_fp8_swap(a: lk.Tensor[a_type, 2], b: lk.Tensor[b_type, 2],
                      c: lk.Tensor[c_type, 2], scale_a: lk.Tensor[lk.f32, 2],
                      scale_b: lk.Tensor[lk.f32, 2], GRID: lk.constexpr, BN: lk.constexpr,
                      STAGES: lk.constexpr, TOKEN_TILES: lk.constexpr, PROMOTE: lk.constexpr):
        """D (M x N, c) = scale_a * scale_b * (A (M x K) @ B), B given as the N x K tensor b;
        TOKEN_TILES = ceil(M / BN) (the host's)."""
        gemm_tiles_swapped(a, b, c, GRID=GRID, B_MAJOR="K", BN=BN, STAGES=STAGES,
                           TOKEN_TILES=TOKEN_TILES, BM=bm, PARTS=parts, PROMOTE=PROMOTE,
                           epilogue=scaled(scale_a, scale_b))
    gemm_fp8_swap.__name__ = gemm_fp8_swap.__qualname__ = \
        f"gemm_fp8_swap_bm{bm}" + (f"_k{parts}" if parts > 1 else "")
    return lk.kernel(gemm_fp8_swap, num_warps=warps(bm * parts))


@functools.cache
def splitk_kernel(a_type, b_type, bm: int):
    """The split-K kernel: each of SPLIT_K K ranges' unscaled f32 partial product of a BM =
    `bm` row tile into its slab of the workspace w (recipes/_gemm_kernel.gemm_tiles with
    SPLIT_K > 1, one-CTA clusters); reduce_kernel sums the slabs and applies the scales."""
    def gemm_fp8_splitk(a: lk.Tensor[a_type, 2], b: lk.Tensor[b_type, 2],
                        w: lk.Tensor[lk.f32, 2], GRID: lk.constexpr, BN: lk.constexpr,
                        STAGES: lk.constexpr, GROUP_M: lk.constexpr, PROMOTE: lk.constexpr,
                        SPLIT_K: lk.constexpr):
        """W (SPLIT_K slabs, N) = the K ranges' A @ B, B given as the N x K tensor b."""
        gemm_tiles(a, b, w, GRID=GRID, B_MAJOR="K", BN=BN, BM=bm, STAGES=STAGES,
                   GROUP_M=GROUP_M, CLUSTER=1, SPLIT_K=SPLIT_K, PROMOTE=PROMOTE)
    return lk.kernel(gemm_fp8_splitk, num_warps=warps(bm))


@functools.cache
def reduce_kernel(c_type):
    """The split-K reduction (recipes/_gemm_splitk.py) storing D = scale_a * scale_b * (sum
    of the workspace's slabs) as `c_type`; the scales are M x N views as for kernel()."""
    def gemm_fp8_reduce(w: lk.Tensor[lk.f32, 2], c: lk.Tensor[c_type, 2],
                        scale_a: lk.Tensor[lk.f32, 2], scale_b: lk.Tensor[lk.f32, 2],
                        SPLITS: lk.constexpr):
        """D (M x N, c) = the scales times the sum of w's SPLITS slabs."""
        reduce_splits(w, c, SPLITS=SPLITS, epilogue=scaled(scale_a, scale_b))
    return lk.kernel(gemm_fp8_reduce, num_warps=REDUCE_WARPS)


# ---- host side -------------------------------------------------------------------------------
def _torch_types():
    """{torch dtype: layoutkit dtype} of the operand and output types."""
    torch = require_torch("recipes.gemm_fp8")
    return {torch.float8_e4m3fn: lk.e4m3, torch.float8_e5m2: lk.e5m2,
            torch.bfloat16: lk.bf16, torch.float32: lk.f32}


def autotune_space(m: int, n: int, k: int, sms: int = 132) -> list[Config]:
    """The configs a sweep tries for this shape: CONFIGS, then the heuristic's choice."""
    return list(dict.fromkeys(CONFIGS + (config_for(m, n, k, sms),)))


def config_for(m: int, n: int, k: int, sms: int = 132, swap: bool = True) -> Config:
    """The config of an M x N x K problem on a GPU of `sms` SMs: BEST_CONFIGS' entry, else
    recipes/_gemm_choice.py's heuristic for fp8 operands (CONFIGS[0] wherever its tiles fill
    the GPU; small M and few tiles: 64-row tiles, narrower BN, split-K, the swapped kernel, by
    its cost model; `swap` False: without the swapped kernel, the benchmark's ablation)."""
    return BEST_CONFIGS.get((m, n, k)) or _chosen(m, n, k, sms, swap)


@functools.lru_cache(maxsize=4096)
def _chosen(m: int, n: int, k: int, sms: int, swap: bool) -> Config:
    return choice.choose(m, n, k, sms, lk.e4m3, CONFIGS[0], swap=swap)


_RESIDENT: dict = {}
_sm_count = sm_count


def _resident_units(device, cfg: Config, types: tuple) -> int:
    """Scheduling units (CTAs or clusters) of the kernel of `types` under `cfg` that run at
    once on `device` (recipes._gemm_host.resident_units)."""
    import torch
    if cfg.SWAP:                 # no cluster, one CTA an SM (its ring fills shared memory)
        return _sm_count(device)
    key = (device, cfg, types)
    if key not in _RESIDENT:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        a_type, b_type, c_type = types
        specs = (lk.TensorSpec(a_type, (4096, 4096)), lk.TensorSpec(b_type, (4096, 4096)),
                 lk.TensorSpec(c_type, (4096, 4096)),
                 lk.TensorSpec(lk.f32, (4096, 4096), (0, 0)),
                 lk.TensorSpec(lk.f32, (4096, 4096), (0, 0)))
        _RESIDENT[key] = host.resident_units(
            kernel(*types, cfg.CLUSTER, cfg.BM), cfg, sms, *specs, GRID=sms, BN=cfg.BN,
            STAGES=cfg.STAGES, GROUP_M=cfg.GROUP_M, CLUSTER=cfg.CLUSTER, PROMOTE=promotion(cfg))
    return _RESIDENT[key]


def _check_scale(what: str, name: str, s, per: str, shape: tuple) -> None:
    """scale_a / scale_b: an f32 tensor of one element (any shape of 1s) or of `shape`."""
    torch = require_torch(f"recipes.{what}")
    host.require_tensor(what, name, s)
    host.require_dtype(what, name, s, (torch.float32,))
    if not (s.numel() == 1 and all(d == 1 for d in s.shape)) and tuple(s.shape) != shape:
        raise ValueError(f"{what}: {name} has shape {tuple(s.shape)}; it is one f32 (shape (), "
                         f"(1,) or (1, 1): per tensor) or one per {per} of shape {shape}")


def check_promotion(what: str, config) -> None:
    """A ValueError unless config's PROMOTE is an int >= 0, and at most STAGES where BN is
    over one part (PROMOTE_COLUMNS): every part of a group reads the group's stages, which stay
    held until its last part, so a group needs PROMOTE stages of the ring at once."""
    if config is None:
        return
    p = promotion(config)
    if isinstance(p, bool) or not isinstance(p, int) or p < 0:
        raise ValueError(f"{what}: config.PROMOTE = {p!r}; it is an int >= 0 (k-steps per "
                         "promotion to the f32 accumulator; 0: none)")
    if p > config.STAGES and config.BN > PROMOTE_COLUMNS and not config.SWAP:
        raise ValueError(f"{what}: config.PROMOTE = {p} with STAGES = {config.STAGES} and BN = "
                         f"{config.BN}; a BN over {PROMOTE_COLUMNS} is promoted in parts of "
                         f"{PROMOTE_COLUMNS} columns that each read the group's PROMOTE stages, "
                         "so PROMOTE <= STAGES (the ring would never free a stage)")


def check_inputs(a, b, scale_a, scale_b, out, out_dtype, config):
    """Validate gemm_fp8's arguments (torch tensors; CPU and meta tensors reach every rule);
    returns (M, N, K, output torch dtype). Each mistake is a TypeError (a
    Python type, a dtype) or a ValueError (a shape, the config's fields, an overlap, a device)
    naming the argument, its value and the rule."""
    torch = require_torch("recipes.gemm_fp8.check_inputs")
    what = "gemm_fp8"
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    host.require_matrix(what, "a", a, "M x K, K contiguous")
    host.require_matrix(what, "b", b, "K x N, column-major: b.t() is N x K row-major")
    host.require_dtype(what, "a", a, fp8)
    host.require_dtype(what, "b", b, fp8)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{what}: a is M x K and b is K x N, got a of shape {tuple(a.shape)} "
                         f"and b of shape {tuple(b.shape)} (K = {a.shape[1]} and "
                         f"{b.shape[0]})")
    (m, k), n = a.shape, b.shape[1]
    for name, s, per, shape in (("scale_a", scale_a, "row of a (per token)", (m, 1)),
                                ("scale_b", scale_b, "column of b (per channel)", (1, n))):
        if s is not None:
            _check_scale(what, name, s, per, shape)
    outputs = (torch.bfloat16, torch.float32)
    if out_dtype is not None and out_dtype not in outputs:
        raise TypeError(f"{what}: out_dtype is torch.bfloat16 or torch.float32 (or None: out's "
                        f"dtype, else bf16), got {out_dtype!r}")
    if out is not None and out_dtype is not None and getattr(out, "dtype", None) != out_dtype:
        raise ValueError(f"{what}: out has dtype {getattr(out, 'dtype', None)} but out_dtype is "
                         f"{out_dtype}; give one of them, or the same")
    host.check_config(what, config, TILE_M, split_k=True, swap=True)
    check_promotion(what, config)
    inputs = {"a": a, "b": b, **{name: s for name, s in (("scale_a", scale_a),
                                                          ("scale_b", scale_b)) if s is not None}}
    if out is not None:
        host.require_tensor(what, "out", out)
        dtype = out_dtype or out.dtype
        if dtype not in outputs:
            raise TypeError(f"{what}: out has dtype {out.dtype}; the kernel writes "
                            "torch.bfloat16 or torch.float32")
        host.require_out(what, out, (m, n), dtype)
        host.require_no_overlap(what, out, inputs)
    else:
        dtype = out_dtype or torch.bfloat16
    host.require_one_cuda_device(what, {**inputs, **({"out": out} if out is not None else {})})
    return m, n, k, dtype


_ONES: dict = {}              # device -> a (1, 1) f32 one: the scale None stands for


def _broadcast(s, m: int, n: int, device):
    """The scale as an (m, n) view: its own strides along the modes it has, 0 elsewhere (None:
    a kept one of the device)."""
    if s is None:
        if device not in _ONES:
            _ONES[device] = require_torch("recipes.gemm_fp8").ones(1, 1, device=device)
        s = _ONES[device]
    return (s.reshape(1, 1) if s.numel() == 1 else s).expand(m, n)


def gemm_fp8(a, b, scale_a=None, scale_b=None, out=None, *, out_dtype=None,
             config: Config | None = None):
    """D = scale_a * scale_b * (a @ b) for fp8 CUDA tensors a (M x K, float8_e4m3fn or
    float8_e5m2) and b (K x N, column-major as for torch._scaled_mm), f32 scales per tensor or
    per row of a / column of b (module docstring; None: 1); returns D (M x N, out_dtype: bf16 by
    default, or f32), written into `out` when given (out may not overlap an input). Arguments
    are checked first (check_inputs); a call of a signature that launched before checks only
    what can differ between the two and launches its plan (recipes/_gemm_plans.py)."""
    torch = require_torch("recipes.gemm_fp8.gemm_fp8")
    key = plans.signature(torch.Tensor, a, b, out, config, (scale_a, scale_b), (out_dtype,))
    if key is not None:         # a call of this signature launched before: its plan
        done = plans.launch(key, torch, a, b, out, (scale_a, scale_b))
        if done is not None:
            return done
    out_given = out is not None
    m, n, k, dtype = check_inputs(a, b, scale_a, scale_b, out, out_dtype, config)
    if out is None:
        out = torch.empty(m, n, device=a.device, dtype=dtype)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    steps, c = launches(a, b, scale_a, scale_b, out, config, _sm_count(a.device),
                        lambda cfg, types: _resident_units(a.device, cfg, types))
    for launched, grid, args, constexprs in steps:
        launched[grid](*args, **constexprs)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c)
    plans.remember(key, steps, c, a, b, out, out_given, (scale_a, scale_b), scale_views)
    return out


def scale_views(out, scales: tuple, scalars: tuple = ()) -> list:
    """A plan's arguments after a, b, C (recipes/_gemm_plans.py): the scales as out's (M, N)
    views (_broadcast)."""
    m, n = out.shape
    return [_broadcast(s, m, n, out.device) for s in scales]


def launches(a, b, scale_a, scale_b, out, config, sms: int, units) -> tuple[list, object]:
    """gemm_fp8's kernel launches for checked arguments (M, N, K > 0; out allocated): a list of
    (kernel, grid, args, constexprs) to run in order (the GEMM kernel, or the split-K kernel
    and its reduction), and the buffer D lands in (out itself, or a TMA-ready one to copy into
    out). `sms` picks the config when `config` is None; `units(cfg, types)` is the scheduling
    units resident at once (_resident_units)."""
    torch = require_torch("recipes.gemm_fp8.launches")
    (m, k), n = a.shape, b.shape[1]
    types = _torch_types()
    key = (types[a.dtype], types[b.dtype], types[out.dtype])
    a_op, b_op = host.tma_ready(a), host.tma_ready(b.t())      # both K contiguous
    cfg = config or config_for(m, n, k, sms)
    sa, sb = _broadcast(scale_a, m, n, a.device), _broadcast(scale_b, m, n, a.device)
    if cfg.SWAP:                # C from registers (masked stores: out as it is), one launch
        grid = units(cfg, key)
        return [(swap_kernel(key[0], key[1], key[2], cfg.BM, cfg.SPLIT_K), (grid,),
                 (a_op, b_op, out, sa, sb),
                 dict(GRID=grid, BN=cfg.BN, STAGES=cfg.STAGES, TOKEN_TILES=-(-m // cfg.BN),
                      PROMOTE=promotion(cfg)))], out
    c_stored, c = host.tma_output(out, keep=False)     # the kernel's TMA stores, C's columns
    plan = host.schedule(m, n, k, cfg, lk.e4m3, units(cfg, key))
    constexprs = dict(GRID=plan.grid, BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=plan.group)
    if plan.split_k > 1:        # unscaled f32 partials, then their sum scaled into c
        ws_stored, ws = plans.workspace(torch, a.device, plan.split_k * plan.slab_rows,
                                        host.round_up(n, host.F32_ALIGN), n)
        return [(splitk_kernel(key[0], key[1], cfg.BM), (plan.grid,), (a_op, b_op, ws_stored),
                 dict(constexprs, PROMOTE=promotion(cfg), SPLIT_K=plan.split_k)),
                (reduce_kernel(key[2]), reduce_grid(m, n), (ws, c, sa, sb),
                 dict(SPLITS=plan.split_k))], c
    return [(kernel(*key, cfg.CLUSTER, cfg.BM), (plan.grid,), (a_op, b_op, c_stored, sa, sb),
             dict(constexprs, CLUSTER=cfg.CLUSTER, PROMOTE=promotion(cfg)))], c


# ---- compile, check, benchmark ---------------------------------------------------------------
SCALES = {"tensorwise": ((0, 0), (0, 0)), "rowwise": ((1, 0), (0, 1))}   # scale view strides


def compile_default() -> dict[str, str]:
    """PTX of the default config, e4m3 x e4m3, for bf16 out with per-row/per-column scales and
    f32 out with per-tensor scales (a 4096^3 problem's specialization)."""
    cfg = CONFIGS[0]
    out = {}
    for c_type, scales in ((lk.bf16, "rowwise"), (lk.f32, "tensorwise")):
        sa, sb = (lk.TensorSpec(lk.f32, (4096, 4096), s) for s in SCALES[scales])
        T = lk.TensorSpec(lk.e4m3, (4096, 4096))
        name = (f"gemm_fp8_e4m3_{c_type}_{scales}_{cfg.BM}x{cfg.BN}x{ATOM_K}_s{cfg.STAGES}"
                f"_c{cfg.CLUSTER}")
        out[name] = kernel(lk.e4m3, lk.e4m3, c_type, cfg.CLUSTER).ptx(
            T, T, lk.TensorSpec(c_type, (4096, 4096)), sa, sb, GRID=132,
            BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=cfg.GROUP_M, CLUSTER=cfg.CLUSTER,
            PROMOTE=promotion(cfg))
    return out


def reference(a, b, scale_a=None, scale_b=None):
    """float64 D of dequantized fp8 inputs (torch tensors, any device): the scales broadcast
    over rows / columns (None: 1)."""
    d = a.double() @ b.double()
    for s in (scale_a, scale_b):
        d = d if s is None else d * s.double()
    return d


def check(seed: int = 0) -> float:
    """Random fp8 problems (ragged, M = 1, tiny, every config, both scale forms, bf16 and f32
    out, e4m3 and e5m2) against float64 of the dequantized inputs; returns the worst error
    relative to max |D| (AssertionError beyond 2**-7: bf16 rounding, and the fp8 tensor cores'
    narrower accumulation for f32 out)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [(1, 1, 1), (1, 4096, 4096), (7, 13, 5), (128, 256, 128), (200, 136, 72),
              (129, 300, 1000), (1000, 520, 264), (256, 1024, 4096), (333, 257, 129)]
    worst = 0.0
    for i, (m, n, k) in enumerate(shapes):
        for rowwise, dtype, b_type in ((False, torch.bfloat16, torch.float8_e4m3fn),
                                       (True, torch.float32, torch.float8_e5m2)):
            a = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device="cuda", generator=gen).to(b_type).t()
            shape_a, shape_b = ((m, 1), (1, n)) if rowwise else ((), ())
            sa = torch.rand(shape_a, device="cuda", generator=gen) + 0.5
            sb = torch.rand(shape_b, device="cuda", generator=gen) + 0.5
            cfg = CONFIGS[i % len(CONFIGS)]
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
            got = gemm_fp8(a, b, sa, sb, out=out, config=cfg).double()
            want = reference(a, b, sa, sb)
            err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
            assert err < 2 ** -7, (f"gemm_fp8 {m}x{n}x{k} ({b_type}, {dtype}, "
                                 f"{'rowwise' if rowwise else 'tensorwise'}, {cfg}): error "
                                 f"{err:.3g}")
            worst = max(worst, err)
    return worst


CPU_CASES = (    # (M, N, K), (A, B, C types), scales, grid, config
    ((130, 72, 200), (lk.e4m3, lk.e4m3, lk.bf16), "rowwise", 1, CONFIGS[1]),
    ((64, 136, 96), (lk.e4m3, lk.e5m2, lk.f32), "tensorwise", 2, CONFIGS[0]),
    ((70, 64, 300), (lk.e5m2, lk.e4m3, lk.f32), "rowwise", 1,       # groups of 2 k-steps, the
     Config(BN=64, STAGES=2, CLUSTER=1, PROMOTE=2)),                # last one short
    ((64, 296, 400), (lk.e4m3, lk.e4m3, lk.bf16), "rowwise", 1,     # two 128-column parts, two
     Config(BN=256, STAGES=2, CLUSTER=1, PROMOTE=2)))               # tiles through one ring


def check_cpu(seed: int = 0) -> float:
    """Run the kernel on the CPU interpreter (TMA, fp8 wgmma, the ring and roles with race
    checking) on small ragged problems (CPU_CASES): e4m3 x e4m3 with per-row / per-column
    scales into bf16, e4m3 x e5m2 with per-tensor scales into f32 on a 2-CTA cluster, e5m2 x
    e4m3 promoted every 2 of 3 k-steps; rows padded to 16 bytes as gemm_fp8 pads them.
    Compares with float64 of the dequantized inputs; returns the worst error relative to max
    |D| (AssertionError past 2**-7 for bf16, 2**-11 for f32: the interpreter's 14-bit fp8
    accumulator within a promotion group)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return max(cpu_error(*case, rng=rng) for case in CPU_CASES)


def cpu_error(shape, types, scales, grid, cfg, *, rng, tolerance=None, seeds=(0, 1),
              positive=False) -> float:
    """The error relative to max |D| of the kernel on the interpreter for one problem (random
    normal inputs, A times 4; `positive`: their absolute values) against float64 of the
    dequantized inputs (layoutkit.dsl.interpreter.check_on_cpu, once per seed); tolerance
    None: 2**-7 for bf16 out, 2**-11 for f32."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_fp8, to_fp8

    def padded(x):                       # TMA rows: 16-byte multiples (as tma_ready pads)
        out = np.zeros((x.shape[0], host.round_up(x.shape[1], host.TMA_ALIGN_BYTES)),
                       np.uint8)
        out[:, :x.shape[1]] = x
        return out[:, :x.shape[1]]
    (m, n, k), (a_type, b_type, c_type) = shape, types
    sign = np.abs if positive else (lambda x: x)
    a = to_fp8(sign(rng.standard_normal((m, k))) * 4, a_type)
    b_t = to_fp8(sign(rng.standard_normal((n, k))), b_type)           # N x K, K contiguous
    rowwise = scales == "rowwise"
    sa = (rng.random((m, 1) if rowwise else (1, 1)) + 0.5).astype(np.float32)
    sb = (rng.random((1, n) if rowwise else (1, 1)) + 0.5).astype(np.float32)
    want = (sa.astype(np.float64) * sb) * (from_fp8(a, a_type).astype(np.float64) @
                                           from_fp8(b_t, b_type).astype(np.float64).T)
    c_bits = np.uint16 if c_type == lk.bf16 else np.float32
    c = np.zeros((m, host.round_up(n, 8)), c_bits)[:, :n]
    if tolerance is None:
        tolerance = 2 ** -7 if c_type == lk.bf16 else 2 ** -11
    if cfg.SWAP:
        launched = swap_kernel(a_type, b_type, c_type, cfg.BM, cfg.SPLIT_K)
        constexprs = dict(TOKEN_TILES=-(-m // cfg.BN))
    else:
        launched = kernel(a_type, b_type, c_type, cfg.CLUSTER, cfg.BM)
        constexprs = dict(GROUP_M=host.schedule(m, n, k, cfg, a_type, grid // cfg.CLUSTER).group,
                          CLUSTER=cfg.CLUSTER)
    return check_on_cpu(
        launched, (grid,), padded(a), padded(b_t), c, np.broadcast_to(sa, (m, n)),
        np.broadcast_to(sb, (m, n)), GRID=grid, BN=cfg.BN, STAGES=cfg.STAGES,
        PROMOTE=promotion(cfg), **constexprs, expect={"c": want}, tolerance=tolerance,
        seeds=seeds)


WEIGHTS = ((4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096))   # (N, K) of models
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048), (8192, 8192, 1024),
          (4096, 14336, 4096), (4096, 4096, 14336), (16384, 4096, 4096), (6144, 6144, 6144),
          (1024, 1024, 1024), (256, 4096, 4096), (128, 8192, 8192)] + [
    (m, n, k) for n, k in WEIGHTS for m in (1, 16, 64, 128, 256, 512, 1024, 4096, 16384)]


def benchmark(reps: int = 30, shapes=None, configs=None) -> list[dict]:
    """fp8 GEMM TFLOP/s against torch._scaled_mm (cuBLASLt), e4m3 x e4m3 -> bf16, per-tensor and
    per-row scales, interleaved with the L2 flushed per call (layoutkit.tools.benchmarking).
    cuBLASLt runs twice: its default (partial sums promoted to f32 every so often) and
    use_fast_accum=True (all of K in the tensor cores' accumulator, as a PROMOTE = 0 config).
    `shapes`: (M, N, K) triples (None: 4096^3 and 8192^3; SHAPES has issue 15's whole list);
    `configs`: the configs to time per shape (None: the shipped choice; a callable: its
    config of (M, N, K)). Prints a markdown table
    of TFLOP/s and ratios (layoutkit's TFLOP/s over the peer's: > 1 is faster) and the errors
    of layoutkit and cuBLASLt's default against float64 (relative to max |D|, bf16 out; an
    AssertionError past 2**-7, 2**-6 for a PROMOTE = 0 config), a case torch refuses showing
    its reason (a failed check is a row, and the AssertionError comes after the table); returns
    the rows with a ratio. Up to BARE_FLOPS a "bare" column times the kernels' launches alone
    (bare_launches: no checks or planning), the kernels' standing where Python bounds a call."""
    import torch

    from layoutkit.tools.benchmarking import interleaved, tflops
    rows, failed = [], []
    print("| M x N x K | scales | config | layoutkit | cuBLASLt | fast-accum | ratio | "
          "ratio (fast) | error | cuBLASLt error | bare | ratio (bare) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m, n, k in shapes or SHAPES[:2]:
        a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        flops = 2 * m * n * k
        for scales in ("tensorwise", "rowwise"):
            shape_a, shape_b = ((m, 1), (1, n)) if scales == "rowwise" else ((), ())
            sa = torch.rand(shape_a, device="cuda") + 0.5
            sb = torch.rand(shape_b, device="cuda") + 0.5
            want = reference(a, b, sa, sb)
            peers, theirs = {}, "-"
            for name, fast in (("cuBLASLt", False), ("fast-accum", True)):
                def peer(fast=fast):
                    return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                            use_fast_accum=fast)
                try:
                    d = peer()
                    peers[name] = peer
                    if not fast:
                        theirs = f"{relative_error(d, want):.2e}"
                except RuntimeError as exc:       # a shape or scale form cuBLASLt refuses
                    peers[name] = str(exc).splitlines()[0][:50]
            for config in configs or [None]:
                if callable(config):
                    config = config(m, n, k)
                def ours(config=config):
                    return gemm_fp8(a, b, sa, sb, config=config)
                shown = config or config_for(m, n, k)
                err = relative_error(ours(), want)
                bound = 2 ** -7 if promotion(shown) else 2 ** -6
                if not err < bound:          # reported, not timed; raised after the table
                    failed.append(f"gemm_fp8 {m}x{n}x{k} {scales} {shown}: error {err:.3g}")
                    print(f"| {m}x{n}x{k} | {scales} | {shown} | FAILED: error {err:.2e} > "
                          f"{bound:.2e} | | | | | {err:.2e} | {theirs} |", flush=True)
                    continue
                runnable = {"layoutkit": ours, **{x: f for x, f in peers.items() if callable(f)}}
                if flops <= BARE_FLOPS:
                    runnable["bare"] = bare_launches(a, b, sa, sb, config)
                times = interleaved(runnable, reps=reps)
                got = {x: tflops(flops, t.median_ms) for x, t in times.items()}
                mine = got["layoutkit"]
                cells = [f"{got[x]:.1f}" if x in got else f"n/a ({peers[x]})"
                         for x in ("cuBLASLt", "fast-accum")]
                ratios = [f"{mine / got[x]:.3f}" if x in got else "-"
                          for x in ("cuBLASLt", "fast-accum")]
                if "cuBLASLt" in got:                 # the summary's rows have a ratio
                    rows.append({"case": f"{m}x{n}x{k} {scales}", "config": str(shown),
                                 "layoutkit_tflops": mine, "cublaslt_tflops": got["cuBLASLt"],
                                 "fast_accum_tflops": got.get("fast-accum"),
                                 "speedup": mine / got["cuBLASLt"]})
                bare = (f"{got['bare']:.1f} | {got['bare'] / got['cuBLASLt']:.3f}"
                        if "bare" in got and "cuBLASLt" in got else " | ")
                print(f"| {m}x{n}x{k} | {scales} | {shown} | {mine:.1f} | {cells[0]} | "
                      f"{cells[1]} | {ratios[0]} | {ratios[1]} | {err:.2e} | {theirs} | "
                      f"{bare} |", flush=True)
    if failed:
        raise AssertionError("; ".join(failed))
    return rows


DECODE_SHAPES = [(m, n, k) for n, k in WEIGHTS for m in (1, 16, 64)]
BARE_FLOPS = 2 * 512 * 14336 * 4096     # shapes whose call the host's path may bound


def bare_launches(a, b, scale_a, scale_b, config):
    """The launches of gemm_fp8(a, b, scale_a, scale_b) prepared once (bf16 out): a function
    that runs them (no checks, no planning, the output buffer reused): what the kernels
    alone take where the entry's Python bounds the call (small M)."""
    import torch
    out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=torch.bfloat16)
    steps, _ = launches(a, b, scale_a, scale_b, out, config, _sm_count(a.device),
                        lambda cfg, types: _resident_units(a.device, cfg, types))
    launchers = [(launched[grid], args, constexprs)
                 for launched, grid, args, constexprs in steps]

    def run():
        for launch, args, constexprs in launchers:
            launch(*args, **constexprs)
    return run


def relative_error(got, want) -> float:
    """max |got - want| / max |want| (torch tensors; want float64)."""
    return ((got.double() - want).abs().max() / want.abs().max()).item()
