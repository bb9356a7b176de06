"""Warp-specialized bf16 GEMM for Hopper: D = epilogue(A @ B), f32 accumulate, bf16 or f32 out.

A is M x K row-major; B is K x N, either N-major (row-major, strides (N, 1)) or K-major (strides
(1, K), e.g. `w.t()` of a row-major N x K weight). The kernel is recipes/_gemm_kernel.py's
pipeline (shared with recipes/gemm_fp8.py), every line of it visible there:

    persistent grid: every resident CTA (one specialization for any M; those past the tiles
    have none); CTA j takes output tiles j, j + grid, ... in a grouped order (GROUP_M
    tile-rows at a time, so concurrent CTAs share A and B tiles in L2)

    warpgroup 0, producer (40 registers): one elected thread, per tile and k-step:
        wait empty[s] (phase from the ring counter) -> expect_tx(full[s]) { TMA A tile, TMA B tile }
    warpgroups 1, 2, consumers (232 registers), each owning 64 rows of the BM=128-row tile
    (a BM=64 tile: warpgroup 1 alone):
        per k-step: wait full[s] -> wgmma 64 x BN x BK (4 x k16) -> commit -> wait_group 1
                    (the previous k-step's wgmma is done) -> arrive empty[previous s]
        epilogue:   wait_group 0, release the last stage; f32 -> bf16 into the warpgroup's
                    swizzled half of the C tile in shared memory; fence.proxy.async; named
                    barrier over the warpgroup; one thread TMA-stores it (clipped at M, N)

The stage/phase of both sides come from one counter, `tile_iteration * K_TILES + k`, through
lk.sm90.producer_state / lk.sm90.consumer_state (layoutkit.sync.PipelineState's rules). Ragged
M, N, K are exact through TMA bounds: loads past the edge fill zeros (which add nothing to the
dot products) and store rows past the edge are dropped. TMA needs 16-byte aligned rows: a K (or
N) whose rows are not a multiple of 8 elements is padded on the host (a copy; documented cost),
and an output whose rows end inside a 16-byte chunk is written through a buffer of padded rows
and copied (TMA stores write a row's last chunk whole: host.tma_output).

Config: BM x BN tile (BM 128: two consumer warpgroups, 64: one; BK = 64, one 128-byte row),
STAGES ring depth, GROUP_M raster, CLUSTER, SPLIT_K (K ranges per output tile, their f32
partials summed by recipes/_gemm_splitk.py's second kernel); `autotune_space` lists the sweep,
`BEST_CONFIGS` records the winners measured on the H200 (benchmarks/bench_gemm.py --sweep),
`config_for(m, n, k)` picks one: those, else recipes/_gemm_choice.py's documented heuristic
(the measured 128 x 256 default in 2-CTA clusters wherever it fills the GPU; for small M and
few tiles a cost model over 64/128-row tiles, narrower BN, split-K and, for M <= 64, the
swapped kernel, recipes/_gemm_swap_kernel.py: Config.SWAP, C^T = B^T A^T with the weights on
the wgmma's 64-row side, one launch). gemm asks `TUNER` (an
lk.ChoiceTuner): a shape's winner from `layoutkit tune gemm_hopper` (`tune()`, kept on disk),
else config_for's choice. `gemm` checks its
arguments first (`check_inputs`: types, ranks, dtypes, shapes, config, out and its overlap
with the inputs, the epilogue's tensors and scalars, devices), each mistake a TypeError or
ValueError naming it.

Fused epilogue: `gemm(a, b, out, bias=..., activation=..., residual=..., alpha=..., beta=...)`
computes D = activation(alpha * (a @ b) + beta * C + bias) + residual in f32 on each
accumulator chunk before the cast to out's type (bf16 or f32; recipes/_epilogues.py), C being
out's contents (cuBLAS's in-place semantics; not read when beta = 0): one extra load per value
of C or the residual, one per column of the thread's fragment for the bias, the activation's
arithmetic (gelu: torch's tanh form through tanh.approx.f32, absolute error <= |x| 2^-12),
no extra pass over D. The first chunks' loads (as many as fit 128 bytes of registers per
thread) are issued before the tile's main loop, the others one chunk ahead
(recipes/_gemm_kernel.py's prefetched_chunks). Under split-K the same epilogue runs in the
reduction.
"""
import functools
import inspect

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _gemm_choice as choice
from recipes import _gemm_host as host
from recipes import _gemm_plans as plans
from recipes._device import sm_count
from recipes._epilogues import ACTIVATIONS, Epilogue, from_parameters
from recipes._gemm_kernel import (CONSUMERS, TILE_M, WARPS, WG_ROWS, Config, gemm_tiles,
                                  row_elements, warps)
