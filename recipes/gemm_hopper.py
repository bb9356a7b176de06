"""Warp-specialized bf16 GEMM for Hopper: C = A @ B, bf16 in, f32 accumulate, bf16 out.

A is M x K row-major; B is K x N, either N-major (row-major, strides (N, 1)) or K-major (strides
(1, K), e.g. `w.t()` of a row-major N x K weight). The kernel is recipes/_gemm_kernel.py's
pipeline (shared with recipes/gemm_fp8.py), every line of it visible there:

    persistent grid: min(#SMs, #tiles) CTAs; CTA j takes output tiles j, j + grid, ... in a
    grouped order (GROUP_M tile-rows at a time, so concurrent CTAs share A and B tiles in L2)

    warpgroup 0, producer (40 registers): one elected thread, per tile and k-step:
        wait empty[s] (phase from the ring counter) -> expect_tx(full[s]) { TMA A tile, TMA B tile }
    warpgroups 1, 2, consumers (232 registers), each owning 64 rows of the BM=128-row tile:
        per k-step: wait full[s] -> wgmma 64 x BN x BK (4 x k16) -> commit -> wait_group 1
                    (the previous k-step's wgmma is done) -> arrive empty[previous s]
        epilogue:   wait_group 0, release the last stage; f32 -> bf16 into the warpgroup's
                    swizzled half of the C tile in shared memory; fence.proxy.async; named
                    barrier over the warpgroup; one thread TMA-stores it (clipped at M, N)

The stage/phase of both sides come from one counter, `tile_iteration * K_TILES + k`, through
lk.sm90.producer_state / lk.sm90.consumer_state (layoutkit.sync.PipelineState's rules). Ragged
M, N, K are exact through TMA bounds: loads past the edge fill zeros (which add nothing to the
dot products) and stores past the edge are dropped. TMA needs 16-byte aligned rows: a K (or N)
whose rows are not a multiple of 8 elements is padded on the host (a copy; documented cost).

Config (constexprs): BM x BN tile (BK = 64, one 128-byte row), STAGES ring depth, GROUP_M
raster, CLUSTER; `autotune_space` lists the sweep, `BEST_CONFIGS` records the winners measured
on the H200 (benchmarks/bench_gemm.py --sweep), `config_for(m, n, k)` picks one. `gemm` checks
its arguments first (`check_inputs`: types, ranks, dtypes, shapes, config, out and its overlap
with the inputs, devices), each mistake a TypeError or ValueError naming it.

Fused epilogue: `gemm(a, b, bias=..., activation=...)` runs `fused_kernel`, whose epilogue
(recipes/_epilogues.py) adds the bias (N,) and applies relu, silu or gelu (tanh approximation)
to each f32 accumulator chunk before the cast to bf16: one extra load per column of a thread's
fragment and the activation's arithmetic, no extra pass over C.
"""
import functools

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _gemm_host as host
from recipes._epilogues import ACTIVATIONS, fused
from recipes._gemm_kernel import WARPS, Config, gemm_tiles, row_elements

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


@functools.cache
def fused_kernel(bias_type, act, cluster: int):
    """The kernel whose epilogue is act(acc + bias) (recipes/_epilogues.py): `bias_type` the
    bias's element type (lk.bf16, lk.f32; the bias an (M, N) view of strides (0, 1)) or None
    for no bias, `act` an activation function or None; clusters of `cluster` CTAs."""
    if bias_type is None:
        def gemm_fused(a: lk.Tensor[lk.bf16, 2], b: lk.Tensor[lk.bf16, 2],
                       c: lk.Tensor[lk.bf16, 2], GRID: lk.constexpr, B_MAJOR: lk.constexpr,
                       BN: lk.constexpr, STAGES: lk.constexpr, GROUP_M: lk.constexpr,
                       CLUSTER: lk.constexpr):
            """C = act(A @ B) (module docstring; fused_kernel)."""
            gemm_tiles(a, b, c, GRID=GRID, B_MAJOR=B_MAJOR, BN=BN,
                       STAGES=STAGES, GROUP_M=GROUP_M, CLUSTER=CLUSTER,
                       epilogue=fused(None, act))
    else:
        def gemm_fused(a: lk.Tensor[lk.bf16, 2], b: lk.Tensor[lk.bf16, 2],
                       c: lk.Tensor[lk.bf16, 2], bias: lk.Tensor[bias_type, 2],
                       GRID: lk.constexpr, B_MAJOR: lk.constexpr, BN: lk.constexpr, STAGES: lk.constexpr,
                       GROUP_M: lk.constexpr, CLUSTER: lk.constexpr):
            """C = act(A @ B + bias) (module docstring; fused_kernel)."""
            gemm_tiles(a, b, c, GRID=GRID, B_MAJOR=B_MAJOR, BN=BN,
                       STAGES=STAGES, GROUP_M=GROUP_M, CLUSTER=CLUSTER,
                       epilogue=fused(bias, act))
    options = {"cluster": (cluster, 1, 1)} if cluster > 1 else {}
    return lk.kernel(gemm_fused, num_warps=WARPS, **options)


# ---- host side -------------------------------------------------------------------------------
CONFIGS = (Config(BN=256, STAGES=4), Config(BN=256, STAGES=4, CLUSTER=1),
           Config(BN=256, STAGES=3), Config(BN=256, STAGES=4, GROUP_M=16),
           Config(BN=128, STAGES=6))
