"""Warp-specialized bf16 GEMM for Hopper: C = A @ B, bf16 in, f32 accumulate, bf16 out.

A is M x K row-major; B is K x N, either N-major (row-major, strides (N, 1)) or K-major (strides
(1, K), e.g. `w.t()` of a row-major N x K weight). The kernel, every line of it visible below:

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
lk.sm90.producer_state / lk.sm90.consumer_state (layoutkit.sync.PipelineState's rules). Ragged M, N,
K are exact through TMA bounds: loads past the edge fill zeros (which add nothing to the dot
products) and stores past the edge are dropped. TMA needs 16-byte aligned rows: a K (or N) whose
rows are not a multiple of 8 elements is padded on the host (a copy; documented cost).

Config (constexprs): BM x BN x BK tile, STAGES ring depth, GROUP_M raster; `autotune_space`
lists the sweep, `BEST_CONFIGS` records the winners measured on the H200 (benchmarks/bench_gemm.py
--sweep), `config_for(m, n, k)` picks one.
"""
from __future__ import annotations

from dataclasses import dataclass

import layoutkit as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.tools.dependencies import require_torch

SW128 = Swizzle(3, 3, 3)      # the 128-byte swizzle on bf16 element offsets
ATOM_K = 64                   # bf16 elements in one 128-byte swizzled row
CONSUMERS = 2                 # consumer warpgroups, 64 rows of the tile each
WG_ROWS = 64                  # rows of one wgmma (m64)
EPILOGUE_N = 128              # the epilogue stores C in column chunks of this width (smem)
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 40, 232


@dataclass(frozen=True)
class Config:
    """One tile configuration: BM x BN output tile, BK per k-step, STAGES in the ring."""

    BN: int = 256
    BK: int = 64
    STAGES: int = 3
    GROUP_M: int = 8
    CLUSTER: int = 2
    BM: int = CONSUMERS * WG_ROWS

    def smem_bytes(self) -> int:
        stage = (self.BM + self.BN) * self.BK * 2
        return self.STAGES * stage + self.BM * min(self.BN, EPILOGUE_N) * 2


def k_major(rows: int, stages: int) -> ComposedLayout:
    """A ring of `stages` rows x 64 tiles, K contiguous, 128-byte swizzle (TMA box {64, rows}):
    the canonical K-major wgmma operand."""
    return ComposedLayout(SW128, 0, Layout((rows, ATOM_K, stages),
                                           (ATOM_K, 1, rows * ATOM_K)))