from recipes._gemm_splitk import REDUCE_WARPS, reduce_grid, reduce_splits
from recipes._gemm_swap_kernel import gemm_tiles_swapped

ATOM_K = row_elements(lk.bf16)     # BK: bf16 elements in one 128-byte swizzled row
ALIGN_ELEMENTS = host.TMA_ALIGN_BYTES // lk.bf16.nbytes   # TMA rows: multiples of 16 bytes


def gemm_body(a: lk.Tensor[lk.bf16, 2], b: lk.Tensor[lk.bf16, 2], c: lk.Tensor[lk.bf16, 2],
              GRID: lk.constexpr, B_MAJOR: lk.constexpr, BN: lk.constexpr, STAGES: lk.constexpr,
              GROUP_M: lk.constexpr, CLUSTER: lk.constexpr):
    """The kernel (see the module docstring): C (M x N) = A (M x K) @ B, with B given as the
    N x K tensor b (B_MAJOR "K": b[n, k]) or the K x N tensor b (B_MAJOR "N": b[k, n]), each
    with its last mode contiguous; the accumulator is stored as it is (no epilogue)."""
    gemm_tiles(a, b, c, GRID=GRID, B_MAJOR=B_MAJOR, BN=BN,
               STAGES=STAGES, GROUP_M=GROUP_M, CLUSTER=CLUSTER)


gemm_kernel = lk.kernel(gemm_body, num_warps=WARPS)
gemm_kernel_cluster2 = lk.kernel(gemm_body, num_warps=WARPS, cluster=(2, 1, 1))
KERNELS = {1: gemm_kernel, 2: gemm_kernel_cluster2}


CONSTEXPRS = ("GRID", "B_MAJOR", "BN", "STAGES", "GROUP_M", "CLUSTER")
SWAP_CONSTEXPRS = ("GRID", "B_MAJOR", "BN", "STAGES", "TOKEN_TILES")  # the swapped kernel's
TYPES = {"bfloat16": lk.bf16, "float32": lk.f32}     # torch dtype names -> element types


def _kernel_function(name: str, params: tuple, body):
    """A kernel definition with a generated parameter list: a function of the plain parameters
    `params` ((name, annotation) pairs, in order) that calls body(values by name). It closes
    over the signature's text, so the on-disk cache's fingerprint tells apart kernels whose
    parameters differ only in their annotations (a bf16 or an f32 bias)."""
    signature = tuple((p, str(ann)) for p, ann in params)

    def generated(*args):
        body({name: x for (name, _), x in zip(signature, args)})
    generated.__signature__ = inspect.Signature(
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ann)
         for p, ann in params])
    generated.__annotations__ = dict(params)
    generated.__name__ = generated.__qualname__ = name
    return generated


