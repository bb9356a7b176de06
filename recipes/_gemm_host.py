"""The host side that recipes/gemm_hopper.py and recipes/gemm_fp8.py share: argument checks
(every mistake a TypeError or ValueError naming the argument, its value and the rule, before
anything reaches the GPU), TMA-ready operands, config checks and the persistent schedule.

The checks run in an order that needs no GPU to reach any of them: Python types, ranks,
dtypes, shapes, the config, `out`, overlap of `out` with an input, and last the devices (all
one, then a CUDA one), so CPU and meta tensors exercise every rule.
"""
from __future__ import annotations

from dataclasses import dataclass

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes._gemm_kernel import CONSUMERS, TILE_N, WG_ROWS, Config, row_elements, split_rows
from recipes._gemm_swap_kernel import CHAINS, MAX_TOKENS, TOKEN_STEP

TMA_ALIGN_BYTES = 16          # TMA: global addresses and row strides are multiples of 16 bytes
F32_ALIGN = TMA_ALIGN_BYTES // lk.f32.nbytes   # f32 rows (split-K workspace): multiples of 4


# ---- argument checks -------------------------------------------------------------------------
def require_tensor(what: str, name: str, x) -> None:
    """TypeError unless `x` is a torch tensor."""
    torch = require_torch(what)
    if not isinstance(x, torch.Tensor):
        hint = " (torch.from_numpy(x).cuda() makes one of a numpy array)" \
            if type(x).__module__ == "numpy" else ""
        raise TypeError(f"{what}: {name} is a torch tensor on a CUDA device, got "
                        f"{type(x).__module__}.{type(x).__name__}{hint}")


def require_matrix(what: str, name: str, x, meaning: str) -> None:
    """`x` a torch tensor of rank 2 (`meaning`: its modes, for the message)."""
    require_tensor(what, name, x)
    if x.dim() != 2:
        raise ValueError(f"{what}: {name} is a 2-D tensor ({meaning}), got one of shape "
                         f"{tuple(x.shape)}")


def require_dtype(what: str, name: str, x, allowed: tuple) -> None:
    """TypeError unless x.dtype is one of `allowed` (torch dtypes)."""
    if x.dtype not in allowed:
        names = " or ".join(str(d) for d in allowed)
        raise TypeError(f"{what}: {name} has dtype {x.dtype}; the kernel takes {names} (no "
                        "implicit conversion)")


def require_out(what: str, out, shape: tuple, dtype) -> None:
    """`out` (when given) a torch tensor of `shape` and `dtype`."""
    require_tensor(what, "out", out)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{what}: out has shape {tuple(out.shape)}; the result is "
                         f"{tuple(shape)}")
    require_dtype(what, "out", out, (dtype,))


def _bytes(x) -> tuple[int, int]:
    """[first, last) byte addresses the elements of `x` span."""
    extent = 1 + sum((n - 1) * s for n, s in zip(x.shape, x.stride())) if x.numel() else 0
    return x.data_ptr(), x.data_ptr() + extent * x.element_size()


def require_no_overlap(what: str, out, inputs: dict) -> None:
    """ValueError when `out` shares memory with an input (the kernel would read what it is
    overwriting); meta tensors have no memory to compare."""
    if out.is_meta or out.numel() == 0:
        return
    lo, hi = _bytes(out)
    for name, x in inputs.items():
        if x.is_meta or x.numel() == 0 or x.device != out.device:
            continue
        x_lo, x_hi = _bytes(x)
        if x_lo < hi and lo < x_hi:
            raise ValueError(f"{what}: out (bytes {lo:#x}..{hi:#x}) overlaps {name} (bytes "
                             f"{x_lo:#x}..{x_hi:#x}); the kernel reads {name} while it writes "
                             "out: give out its own memory")


def require_one_cuda_device(what: str, tensors: dict, cuda: bool = True) -> None:
    """ValueError unless every tensor is on one device (named after the first), a CUDA one
    (any one where not `cuda`: a fake or CPU-interpreter caller's checks)."""
    (first, x), *rest = tensors.items()
    for name, y in rest:
        if y.device != x.device:
            raise ValueError(f"{what}: {name} is on {y.device} and {first} on {x.device}; "
                             "every tensor of one call is on one device")
    if cuda and x.device.type != "cuda":
        raise ValueError(f"{what}: {first} is on {x.device}; the kernel runs on a CUDA device "
                         "(move the tensors with .cuda())")


