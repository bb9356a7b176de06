"""bf16 GEMM on the portable sm_80 matrix path: C = A @ B with A (M, K) row-major, B (K, N)
row-major (or K-major: B.t() of a contiguous (N, K) tensor), f32 accumulation, C (M, N) bf16
row-major. cp.async fills a ring of swizzled shared tiles, ldmatrix feeds mma.sync m16n8k16.

Pipeline (one block per BM x BN tile of C; K in BK-wide k-tiles; a STAGES-deep ring):

    prologue:  cp.async k-tiles 0 .. S-2 -> stages 0 .. S-2          (one commit group each)
    for i in 0 .. ceil(K / BK) - 1:
        cp.async.wait_group S-2 ; bar.sync     k-tile i landed (every thread's copies) and
                                               every warp is done with stage (i - 1) % S
        cp.async k-tile i+S-1 -> stage (i+S-1) % S ; commit   (zero-filled past K: no reads)
        for kk in 0 .. BK/16 - 1:              on stage i % S
            ldmatrix.x4 (A, rows k-contiguous) ; ldmatrix.x4.trans (B, rows n-contiguous)
            mma.sync.m16n8k16 for each of the warp's RM x RN atoms
    epilogue:  f32 -> bf16, st.global masked at the M and N edges

    stage ring:   [ s0 | s1 | s2 | s3 ]   copies run S-1 k-tiles ahead of the mma.sync

Layouts (all with the algebra, visibly): the mma.sync fragments of lk.sm80.mma_sync_layouts tiled
over WM x WN warps (each warp RM x RN atoms: a 16*RM x 8*RN warp tile) by `tile_atom`; the
shared tiles row-major in their contiguous mode under Sw<B,3,3> (16-byte chunks XORed with the
row bits: conflict-free for the 16-byte cp.async writes and the ldmatrix row reads; the DSL
records the worst conflict of each access in the IR, and the tests check it is 1).

Constraints: CUDA bf16 tensors, a contiguous, b contiguous or a transposed contiguous tensor.
Ragged M, N, K are correct (zero-filled copies, masked stores). 16-byte copies need K (and N
for row-major B) to be multiples of 16 elements and 16-byte aligned pointers; otherwise the
copies narrow (odd extents: synchronous 2-byte copies) - correct, slower.
"""
from __future__ import annotations

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch

# BM x BN x BK tiles, WM x WN warps (warp tile BM/WM x BN/WN), STAGES-deep ring
CONFIGS = {
    "128x128x32 w8": {"BM": 128, "BN": 128, "BK": 32, "WM": 2, "WN": 4, "STAGES": 4},
    "128x256x32 w8": {"BM": 128, "BN": 256, "BK": 32, "WM": 2, "WN": 4, "STAGES": 4},
    "128x128x64 w8": {"BM": 128, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "STAGES": 3},
    "128x128x32 w4": {"BM": 128, "BN": 128, "BK": 32, "WM": 2, "WN": 2, "STAGES": 4},
}
DEFAULT = "128x128x32 w8"
CHUNK = 8               # bf16 elements per 16-byte copy


def tile_atom(atom: lk.TVLayout, tile: tuple, warps: lk.Layout, repeats: lk.Layout):
    """The mma fragment `atom` tiled over a block tile (column-major index): lanes as in the
    atom, warps placed by `warps` and each warp's atom repeated by `repeats` (Layouts from warp
    / repeat coordinates to tile indices)."""
    embed = lk.Layout(atom.tile, (1, tile[0]))           # atom coordinate -> tile index
    lanes_values = lk.composition(embed, atom.layout)
    return lk.TVLayout(tile, lk.make_layout(lk.make_layout(lanes_values[0], warps),
                                            lk.make_layout(lanes_values[1], repeats)))