@functools.cache
def kernel_for(bm: int, cluster: int, split_k: bool, c_type, epilogue: Epilogue,
               swap: bool = False, parts: int = 1):
    """The GEMM kernel of a BM-row tile in clusters of `cluster` CTAs, storing C of `c_type`
    through `epilogue`; with `split_k` it takes the SPLIT_K constexpr too and stores f32
    partials (the epilogue then runs in reduce_kernel); with `swap` it is the swapped kernel
    (recipes/_gemm_swap_kernel.py: BM weight rows by BN tokens, `parts` consumer warpgroups per
    64 rows sharing a tile's k-steps, SWAP_CONSTEXPRS). Parameters:
    a, b, c, the epilogue's (Epilogue.parameters), then CONSTEXPRS (and SPLIT_K)."""
    assert bm in TILE_M and not (split_k and (epilogue or c_type != lk.f32))
    assert not (swap and (split_k or cluster != 1))
    constexprs = SWAP_CONSTEXPRS if swap else CONSTEXPRS + (("SPLIT_K",) if split_k else ())
    params = ((("a", lk.Tensor[lk.bf16, 2]), ("b", lk.Tensor[lk.bf16, 2]),
               ("c", lk.Tensor[c_type, 2])) + tuple(epilogue.parameters())
              + tuple((x, lk.constexpr) for x in constexprs))

    fused, act = bool(epilogue), epilogue.activation   # plain values: the body's closure

    def body(v):
        fn = from_parameters(v, act) if fused else None
        if swap:
            gemm_tiles_swapped(v["a"], v["b"], v["c"], GRID=v["GRID"], B_MAJOR=v["B_MAJOR"],
                               BN=v["BN"], STAGES=v["STAGES"], TOKEN_TILES=v["TOKEN_TILES"],
                               BM=bm, epilogue=fn, PARTS=parts)
            return
        gemm_tiles(v["a"], v["b"], v["c"], GRID=v["GRID"], B_MAJOR=v["B_MAJOR"], BN=v["BN"],
                   STAGES=v["STAGES"], GROUP_M=v["GROUP_M"], CLUSTER=v["CLUSTER"],
                   BM=bm, SPLIT_K=v.get("SPLIT_K", 1), epilogue=fn)
    name = f"gemm_{'swap_' if swap else ''}bm{bm}" + (f"_k{parts}" if parts > 1 else "") + \
        ("_splitk" if split_k else "") + ("_fused" if epilogue else "")
    options = {"cluster": (cluster, 1, 1)} if cluster > 1 else {}
    return lk.kernel(_kernel_function(name, params, body), num_warps=warps(bm * parts),
                     **options)


@functools.cache
def reduce_kernel(c_type, epilogue: Epilogue):
    """The split-K reduction (recipes/_gemm_splitk.py) storing C of `c_type` through
    `epilogue`. Parameters: w (the f32 workspace), c, the epilogue's, SPLITS."""
    params = ((("w", lk.Tensor[lk.f32, 2]), ("c", lk.Tensor[c_type, 2]))
              + tuple(epilogue.parameters()) + (("SPLITS", lk.constexpr),))

    fused, act = bool(epilogue), epilogue.activation

    def body(v):
        reduce_splits(v["w"], v["c"], SPLITS=v["SPLITS"],
                      epilogue=from_parameters(v, act) if fused else None)
    name = "gemm_splitk_reduce" + ("_fused" if epilogue else "")
    return lk.kernel(_kernel_function(name, params, body), num_warps=REDUCE_WARPS)


def fused_kernel(bias_type, act, cluster: int):
    """The 128-row kernel whose epilogue is act(acc + bias) (recipes/_epilogues.py): `bias_type`
    the bias's element type (lk.bf16, lk.f32; the bias an (M, N) view of strides (0, 1)) or
    None for no bias, `act` an activation function or None; clusters of `cluster` CTAs."""
    return kernel_for(CONSUMERS * WG_ROWS, cluster, False, lk.bf16,
                      Epilogue(bias=bias_type, activation=act))


# ---- host side -------------------------------------------------------------------------------
CONFIGS = (choice.DEFAULT, Config(BN=256, STAGES=4, CLUSTER=1),
           Config(BN=256, STAGES=3), Config(BN=256, STAGES=4, GROUP_M=16),
           Config(BN=128, STAGES=6))
# The winners of `benchmarks/bench_gemm.py --sweep --kmajor` on the H200 (2026-11-29, commit
# 57f5d44; docs/PERFORMANCE.md), per (M, N, K), both B layouts agreeing; config_for asks
# recipes/_gemm_choice.py for shapes not listed.
BEST_CONFIGS: dict[tuple[int, int, int], Config] = {
    (4096, 4096, 4096): CONFIGS[0],      # 0.926 (N-major) / 0.938 (K-major) of cuBLAS
    (8192, 8192, 8192): CONFIGS[0],      # 0.933 / 0.935
    (8192, 8192, 1024): CONFIGS[0],      # 0.974 / 0.972
}