def check_config(what: str, config, tile_m: tuple = (CONSUMERS * WG_ROWS,),
                 split_k: bool = False, swap: bool = False) -> None:
    """A TypeError unless `config` is None or a Config; a ValueError unless the kernel has its
    tile shape (BM one of `tile_m`), cluster and split (SPLIT_K > 1 only where `split_k`;
    SWAP only where `swap`: the swapped kernel's BN any multiple of TOKEN_STEP up to
    MAX_TOKENS, no cluster, no split; the shared-memory budget is checked when the kernel
    is traced)."""
    if config is None:
        return
    if not isinstance(config, Config):
        raise TypeError(f"{what}: config is a Config (recipes._gemm_kernel.Config, or None for "
                        f"the shipped choice), got {type(config).__name__} {config!r}")
    problems = []
    if config.BM not in tile_m:
        rows = " or ".join(map(str, tile_m))
        problems.append(f"BM = {config.BM!r} (the kernel's tile has {rows} rows: consumer "
                        f"warpgroups of {WG_ROWS})")
    if not isinstance(config.SWAP, bool) or (config.SWAP and not swap):
        problems.append(f"SWAP = {config.SWAP!r} (" + (
            "True or False" if swap else "False: this recipe has no swapped kernel") + ")")
    elif config.SWAP:
        if isinstance(config.BN, bool) or not isinstance(config.BN, int) or \
                not 0 < config.BN <= MAX_TOKENS or config.BN % TOKEN_STEP:
            problems.append(f"BN = {config.BN!r} (the swapped kernel's token columns: a "
                            f"multiple of {TOKEN_STEP} up to {MAX_TOKENS})")
        if config.CLUSTER != 1:
            problems.append(f"CLUSTER = {config.CLUSTER} (the swapped kernel runs without "
                            "clusters: 1)")
        parts = config.SPLIT_K
        if isinstance(parts, bool) or not isinstance(parts, int) or parts not in (1, 2) or \
                config.BM * parts > CONSUMERS * WG_ROWS:
            problems.append(f"SPLIT_K = {parts!r} (the swapped kernel's consumer warpgroups "
                            f"per 64 weight rows: 1, or 2 with BM = {WG_ROWS}; at most "
                            f"{CONSUMERS} consumer warpgroups)")
        elif isinstance(config.STAGES, int) and 2 <= config.STAGES and (
                config.STAGES < CHAINS * parts or config.STAGES % parts):
            problems.append(f"STAGES = {config.STAGES} (each of the swapped kernel's {parts} "
                            f"consumer part(s) holds {CHAINS - 1} stages while it waits for the "
                            f"next, and waits on every phase of its own stages: a multiple of "
                            f"{parts}, at least {CHAINS * parts})")
    elif config.BN not in TILE_N:
        problems.append(f"BN = {config.BN} (one of {', '.join(map(str, TILE_N))}: a wgmma N "
                        "in whole epilogue chunks)")
    if config.CLUSTER not in (1, 2):
        problems.append(f"CLUSTER = {config.CLUSTER} (1 or 2)")
    if isinstance(config.STAGES, bool) or not isinstance(config.STAGES, int) or \
            config.STAGES < 2:
        problems.append(f"STAGES = {config.STAGES!r} (an int of at least 2)")
    if isinstance(config.GROUP_M, bool) or not isinstance(config.GROUP_M, int) or \
            config.GROUP_M < 1:
        problems.append(f"GROUP_M = {config.GROUP_M!r} (a positive int)")
    swapped = config.SWAP is True and swap      # its SPLIT_K: the parts (checked above)
    if not swapped and (isinstance(config.SPLIT_K, bool) or
                        not isinstance(config.SPLIT_K, int) or config.SPLIT_K < 1 or
                        (config.SPLIT_K > 1 and not split_k)):
        problems.append(f"SPLIT_K = {config.SPLIT_K!r} (" + (
            "a positive int" if split_k else "1: this kernel has no split-K") + ")")
    elif not swapped and config.SPLIT_K > 1 and config.CLUSTER != 1:
        problems.append(f"SPLIT_K = {config.SPLIT_K} (split-K runs without clusters: "
                        "CLUSTER = 1)")
    if problems:
        raise ValueError(f"{what}: config {config} does not fit the kernel: "
                         + "; ".join(problems))