def mma_layouts(BM: int, BN: int, WM: int, WN: int) -> tuple:
    """TV layouts of the A k-step (BM, 16), B k-step (BN, 16) and accumulator (BM, BN)."""
    atoms = lk.sm80.mma_sync_layouts("m16n8k16", lk.bf16, lk.f32)
    RM, RN = BM // (16 * WM), BN // (8 * WN)
    a = tile_atom(atoms.a, (BM, 16), lk.Layout((WM, WN), (16 * RM, 0)), lk.Layout(RM, 16))
    b = tile_atom(atoms.b, (BN, 16), lk.Layout((WM, WN), (0, 8 * RN)), lk.Layout(RN, 8))
    c = tile_atom(atoms.c, (BM, BN), lk.Layout((WM, WN), (16 * RM, 8 * RN * BM)),
                  lk.Layout((RM, RN), (16, 8 * BM)))
    return a, b, c


def copy_layout(tile: tuple, contiguous: int, threads: int) -> lk.TVLayout:
    """Each thread copies CHUNK consecutive elements along mode `contiguous` of `tile`; threads
    walk that mode first, then the other one; repeats cover the rest of the tile."""
    stride_c, stride_o = (1, tile[0]) if contiguous == 0 else (tile[0], 1)
    per_line = tile[contiguous] // CHUNK
    lines = threads // per_line
    repeats = tile[1 - contiguous] // lines
    return lk.TVLayout(tile, lk.Layout(((per_line, lines), (CHUNK, repeats)),
                                       ((CHUNK * stride_c, stride_o),
                                        (stride_c, lines * stride_o))))