def autotune_space(m: int, n: int, k: int, sms: int = 132) -> list[Config]:
    """The configs a sweep tries for this shape: CONFIGS, then the heuristic's choice."""
    return list(dict.fromkeys(CONFIGS + (config_for(m, n, k, sms),)))


# The sweep's winners per (M, N, K, B major, SM count, device name), kept on disk by
# `layoutkit tune gemm_hopper` (tune() below); a shape never swept takes config_for's choice.
TUNER = lk.ChoiceTuner("recipes.gemm_hopper.gemm", Config, sources=(gemm_tiles, reduce_splits),
                       default=lambda key: config_for(key[0], key[1], key[2], key[4]))


def config_for(m: int, n: int, k: int, sms: int = 132) -> Config:
    """The config of an M x N x K problem on a GPU of `sms` SMs: a measured winner of
    BEST_CONFIGS, else recipes/_gemm_choice.py's heuristic (the default 128 x 256 tile in
    2-CTA clusters wherever it fills the GPU; small M and few tiles: 64-row tiles, narrower
    BN, split-K, by a cost model)."""
    return BEST_CONFIGS.get((m, n, k)) or _chosen(m, n, k, sms)


# per shape, once; bf16 has the swapped kernel for decode shapes
_chosen = functools.lru_cache(maxsize=4096)(functools.partial(choice.choose, swap=True))


_round_up, _tma_ready = host.round_up, host.tma_ready
_RESIDENT: dict = {}
_NAMES: dict = {}
_sm_count = sm_count


def _device_name(device) -> str:
    """The name of a CUDA device (remembered per device): part of the tuning key; a CPU
    device (the interpreter's launches through layoutkit.torch) is its type."""
    if device not in _NAMES:
        import torch
        _NAMES[device] = torch.cuda.get_device_name(device) if device.type == "cuda" else \
            device.type
    return _NAMES[device]


def _resident_units(device, cfg: Config, major: str) -> int:
    """Scheduling units (CTAs or clusters) of the kernel for `cfg` that run at once on
    `device` (recipes._gemm_host.resident_units)."""
    if cfg.SWAP:                 # no cluster, one CTA an SM (its ring fills shared memory)
        return _sm_count(device)
    key = (device, cfg.BM, cfg.BN, cfg.STAGES, cfg.CLUSTER, cfg.SPLIT_K > 1, major)
    if key not in _RESIDENT:
        sms = _sm_count(device)
        T = lk.TensorSpec(lk.bf16, (4096, 4096))
        C = lk.TensorSpec(lk.f32, (4096, 4096)) if cfg.SPLIT_K > 1 else T
        split = {"SPLIT_K": 2} if cfg.SPLIT_K > 1 else {}
        kernel = kernel_for(cfg.BM, cfg.CLUSTER, cfg.SPLIT_K > 1,
                            lk.f32 if cfg.SPLIT_K > 1 else lk.bf16, Epilogue())
        _RESIDENT[key] = host.resident_units(
            kernel, cfg, sms, T, T, C, GRID=sms, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
            GROUP_M=cfg.GROUP_M, CLUSTER=cfg.CLUSTER, **split)
    return _RESIDENT[key]


def _dtype_name(x) -> str:
    return str(x).removeprefix("torch.")