# ---- operands and the schedule ---------------------------------------------------------------
def round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def tma_ready(x):
    """x (a 2-D torch view) itself when TMA can read it (unit column stride, 16-byte aligned
    address and row stride; a single row's stride is any, so it is made 16-byte aligned in a
    view), else a copy into a buffer whose rows are padded to 16 bytes (the padding is never
    read: the kernel's extents stop at x's columns)."""
    torch = require_torch("recipes gemm operands")
    rows, cols = x.shape
    align = TMA_ALIGN_BYTES // x.element_size()
    if x.stride(1) == 1 and x.data_ptr() % TMA_ALIGN_BYTES == 0:
        if x.stride(0) % align == 0:
            return x
        if rows == 1:
            return x.as_strided((1, cols), (round_up(cols, align), 1))
    buf = torch.empty(rows, round_up(cols, align), device=x.device, dtype=x.dtype)
    buf[:, :cols] = x
    return buf[:, :cols]


def tma_output(out, keep: bool) -> tuple:
    """(C as the kernel's TMA stores write it, the view of it that holds the product) for a 2-D
    torch output `out`: out itself (twice) where TMA can store to it, else a buffer with 16-byte
    rows, holding out's values when `keep` (the epilogue reads C). TMA stores write a row's last
    16-byte chunk whole, past the tensor's extent (lk.sm90.tma_store refuses an extent that
    ends inside one): where out's columns do, the kernel writes all of a buffer's padded
    columns and the caller copies the first ones into out (a documented cost)."""
    rows, cols = out.shape
    align = TMA_ALIGN_BYTES // out.element_size()
    if cols % align == 0:
        if out.stride(1) == 1:
            c = tma_ready(out)                  # out, or a copy of it
        else:
            c = tma_ready(out.new_empty(rows, cols))
            if keep:
                c.copy_(out)
        return c, c
    buf = out.new_empty(rows, round_up(cols, align))
    if keep:
        buf[:, :cols].copy_(out)
    return buf, buf[:, :cols]


@dataclass(frozen=True)
class Schedule:
    """The persistent launch of one problem: the tile grid, the k-steps, the raster group that
    divides the cluster rows, the grid (CTAs), and the K ranges each output tile is split
    into (split_k; 1: no split) with the rows of one range's workspace slab."""

    tiles_m: int
    tiles_n: int
    k_tiles: int
    group: int
    grid: int
    split_k: int = 1
    slab_rows: int = 0


def schedule(m: int, n: int, k: int, cfg: Config, ab_dtype, resident_units: int,
             full_grid: bool = False) -> Schedule:
    """The Schedule of an M x N x K problem of `ab_dtype` operands (a layoutkit dtype) under
    `cfg`, `resident_units` scheduling units (CTAs or clusters) running at once. The grid is
    every resident unit with `full_grid` (units past the tiles have none: one specialization
    serves every problem size, GRID being a constexpr), else at most one unit per tile."""
    tiles_m, tiles_n = -(-m // cfg.BM), -(-n // cfg.BN)
    pair_rows = -(-tiles_m // cfg.CLUSTER)           # tile rows a cluster's CTAs share
    group = next(g for g in (cfg.GROUP_M, 8, 4, 2, 1) if pair_rows % g == 0)
    k_tiles = -(-k // row_elements(ab_dtype))
    per_split = -(-k_tiles // cfg.SPLIT_K)
    split = -(-k_tiles // per_split)                 # no K range left empty
    grid = cfg.CLUSTER * (resident_units if full_grid else
                          min(resident_units, split * pair_rows * tiles_n))
    return Schedule(tiles_m, tiles_n, k_tiles, group, grid, split,
                    split_rows(tiles_m, cfg.CLUSTER, cfg.BM))


def resident_units(kernel, cfg: Config, sms: int, *args, **constexprs) -> int:
    """Scheduling units (CTAs, or clusters of cfg.CLUSTER CTAs) of `kernel` that run at once on
    a device of `sms` SMs: the SM count, or for clusters what cuOccupancyMaxActiveClusters allows
    for the specialization of `args` (GPCs need not hold a whole number of clusters; a
    persistent grid larger than what is resident would run in two waves)."""
    if cfg.CLUSTER == 1:
        return sms
    spec = kernel.specialize(*args, **constexprs)
    return spec.compiled.max_active_clusters(kernel.num_warps * 32, spec.ir.shared_bytes,
                                             (cfg.CLUSTER, 1, 1))