# The winners of `benchmarks/bench_gemm.py --sweep --kmajor` on the H200 (2026-11-29, commit
# 57f5d44; docs/PERFORMANCE.md), per (M, N, K), both B layouts agreeing; config_for falls back
# to CONFIGS[0] for shapes not listed.
BEST_CONFIGS: dict[tuple[int, int, int], Config] = {
    (4096, 4096, 4096): CONFIGS[0],      # 0.926 (N-major) / 0.938 (K-major) of cuBLAS
    (8192, 8192, 8192): CONFIGS[0],      # 0.933 / 0.935
    (8192, 8192, 1024): CONFIGS[0],      # 0.974 / 0.972
}


def autotune_space(m: int, n: int, k: int) -> list[Config]:
    """The configs a sweep tries for this shape."""
    return list(CONFIGS)


def config_for(m: int, n: int, k: int) -> Config:
    return BEST_CONFIGS.get((m, n, k), CONFIGS[0])


_round_up, _tma_ready = host.round_up, host.tma_ready
_RESIDENT: dict = {}


def _resident_units(device, cfg: Config, major: str) -> int:
    """Scheduling units (CTAs or clusters) of the kernel for `cfg` that run at once on
    `device` (recipes._gemm_host.resident_units)."""
    import torch
    key = (device, cfg, major)
    if key not in _RESIDENT:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        T = lk.TensorSpec(lk.bf16, (4096, 4096))
        _RESIDENT[key] = host.resident_units(
            KERNELS[cfg.CLUSTER], cfg, sms, T, T, T, GRID=sms, B_MAJOR=major,
            BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=cfg.GROUP_M, CLUSTER=cfg.CLUSTER)
    return _RESIDENT[key]


def check_inputs(a, b, out, config, bias=None, activation=None) -> tuple[int, int, int]:
    """Validate gemm's arguments (torch tensors; CPU and meta tensors reach every rule);
    returns (M, N, K). Each mistake is a TypeError (a Python type, a dtype) or a
    ValueError (a shape, the config's fields, an overlap, a device) naming the argument, its
    value and the rule."""
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
    host.check_config(what, config)
    (m, k), n = a.shape, b.shape[1]
    tensors = {"a": a, "b": b}
    if bias is not None:
        host.require_tensor(what, "bias", bias)
        host.require_dtype(what, "bias", bias, (torch.bfloat16, torch.float32))
        if tuple(bias.shape) != (n,):
            raise ValueError(f"{what}: bias has shape {tuple(bias.shape)}; it is one value per "
                             f"column of the result, shape ({n},)")
        tensors["bias"] = bias
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"{what}: activation is None or one of "
                         f"{', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    if out is not None:
        host.require_out(what, out, (m, n), torch.bfloat16)
        host.require_no_overlap(what, out, tensors)
        tensors["out"] = out
    host.require_one_cuda_device(what, tensors)
    return m, n, k


def gemm(a, b, out=None, config: Config | None = None, *, bias=None, activation=None):
    """C = activation(a @ b + bias) for bf16 CUDA tensors a (M x K) and b (K x N; row-major,
    i.e. N-major, or K-major such as w.t()), an optional bias (N,) of bf16 or f32 and an
    optional activation ("relu", "silu", "gelu": torch's tanh approximation), fused into the
    epilogue in f32; returns C (M x N bf16), written into `out` when given (out may not overlap
    an input). Arguments are checked first (check_inputs)."""
    torch = require_torch("recipes.gemm_hopper.gemm")
    m, n, k = check_inputs(a, b, out, config, bias, activation)
    if out is None:
        out = torch.empty(m, n, device=a.device, dtype=torch.bfloat16)
    if m == 0 or n == 0:
        return out
    if k == 0 and bias is None and activation is None:
        return out.zero_()
    if k == 0:                 # the kernel needs a k-step: one of zeros (TMA fills past K)
        a, b, k = a.new_zeros(m, 1), b.new_zeros(1, n), 1
    a = _tma_ready(a)
    if b.stride(1) == 1 or n == 1:
        major, b_op = "N", _tma_ready(b)           # K x N, N contiguous
    else:
        major, b_op = "K", _tma_ready(b.t())       # N x K, K contiguous (b stored K-major)
    c = _tma_ready(out) if out.stride(1) == 1 else _tma_ready(out.new_empty(m, n))
    cfg = config or config_for(m, n, k)
    plan = host.schedule(m, n, k, cfg, lk.bf16, _resident_units(a.device, cfg, major))
    constexprs = dict(GRID=plan.grid, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
                      GROUP_M=plan.group, CLUSTER=cfg.CLUSTER)
    if bias is None and activation is None:
        KERNELS[cfg.CLUSTER][(plan.grid,)](a, b_op, c, **constexprs)
    else:
        act = None if activation is None else ACTIVATIONS[activation]
        bias_type = None if bias is None else {torch.bfloat16: lk.bf16,
                                               torch.float32: lk.f32}[bias.dtype]
        extra = () if bias is None else (bias.expand(m, n),)       # strides (0, stride)
        fused_kernel(bias_type, act, cfg.CLUSTER)[(plan.grid,)](a, b_op, c, *extra,
                                                               **constexprs)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c)
    return out


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