def ring_k_major(rows: int, BK: int, stages: int):
    """A ring of `stages` (rows, BK) tiles, each row BK contiguous elements (coordinates
    (row, (k, stage))), under Sw<log2(BK/8),3,3>: the 16-byte chunk index XORed with the row
    bits above the 128-byte line, so 8 consecutive rows at one chunk hit 8 bank groups."""
    inner = lk.Layout((rows, (BK, stages)), (BK, (1, rows * BK)))
    return lk.ComposedLayout(lk.Swizzle((BK // CHUNK).bit_length() - 1, 3, 3), 0, inner)


def ring_row_major(cols: int, BK: int, stages: int):
    """A ring of `stages` (cols, BK) tiles stored as BK rows of contiguous columns, in 64-column
    (128-byte) halves (coordinates ((col, half), (k, stage))), under Sw<3,3,3>: the chunk
    index XORed with the k row, so 8 consecutive k rows at one chunk hit 8 bank groups."""
    inner = lk.Layout(((64, cols // 64), (BK, stages)), ((1, 64 * BK), (64, cols * BK)))
    return lk.ComposedLayout(lk.Swizzle(3, 3, 3), 0, inner)


def _gemm_body(a: lk.Pointer[lk.bf16], b: lk.Pointer[lk.bf16], c: lk.Pointer[lk.bf16],
               m: lk.i32, n: lk.i32, k: lk.i32, BM: lk.constexpr, BN: lk.constexpr,
               BK: lk.constexpr, WM: lk.constexpr, WN: lk.constexpr, STAGES: lk.constexpr,
               B_KMAJOR: lk.constexpr):
    threads = 32 * WM * WN
    tv_a, tv_b, tv_c = mma_layouts(BM, BN, WM, WN)
    copy_a = copy_layout((BM, BK), 1, threads)
    copy_b = copy_layout((BN, BK), 1 if B_KMAJOR else 0, threads)
    A = lk.global_tensor(a, lk.Layout((m, k), (k, 1)))
    B = lk.global_tensor(b, lk.Layout((n, k), (k, 1) if B_KMAJOR else (1, n)))  # (n, k) view
    C = lk.global_tensor(c, lk.Layout((m, n), (n, 1)))
    sa = lk.shared_tensor(ring_k_major(BM, BK, STAGES), lk.bf16)
    sb = lk.shared_tensor(ring_k_major(BN, BK, STAGES) if B_KMAJOR else
                          ring_row_major(BN, BK, STAGES), lk.bf16)
    bm, bn = lk.block_id(0), lk.block_id(1)

    def issue(tile, stage):
        """cp.async k-tile `tile` of A and B into ring stage `stage`, one commit group."""
        lk.sm80.cp_async(sa.tile((BM, BK), (0, stage)).partition(copy_a),
                         A.tile((BM, BK), (bm, tile)).partition(copy_a))
        lk.sm80.cp_async(sb.tile((BN, BK), (0, stage)).partition(copy_b),
                         B.tile((BN, BK), (bn, tile)).partition(copy_b))
        lk.sm80.cp_async_commit()

    for s in range(STAGES - 1):
        issue(s, s)
    loop = lk.range(0, (k + BK - 1) // BK, carry=(lk.full(tv_c, 0.0, lk.f32),))
    for i, (acc,) in loop:
        lk.sm80.cp_async_wait(STAGES - 2)
        lk.barrier()
        issue(i + STAGES - 1, (i + STAGES - 1) % STAGES)
        stage_a = sa.tile((BM, BK), (0, i % STAGES))
        stage_b = sb.tile((BN, BK), (0, i % STAGES))
        for kk in range(BK // 16):
            fa = lk.sm80.ldmatrix(stage_a.tile((BM, 16), (0, kk)).partition(tv_a))
            fb = lk.sm80.ldmatrix(stage_b.tile((BN, 16), (0, kk)).partition(tv_b))
            acc = lk.sm80.mma_sync(acc, fa, fb)
        loop.next(acc)
    (acc,) = loop.results
    lk.sm80.cp_async_wait(0)
    lk.store(C.tile((BM, BN), (bm, bn)).partition(tv_c), lk.cast(acc, lk.bf16))


_KERNELS: dict = {}


def kernel_for(num_warps: int) -> lk.Kernel:
    """The GEMM kernel compiled for blocks of num_warps warps (one Kernel per block size)."""
    if num_warps not in _KERNELS:
        body = type(_gemm_body)(_gemm_body.__code__, _gemm_body.__globals__,
                                f"mma_gemm_w{num_warps}")
        body.__annotations__ = _gemm_body.__annotations__
        _KERNELS[num_warps] = lk.kernel(body, num_warps=num_warps)
    return _KERNELS[num_warps]


def _launch_args(m: int, n: int, config: str, b_kmajor: bool):
    cfg = CONFIGS[config]
    kernel = kernel_for(cfg["WM"] * cfg["WN"])
    grid = ((m + cfg["BM"] - 1) // cfg["BM"], (n + cfg["BN"] - 1) // cfg["BN"])
    return kernel, grid, dict(cfg, B_KMAJOR=b_kmajor)


def _is_kmajor(b) -> bool:
    """b (K, N) is the transpose of a contiguous (N, K) tensor."""
    return b.dim() == 2 and b.stride() == (1, b.shape[0])


def gemm(a, b, out=None, config: str = DEFAULT):
    """a @ b for CUDA bf16 tensors a (M, K) contiguous and b (K, N) contiguous or K-major
    (b.t() contiguous), accumulated in f32; returns a new (M, N) bf16 tensor (or fills `out`,
    a contiguous (M, N) bf16 tensor)."""
    torch = require_torch("recipes.mma_gemm.gemm")
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or not x.is_cuda or \
                x.dim() != 2:
            raise ValueError(f"gemm: {name} must be a 2-D CUDA bfloat16 tensor, got "
                             f"{type(x).__name__} {getattr(x, 'dtype', '')} "
                             f"{tuple(getattr(x, 'shape', ()))}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"gemm: a is {m}x{k} but b is {k2}x{n}; the inner extents differ")
    if not a.is_contiguous():
        raise ValueError("gemm: a must be contiguous (row-major M x K)")
    kmajor = _is_kmajor(b) and not b.is_contiguous()
    if not (b.is_contiguous() or kmajor):
        raise ValueError("gemm: b must be contiguous (row-major K x N) or the transpose of a "
                         "contiguous N x K tensor")
    if config not in CONFIGS:
        raise ValueError(f"gemm: config {config!r} is not one of {', '.join(CONFIGS)}")
    if out is None:
        out = torch.empty(m, n, device=a.device, dtype=torch.bfloat16)
    elif out.shape != (m, n) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"gemm: out must be a contiguous bf16 ({m}, {n}) tensor")
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    kernel, grid, constexprs = _launch_args(m, n, config, kmajor)
    kernel[grid](a, b, out, m, n, k, **constexprs)
    return out


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx} for each config with B
    row-major and the default config with B K-major, 16-aligned extents."""
    ptr = lk.Pointer[lk.bf16]
    result = {}
    for config in CONFIGS:
        for kmajor in ((False, True) if config == DEFAULT else (False,)):
            kernel, _, constexprs = _launch_args(4096, 4096, config, kmajor)
            name = f"mma_gemm {config}" + (" B K-major" if kmajor else "")
            result[name] = kernel.ptx(ptr, ptr, ptr, 4096, 4096, 4096, **constexprs)
    return result


CHECK_SHAPES = ((1, 1, 1), (1, 8, 16), (7, 5, 3), (16, 8, 16), (33, 17, 9), (64, 64, 64),
                (100, 130, 70), (128, 128, 32), (129, 257, 31), (256, 384, 512),
                (300, 200, 1000), (1000, 1000, 96), (77, 4096, 48), (512, 24, 4000))


def check(shapes=CHECK_SHAPES, seed: int = 0) -> float:
    """Run on random inputs (every config, B row-major and K-major) and compare with torch in
    float64; returns the worst error relative to the largest |C| of its shape (AssertionError
    beyond bf16 rounding of the output plus f32 accumulation)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    worst = 0.0
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b_rows = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
        want = a.double() @ b_rows.double()
        scale = want.abs().max().item() or 1.0
        for config in CONFIGS:
            for b in (b_rows, b_rows.t().contiguous().t()):
                got = gemm(a, b, config=config).double()
                err = (got - want).abs().max().item() / scale
                assert err < 2 ** -7, (f"gemm {m}x{n}x{k} ({config}, b strides {b.stride()}): "
                                       f"relative error {err:.3g} over bf16 tolerance")
                worst = max(worst, err)
    return worst


def check_cpu(seed: int = 0) -> float:
    """Run the kernel on the CPU interpreter (layoutkit.dsl.interpreter.check_on_cpu, race
    checking on) for small ragged problems, B row-major and K-major, and compare with numpy in
    float64; returns the worst error relative to the largest |C| (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for (m, n, k), kmajor in (((40, 72, 40), False), ((33, 20, 24), True)):    # ring, ragged
        a, b = to_bf16(rng.standard_normal((m, k))), to_bf16(rng.standard_normal((k, n)))
        want = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
        kernel, grid, constexprs = _launch_args(m, n, DEFAULT, kmajor)
        worst = max(worst, check_on_cpu(kernel, grid, a, b.T.copy() if kmajor else b,
                                        np.zeros((m, n), np.uint16), m, n, k,
                                        expect={"c": want}, tolerance=2 ** -7, **constexprs))
    return worst


BENCH_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (4096, 4096, 1000))


def benchmark(shapes=BENCH_SHAPES, configs=tuple(CONFIGS), reps: int = 30) -> list:
    """Time every config against torch.matmul (cuBLAS) on the same random bf16 inputs,
    interleaved, L2 flushed between calls, medians (layoutkit.tools.benchmarking); prints and
    returns the table rows (TFLOP/s = 2 M N K / time)."""
    import torch
    from layoutkit.tools.benchmarking import interleaved, tflops
    rows = []
    print(f"{'M x N x K':>20} {'config':>15} {'layoutkit':>10} {'cuBLAS':>8} {'ratio':>6}"
          "   (TFLOP/s, medians)")
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        outs = {config: torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                for config in configs}
        candidates = {config: (lambda c=config: gemm(a, b, outs[c], config=c))
                      for config in configs}
        candidates["cuBLAS"] = lambda: torch.matmul(a, b)
        times = interleaved(candidates, reps=reps)
        flops = 2.0 * m * n * k
        theirs = tflops(flops, times["cuBLAS"].median_ms)
        for config in configs:
            ours = tflops(flops, times[config].median_ms)
            rows.append({"m": m, "n": n, "k": k, "config": config, "layoutkit_tflops": ours,
                         "cublas_tflops": theirs, "ratio": ours / theirs})
            print(f"{f'{m} x {n} x {k}':>20} {config:>15} {ours:10.1f} {theirs:8.1f} "
                  f"{ours / theirs:6.2f}")
    return rows


if __name__ == "__main__":
    print(f"max relative error {check():.3g}")
    benchmark()