def n_major(n: int, stages: int) -> ComposedLayout:
    """A ring of 64 (K) x n tiles stored N-major in 64-column chunks of 64 rows x 128 bytes,
    128-byte swizzle: a K x N tile of a row-major B (TMA boxes {64, 64})."""
    return ComposedLayout(SW128, 0, Layout((ATOM_K, (64, n // 64), stages),
                                           (64, (1, 64 * ATOM_K), n * ATOM_K)))


def c_tile(bm: int, bn: int) -> ComposedLayout:
    """The bm x bn output tile in 64-column chunks of bm rows x 128 bytes (TMA store boxes
    {64, 64} per consumer's half)."""
    return ComposedLayout(SW128, 0, Layout((bm, (64, bn // 64)), (64, (1, 64 * bm))))


def gemm_body(a: lk.Tensor[lk.bf16, 2], b: lk.Tensor[lk.bf16, 2], c: lk.Tensor[lk.bf16, 2],
              TILES_M: lk.i32, TILES_N: lk.i32, K_TILES: lk.i32, GRID: lk.constexpr,
              B_MAJOR: lk.constexpr, BN: lk.constexpr, STAGES: lk.constexpr,
              GROUP_M: lk.constexpr, CLUSTER: lk.constexpr):
    """The kernel (see the module docstring): C (M x N) = A (M x K) @ B, with B given as the
    N x K tensor b (B_MAJOR "K": b[n, k]) or the K x N tensor b (B_MAJOR "N": b[k, n]), each
    with its last mode contiguous. CLUSTER = 2: pairs of CTAs along M share each B tile, every
    CTA TMA-multicasting half of it to both (half the L2 traffic for B); a stage is free once
    the consumers of both CTAs released it, so each consumer warp arrives on the empty barrier
    of both."""
    BM, BK = CONSUMERS * WG_ROWS, ATOM_K
    A, B, C = a, b, c
    sB = lk.shared_tensor(k_major(BN, STAGES) if B_MAJOR == "K" else n_major(BN, STAGES),
                          lk.bf16, name="sB")
    sA = lk.shared_tensor(k_major(BM, STAGES), lk.bf16, name="sA")
    EPI = min(BN, EPILOGUE_N)                        # C leaves through smem in EPI-wide chunks
    sC = lk.shared_tensor(c_tile(BM, EPI), lk.bf16, name="sC")
    full = lk.sm90.mbarrier_array(STAGES, 1, name="full")        # own producer's arrive + TMA bytes
    empty = lk.sm90.mbarrier_array(STAGES, CLUSTER * CONSUMERS * 4, name="empty")  # consumer warps
    # cluster kernels: every consumer warp of the cluster arrives once when it is done
    finished = lk.sm90.mbarrier_array(1, CLUSTER * CONSUMERS * 4, name="finished")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full, empty, finished)
        lk.sm90.fence_mbarrier_init()
    if CLUSTER == 1:
        lk.barrier()
        rank, unit = 0, lk.block_id(0)               # a scheduling unit is one CTA
    else:
        lk.sm90.cluster_sync()                            # the peer's barriers are initialised
        rank, unit = lk.sm90.block_rank_in_cluster(), lk.block_id(0) // CLUSTER
    units = GRID // CLUSTER
    pair_rows = (TILES_M + CLUSTER - 1) // CLUSTER   # tile rows in steps of CLUSTER

    def tile_coords(t):
        """Unit tile t in GROUP_M-row groups: (tile row of this CTA, tile column)."""
        per_group = GROUP_M * TILES_N
        row = (t // per_group) * GROUP_M + t % GROUP_M
        return CLUSTER * row + rank, (t % per_group) // GROUP_M

    def b_tile(s):
        return sB[:, :, s] if B_MAJOR == "K" else sB[:, :, s].T

    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=PRODUCER_REGISTERS):
        with lk.if_(lk.eq(lk.warp_id(), 0)):
            for t in lk.range(unit, pair_rows * TILES_N, units):
                tm, tn = tile_coords(t)
                first = (t // units) * K_TILES      # t = unit + j * units, unit < units
                for k in lk.range(0, K_TILES):
                    p = lk.sm90.producer_state(first + k, STAGES)
                    lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                    with lk.sm90.elect_one(), lk.sm90.expect_tx(full[p.stage]):
                        lk.sm90.tma_load(sA[:, :, p.stage], A.tile((BM, BK), (tm, k)),
                                         full[p.stage])
                        b_src = B.tile((BN, BK), (tn, k)) if B_MAJOR == "K" else \
                            B.tile((BK, BN), (k, tn))
                        lk.sm90.tma_load(sB[:, :, p.stage], b_src, full[p.stage],
                                         multicast="x" if CLUSTER > 1 else None)
            if CLUSTER > 1:     # the CTA's shared memory outlives every peer's arrivals
                lk.sm90.mbarrier_wait(finished[0], 0)

    def release(stage):
        """This warp's wgmmas are done reading `stage` (after lk.sm90.wgmma_wait): one arrive per
        CTA of the cluster, cta-scoped (only async-proxy reads to report: a cluster-scoped
        release would cost a MEMBAR.ALL.GPU per arrive, half the GEMM's speed)."""
        with lk.sm90.elect_one():
            if CLUSTER == 1:
                lk.sm90.mbarrier_arrive(empty[stage])
            else:
                for peer in range(CLUSTER):
                    lk.sm90.mbarrier_arrive(empty[stage], cta=peer, scope="cta")

    for wg in range(CONSUMERS):     # one role per consumer warpgroup: wg is a trace-time int
        with lk.sm90.warp_role(f"consumer{wg}", warpgroups=(1 + wg,), registers=CONSUMER_REGISTERS):
            mine = sC.tile((WG_ROWS, EPI), (wg, 0))
            chunk_layout = lk.sm90.wgmma_accumulator_layout(EPI)
            for t in lk.range(unit, pair_rows * TILES_N, units):
                tm, tn = tile_coords(t)
                first = (t // units) * K_TILES
                loop = lk.range(0, K_TILES, carry=(lk.sm90.wgmma_accumulator(BN),))
                for k, (acc,) in loop:
                    s = lk.sm90.consumer_state(first + k, STAGES)
                    lk.sm90.mbarrier_wait(full[s.stage], s.phase)
                    lk.sm90.wgmma_fence()
                    acc = lk.sm90.wgmma(acc, sA[:, :, s.stage].tile((WG_ROWS, BK), (wg, 0)),
                                        b_tile(s.stage), accumulate=k > 0)
                    lk.sm90.wgmma_commit()
                    lk.sm90.wgmma_wait(1)               # the previous k-step's wgmma has finished:
                    with lk.if_(k > 0):            # its stage goes back to the producer(s)
                        release((s.stage + STAGES - 1) % STAGES)
                    loop.next(acc)
                (acc,) = loop.results
                lk.sm90.wgmma_wait(0)
                release((lk.sm90.consumer_state(first, STAGES).stage + K_TILES - 1) % STAGES)
                # epilogue, EPI columns at a time: accumulator values [j*v, (j+1)*v) are
                # columns [j*EPI, (j+1)*EPI) in the EPI-wide accumulator layout (the wgmma
                # accumulator layout repeats every 8 columns), so each chunk is a register view
                per_chunk = chunk_layout.num_values
                for j in range(BN // EPI):
                    chunk = lk.RegisterTensor(lk.f32, chunk_layout,
                                              acc.values[j * per_chunk:(j + 1) * per_chunk])
                    # the previous chunk's TMA store has read sC before it is rewritten
                    with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
                        lk.sm90.tma_store_wait(0)
                    lk.sm90.named_barrier_sync(1 + wg, 128)
                    lk.store(mine.partition(chunk_layout), lk.cast(chunk, lk.bf16))
                    lk.sm90.fence_proxy_async()
                    lk.sm90.named_barrier_sync(1 + wg, 128)
                    with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
                        dst = C.tile((WG_ROWS, EPI), (2 * tm + wg, (BN // EPI) * tn + j))
                        lk.sm90.tma_store(dst, mine)
                        lk.sm90.tma_store_commit()
            with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
                lk.sm90.tma_store_wait(0)
            if CLUSTER > 1:
                with lk.sm90.elect_one():
                    for peer in range(CLUSTER):
                        lk.sm90.mbarrier_arrive(finished[0], cta=peer)


WARPS = 4 * (1 + CONSUMERS)
gemm_kernel = lk.kernel(gemm_body, num_warps=WARPS)
gemm_kernel_cluster2 = lk.kernel(gemm_body, num_warps=WARPS, cluster=(2, 1, 1))
KERNELS = {1: gemm_kernel, 2: gemm_kernel_cluster2}


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
ALIGN_ELEMENTS = 8            # TMA: global addresses and row strides are multiples of 16 bytes


def autotune_space(m: int, n: int, k: int) -> list[Config]:
    """The configs a sweep tries for this shape."""
    return list(CONFIGS)


def config_for(m: int, n: int, k: int) -> Config:
    return BEST_CONFIGS.get((m, n, k), CONFIGS[0])


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _tma_ready(x):
    """x (a 2-D bf16 view) itself when TMA can read it (unit column stride, 16-byte aligned
    address and row stride; a single row's stride is any, so it is made 16-byte aligned in a
    view), else a copy into a buffer whose rows are padded to 8 elements (the padding is never
    read: the kernel's extents stop at x's columns)."""
    import torch
    rows, cols = x.shape
    if x.stride(1) == 1 and x.data_ptr() % 16 == 0:
        if x.stride(0) % ALIGN_ELEMENTS == 0:
            return x
        if rows == 1:
            return x.as_strided((1, cols), (_round_up(cols, ALIGN_ELEMENTS), 1))
    buf = torch.empty(rows, _round_up(cols, ALIGN_ELEMENTS), device=x.device, dtype=x.dtype)
    buf[:, :cols] = x
    return buf[:, :cols]


_RESIDENT: dict = {}


def _resident_units(device, cfg: Config, major: str) -> int:
    """Scheduling units (CTAs, or clusters of cfg.CLUSTER CTAs) that run at once: the SM count,
    or for clusters what cuOccupancyMaxActiveClusters allows (GPCs need not hold a whole number
    of clusters; a persistent grid larger than what is resident would run in two waves)."""
    import torch
    key = (device, cfg, major)
    if key not in _RESIDENT:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        if cfg.CLUSTER == 1:
            _RESIDENT[key] = sms
        else:
            T = lk.TensorSpec(lk.bf16, (4096, 4096))
            spec = KERNELS[cfg.CLUSTER].specialize(
                T, T, T, 32, 16, 64, GRID=sms, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
                GROUP_M=cfg.GROUP_M, CLUSTER=cfg.CLUSTER)
            _RESIDENT[key] = spec.compiled.max_active_clusters(
                WARPS * 32, spec.ir.shared_bytes, (cfg.CLUSTER, 1, 1))
    return _RESIDENT[key]


def gemm(a, b, out=None, config: Config | None = None):
    """C = a @ b for bf16 CUDA tensors a (M x K) and b (K x N; row-major, i.e. N-major, or
    K-major such as w.t()); returns C (M x N bf16), written into `out` when given."""
    torch = require_torch("recipes.gemm_hopper.gemm")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm: a is M x K and b is K x N, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or not (a.is_cuda and b.is_cuda):
        raise ValueError(f"gemm: a and b are bf16 CUDA tensors, got {a.dtype} on {a.device} and "
                         f"{b.dtype} on {b.device}")
    (m, k), n = a.shape, b.shape[1]
    if out is None:
        out = torch.empty(m, n, device=a.device, dtype=torch.bfloat16)
    elif tuple(out.shape) != (m, n) or out.dtype != torch.bfloat16 or out.device != a.device:
        raise ValueError(f"gemm: out must be a ({m}, {n}) bf16 tensor on {a.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    a = _tma_ready(a)
    if b.stride(1) == 1 or n == 1:
        major, b_op = "N", _tma_ready(b)           # K x N, N contiguous
    else:
        major, b_op = "K", _tma_ready(b.t())       # N x K, K contiguous (b stored K-major)
    c = _tma_ready(out) if out.stride(1) == 1 else _tma_ready(out.new_empty(m, n))
    cfg = config or config_for(m, n, k)
    tiles_m, tiles_n = -(-m // cfg.BM), -(-n // cfg.BN)
    pair_rows = -(-tiles_m // cfg.CLUSTER)           # tile rows a cluster's CTAs share
    group = next(g for g in (cfg.GROUP_M, 8, 4, 2, 1) if pair_rows % g == 0)
    grid = cfg.CLUSTER * min(_resident_units(a.device, cfg, major), pair_rows * tiles_n)
    KERNELS[cfg.CLUSTER][(grid,)](a, b_op, c, tiles_m, tiles_n, -(-k // ATOM_K), GRID=grid,
                                  B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=group,
                                  CLUSTER=cfg.CLUSTER)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c)
    return out


def compile_default() -> dict[str, str]:
    """PTX of the default config for both B layouts (a 4096^3 problem's specialization)."""
    T = lk.TensorSpec(lk.bf16, (4096, 4096))
    cfg = CONFIGS[0]
    return {f"gemm_{major}major_{cfg.BM}x{cfg.BN}x{cfg.BK}_s{cfg.STAGES}_c{cfg.CLUSTER}":
            KERNELS[cfg.CLUSTER].ptx(T, T, T, 32, 16, 64, GRID=132, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
                                     GROUP_M=cfg.GROUP_M, CLUSTER=cfg.CLUSTER)
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
        tiles_m, tiles_n = -(-m // cfg.BM), -(-n // cfg.BN)
        pair_rows = -(-tiles_m // cfg.CLUSTER)
        group = next(g for g in (cfg.GROUP_M, 8, 4, 2, 1) if pair_rows % g == 0)
        worst = max(worst, check_on_cpu(
            KERNELS[cfg.CLUSTER], (grid,), a_op, b_op, c, tiles_m, tiles_n, -(-k // ATOM_K),
            GRID=grid, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=group,
            CLUSTER=cfg.CLUSTER, expect={"c": want[:, :n]}, tolerance=2 ** -7))
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