def _require_scalar(what: str, name: str, x) -> None:
    """TypeError unless `x` is a Python real number (int or float, not a bool)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{what}: {name} is a Python int or float (a scale of the product), "
                        f"got {type(x).__module__}.{type(x).__name__} {x!r}")


def check_inputs(a, b, out, config, bias=None, activation=None, residual=None, alpha=1.0,
                 beta=0.0, out_dtype=None, cuda: bool = True) -> tuple[int, int, int]:
    """Validate gemm's arguments (torch tensors; CPU and meta tensors reach every rule, and
    pass the device rule where not `cuda`); returns (M, N, K). Each mistake is a TypeError (a
    Python type, a dtype) or a ValueError (a shape, the config's fields, an overlap, a device)
    naming the argument, its value and the rule."""
    torch = require_torch("recipes.gemm_hopper.check_inputs")
    what = "gemm_hopper.gemm"
    host.require_matrix(what, "a", a, "M x K")
    host.require_matrix(what, "b", b, "K x N")
    host.require_dtype(what, "a", a, (torch.bfloat16,))
    host.require_dtype(what, "b", b, (torch.bfloat16,))
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{what}: a is M x K and b is K x N, got a of shape {tuple(a.shape)} "
                         f"and b of shape {tuple(b.shape)} (K = {a.shape[1]} and "
                         f"{b.shape[0]})")
    host.check_config(what, config, TILE_M, split_k=True, swap=True)
    (m, k), n = a.shape, b.shape[1]
    tensors = {"a": a, "b": b}
    out_types = (torch.bfloat16, torch.float32)
    if bias is not None:
        host.require_tensor(what, "bias", bias)
        host.require_dtype(what, "bias", bias, out_types)
        if tuple(bias.shape) != (n,):
            raise ValueError(f"{what}: bias has shape {tuple(bias.shape)}; it is one value per "
                             f"column of the result, shape ({n},)")
        tensors["bias"] = bias
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"{what}: activation is None or one of "
                         f"{', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    if residual is not None:
        host.require_tensor(what, "residual", residual)
        host.require_dtype(what, "residual", residual, out_types)
        if tuple(residual.shape) != (m, n):
            raise ValueError(f"{what}: residual has shape {tuple(residual.shape)}; it is added "
                             f"to the result, shape {(m, n)}")
    _require_scalar(what, "alpha", alpha)
    _require_scalar(what, "beta", beta)
    if beta != 0 and out is None:
        raise ValueError(f"{what}: beta = {beta!r} scales C, which is out's contents (D = "
                         "alpha * (a @ b) + beta * C is written over it, as cuBLAS does); "
                         "give out, or beta = 0")
    if out_dtype is not None and out_dtype not in out_types:
        raise TypeError(f"{what}: out_dtype is torch.bfloat16 or torch.float32 (or None: "
                        f"out's dtype, else bf16), got {out_dtype}")
    if out is not None:
        host.require_tensor(what, "out", out)
        if out_dtype is not None and out.dtype != out_dtype:
            raise ValueError(f"{what}: out has dtype {out.dtype} but out_dtype is {out_dtype}; "
                             "give one of them, or the same")
        host.require_out(what, out, (m, n), out.dtype)
        host.require_dtype(what, "out", out, out_types)
        host.require_no_overlap(what, out, tensors)
        if residual is not None and not _same_view(residual, out):
            host.require_no_overlap(what, out, {"residual": residual})
        tensors["out"] = out
    if residual is not None:
        tensors["residual"] = residual
    host.require_one_cuda_device(what, tensors, cuda)
    return m, n, k


def _same_view(x, y) -> bool:
    """x and y are the same elements in the same order (a residual that is out itself is read
    by the thread that overwrites it, element by element)."""
    return x.data_ptr() == y.data_ptr() and x.stride() == y.stride() and x.dtype == y.dtype \
        and not x.is_meta


def gemm(a, b, out=None, config: Config | None = None, *, bias=None, activation=None,
         residual=None, alpha=1.0, beta=0.0, out_dtype=None):
    """D = activation(alpha * (a @ b) + beta * C + bias) + residual for bf16 CUDA tensors a
    (M x K) and b (K x N; row-major, i.e. N-major, or K-major such as w.t()), every part but
    a @ b optional: a bias (N,), a residual (M, N) (each bf16 or f32; the residual may be out
    itself), an activation ("relu", "silu", "gelu": torch's tanh approximation), Python
    scalars alpha and beta. C is out's contents when beta != 0 (cuBLAS's semantics: out is
    read, then overwritten; with beta = 0 it is not read, so NaNs there do not propagate).
    All of it runs in f32 in the kernel's epilogue (or the split-K reduction's). Returns D
    (M x N, out_dtype: bf16 (the default) or f32), written into `out` when given (out may not
    overlap a, b or bias). Arguments are checked first (check_inputs); a call of a signature
    that launched before checks only what can differ between the two and launches its plan
    (recipes/_gemm_plans.py)."""
    torch = require_torch("recipes.gemm_hopper.gemm")
    key = plans.signature(torch.Tensor, a, b, out, config, (bias, residual),
                          (activation, type(alpha), alpha == 1, type(beta), beta == 0,
                           out_dtype))
    if key is not None:         # a call of this signature launched before: its plan
        done = plans.launch(key, torch, a, b, out, (bias, residual), (alpha, beta))
        if done is not None:
            return done
    out_given = out is not None
    m, n, k = check_inputs(a, b, out, config, bias, activation, residual, alpha, beta,
                           out_dtype)
    if out is None:
        out = torch.empty(m, n, device=a.device, dtype=out_dtype or torch.bfloat16)
    if m == 0 or n == 0:
        return out
    epilogue = epilogue_of(out, bias, activation, residual, alpha, beta)
    if k == 0 and not epilogue:
        return out.zero_()
    steps, c = launches(a, b, out, config, epilogue, bias, residual, alpha, beta,
                        _sm_count(a.device), lambda cfg, major: _resident_units(a.device, cfg,
                                                                                major))
    for kernel, grid, args, constexprs in steps:
        kernel[grid](*args, **constexprs)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c)
    plans.remember(key, steps, c, a, b, out, out_given, (bias, residual),
                   functools.partial(_epilogue_arguments, epilogue), tma_inputs=(1,),
                   aliased=1)
    return out


def _epilogue_arguments(epilogue, out, inputs: tuple, scalars: tuple) -> list:
    """A plan's arguments after a, b, C (recipes/_gemm_plans.py): the epilogue's of out, (bias,
    residual) and (alpha, beta)."""
    (bias, residual), (alpha, beta) = inputs, scalars
    m, n = out.shape
    return plans.epilogue_arguments(epilogue, out, bias, residual, alpha, beta, m, n)


def epilogue_of(out, bias, activation, residual, alpha, beta) -> Epilogue:
    """The Epilogue of gemm's (checked) arguments."""
    def element(x):
        return TYPES[_dtype_name(x.dtype)]
    return Epilogue(c=element(out) if beta != 0 else None,
                    bias=None if bias is None else element(bias),
                    activation=None if activation is None else ACTIVATIONS[activation],
                    residual=None if residual is None else element(residual),
                    scaled=alpha != 1)


def launches(a, b, out, config, epilogue: Epilogue, bias, residual, alpha, beta, sms: int,
             units, full_grid: bool = True) -> tuple[list, object]:
    """gemm's kernel launches for checked arguments (M, N > 0; out allocated): a list of
    (kernel, grid, args, constexprs) to run in order, and the buffer C lands in (out itself,
    or a TMA-ready one to copy into out). `sms` picks the config when `config` is None;
    `units(cfg, major)` is the scheduling units resident at once: the persistent grid, or
    with `full_grid` False at most one unit per tile (a grid, and so a specialization, per
    problem size; the benchmark's ablation)."""
    import torch
    (m, k), n = a.shape, b.shape[1]
    if k == 0:                 # the kernel needs a k-step: one of zeros (TMA fills past K)
        a, b, k = a.new_zeros(m, 1), b.new_zeros(1, n), 1
    a = _tma_ready(a)
    if b.stride(1) == 1 or n == 1:
        major, b_op = "N", _tma_ready(b)           # K x N, N contiguous
    else:
        major, b_op = "K", _tma_ready(b.t())       # N x K, K contiguous (b stored K-major)
    c_type = TYPES[_dtype_name(out.dtype)]
    cfg = config or TUNER.choose((m, n, k, major, sms, _device_name(a.device)))
    if cfg.SWAP:                # C from registers (masked stores: out as it is), one launch
        grid = units(cfg, major)
        if not full_grid:
            grid = min(grid, -(-n // cfg.BM) * -(-m // cfg.BN))
        extra = plans.epilogue_arguments(epilogue, out, bias, residual, alpha, beta, m, n)
        return [(kernel_for(cfg.BM, 1, False, c_type, epilogue, swap=True, parts=cfg.SPLIT_K),
                 (grid,),
                 (a, b_op, out, *extra),
                 dict(GRID=grid, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
                      TOKEN_TILES=-(-m // cfg.BN)))], out
    # the kernel's TMA stores, the columns of C (holding out's values where beta reads them)
    c_stored, c = host.tma_output(out, keep=epilogue.c is not None)
    plan = host.schedule(m, n, k, cfg, lk.bf16, units(cfg, major), full_grid)
    c_in = out
    if plan.split_k == 1 and epilogue.staged(c_type) is not None:   # the kernel TMAs it
        if epilogue.c is not None and c is not out:
            c_in = c_stored         # out's contents, TMA-ready (tma_output): C read where D goes
        if epilogue.staged(c_type) == "residual":
            residual = _tma_ready(residual)
    extra = plans.epilogue_arguments(epilogue, c_in, bias, residual, alpha, beta, m, n)
    constexprs = dict(GRID=plan.grid, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
                      GROUP_M=plan.group, CLUSTER=cfg.CLUSTER)
    if plan.split_k > 1:
        ws_stored, ws = plans.workspace(torch, a.device, plan.split_k * plan.slab_rows,
                                        _round_up(n, host.F32_ALIGN), n)
        return [(kernel_for(cfg.BM, cfg.CLUSTER, True, lk.f32, Epilogue()), (plan.grid,),
                 (a, b_op, ws_stored), dict(constexprs, SPLIT_K=plan.split_k)),
                (reduce_kernel(c_type, epilogue), reduce_grid(m, n), (ws, c, *extra),
                 dict(SPLITS=plan.split_k))], c
    if cfg.BM == CONSUMERS * WG_ROWS and c_type == lk.bf16 and not epilogue:
        kernel = KERNELS[cfg.CLUSTER]
    else:
        kernel = kernel_for(cfg.BM, cfg.CLUSTER, False, c_type, epilogue)
    return [(kernel, (plan.grid,), (a, b_op, c_stored, *extra), constexprs)], c


def compile_default() -> dict[str, str]:
    """PTX of the default config for both B layouts (a 4096^3 problem's specialization)."""
    T = lk.TensorSpec(lk.bf16, (4096, 4096))
    cfg = CONFIGS[0]
    return {f"gemm_{major}major_{cfg.BM}x{cfg.BN}x{ATOM_K}_s{cfg.STAGES}_c{cfg.CLUSTER}":
            KERNELS[cfg.CLUSTER].ptx(T, T, T, GRID=132, B_MAJOR=major, BN=cfg.BN,
                                     STAGES=cfg.STAGES, GROUP_M=cfg.GROUP_M,
                                     CLUSTER=cfg.CLUSTER)
            for major in ("N", "K")}


def check(seed: int = 0) -> float:
    """Random bf16 problems (ragged, tiny, both B layouts, every config) against torch in
    float64; returns the worst relative error (AssertionError beyond bf16 tolerance)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [(1, 1, 1), (7, 13, 5), (128, 256, 64), (200, 136, 72), (129, 300, 1000),
              (1000, 520, 264), (256, 1024, 4096), (333, 257, 129)]
    worst = 0.0
    for i, (m, n, k) in enumerate(shapes):
        for kmajor in (False, True):
            a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
            b = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
            if kmajor:
                b = b.t().contiguous().t()
            cfg = CONFIGS[i % len(CONFIGS)]
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            got = gemm(a, b, out=out, config=cfg).double()
            want = a.double() @ b.double()
            err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
            assert err < 1e-2, (f"gemm {m}x{n}x{k} ({'K' if kmajor else 'N'}-major B, {cfg}): "
                                f"relative error {err:.3g}")
            worst = max(worst, err)
    return worst


def check_cpu(seed: int = 0) -> float:
    """Run the kernel on the CPU interpreter (layoutkit.dsl.interpreter.check_on_cpu: TMA,
    wgmma, the mbarrier ring and warp roles executed with race checking) on small ragged
    problems, B N-major and K-major, rows padded to 8 elements as gemm() pads them, a
    persistent CTA taking two tiles; compares with numpy in float64 and returns the worst
    error relative to the largest |C| (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)

    def padded(x):                       # TMA rows: 16-byte multiples (as _tma_ready pads)
        out = np.zeros((x.shape[0], _round_up(x.shape[1], ALIGN_ELEMENTS)), np.uint16)
        out[:, :x.shape[1]] = x
        return out
    worst = 0.0
    for (m, n, k), major, grid, cfg in (((130, 72, 100), "N", 1, CONFIGS[1]),
                                        ((64, 136, 64), "K", 2, CONFIGS[1]),
                                        ((200, 40, 72), "N", 2, CONFIGS[0])):
        a = to_bf16(rng.standard_normal((m, k)))
        b = to_bf16(rng.standard_normal((k, n)))
        want = np.zeros((m, _round_up(n, ALIGN_ELEMENTS)))
        want[:, :n] = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
        b_t = b if major == "N" else b.T
        a_op, b_op = padded(a)[:, :k], padded(b_t)[:, :b_t.shape[1]]     # views, as gemm() has
        c = np.zeros(want.shape, np.uint16)[:, :n]
        plan = host.schedule(m, n, k, cfg, lk.bf16, grid // cfg.CLUSTER)
        worst = max(worst, check_on_cpu(
            KERNELS[cfg.CLUSTER], (grid,), a_op, b_op, c, GRID=grid, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
            GROUP_M=plan.group, CLUSTER=cfg.CLUSTER, expect={"c": want[:, :n]},
            tolerance=2 ** -7))
    return worst


# The shapes `layoutkit tune gemm_hopper` sweeps: issue 15's grid of M by the (N, K) of model
# layers, and the square ones.
TUNE_SHAPES = tuple((m, n, k) for m in (1, 16, 64, 128, 256, 512, 1024, 4096, 16384)
                    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))) + (
    (1024, 1024, 1024), (2048, 2048, 2048), (8192, 8192, 8192))


def tune(reps: int = 20, shapes=TUNE_SHAPES, majors=("N", "K")) -> list[dict]:
    """`layoutkit tune gemm_hopper`: time autotune_space on the GPU for each shape and B major
    (random bf16 inputs) and keep each winner on disk (TUNER), where gemm's later calls of that
    shape, in any process, find it; a row per shape with the winner and the default's time."""
    import torch
    rows = []
    sms = _sm_count(torch.device("cuda", torch.cuda.current_device()))
    TUNER.reps = reps
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        for major in majors:
            b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
            if major == "K":
                b = b.t().contiguous().t()
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            units = (lambda cfg, mj: _resident_units(a.device, cfg, mj))
            space = autotune_space(m, n, k, sms)
            candidates = {cfg: launches(a, b, out, cfg, Epilogue(), None, None, 1.0, 0.0, sms,
                                        units)[0] for cfg in space}
            key = (m, n, k, major, sms, _device_name(a.device))
            best = TUNER.tune(key, candidates)
            times = {c: ms for c, ms in TUNER.report.items() if isinstance(ms, float)}
            default = str(config_for(m, n, k, sms))
            rows.append({"case": f"{m}x{n}x{k} {major}-major", "best": str(best),
                         "best_ms": times[str(best)],
                         "default_ms": times.get(default, float("nan")),
                         "configs": len(TUNER.report),
                         "dropped": len(TUNER.report) - len(times)})
    return rows


def benchmark(reps: int = 30) -> list[dict]:
    """bf16 GEMM TFLOP/s against torch.matmul (cuBLAS), interleaved, L2 flushed per call."""
    import torch

    from layoutkit.tools.benchmarking import interleaved, tflops
    rows = []
    print(f"{'M x N x K':>18} {'B':>7} {'layoutkit':>10} {'cuBLAS':>8} {'ratio':>6}  (TFLOP/s)")
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024)):
        for kmajor in (False, True):
            a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
            if kmajor:
                b = b.t().contiguous().t()
            times = interleaved({"layoutkit": lambda: gemm(a, b),
                                 "cuBLAS": lambda: torch.matmul(a, b)}, reps=reps)
            ours, theirs = (tflops(2 * m * n * k, times[x].median_ms)
                            for x in ("layoutkit", "cuBLAS"))
            tag = "K-major" if kmajor else "N-major"
            rows.append({"case": f"{m}x{n}x{k} {tag}", "layoutkit_tflops": ours,
                         "cublas_tflops": theirs, "speedup": ours / theirs})
            print(f"{f'{m}x{n}x{k}':>18} {tag:>7} {ours:10.1f} {theirs:8.1f} {ours / theirs:6.3f}")
    return rows
