"""Row softmax: y[r, :] = exp(x[r, :] - max_r) / sum(exp(x[r, :] - max_r)), bf16 in and out,
f32 math, for a row-major contiguous (m, n) matrix.

Pipeline (one pass, the whole row lives in registers):

    global --ld.v4.b32--> registers (bf16 -> f32; columns past n read as -inf)
      row max:  in-thread tree -> shfl.bfly over the lanes of the row -> [smem across warps]
      e = exp2(x * log2(e) - max * log2(e))        (one fma + ex2.approx per element)
      row sum:  same reduction tree
      y = e * (1 / sum) -> bf16 --st.v4.b32--> global

Work split, from the row length (the tile is (ROWS, BLOCK_N), BLOCK_N = next power of two >= n):
  BLOCK_N <= 2048: one row per warp, 4 rows per block of 4 warps (shuffles only);
  longer rows: one row per block of min(32, BLOCK_N / 512) warps (shuffles, then the warps'
  partials through shared memory between barriers).
Each lane owns chunks of 8 consecutive columns (16 bytes of bf16), chunks 8 * lanes apart.

Constraints: x is a CUDA bf16 tensor, contiguous, 2-D (or N-D: softmax over the last dim);
1 <= n <= 32768 (longer rows would spill registers). Vector accesses need n % 16 == 0
(other n use scalar, masked accesses: correct, slower).
"""
from __future__ import annotations

import statistics

import layoutkit as lk

LOG2E = 1.4426950408889634
MAX_COLUMNS = 32768
CHUNK = 8                        # bf16 values per 16-byte access
ROW_PER_WARP_MAX = 2048


def config(n: int) -> dict:
    """The tile for rows of n columns: num_warps, ROWS (rows per block), C (consecutive
    columns per access), K (chunks per lane)."""
    if not isinstance(n, int) or not 1 <= n <= MAX_COLUMNS:
        raise ValueError(f"softmax: the row length n = {n!r} must be an int in 1..{MAX_COLUMNS}")
    block_n = max(32, 1 << (n - 1).bit_length())
    chunk = min(CHUNK, block_n // 32)
    if block_n <= ROW_PER_WARP_MAX:
        warps, rows = 4, 4
        threads_per_row = 32
    else:
        warps, rows = min(32, block_n // 512), 1
        threads_per_row = 32 * warps
    return {"num_warps": warps, "ROWS": rows, "C": chunk,
            "K": block_n // (threads_per_row * chunk)}


def row_layout(num_warps: int, ROWS: int, C: int, K: int) -> lk.TVLayout:
    """Thread p of a row owns columns [C*p, C*p + C) + k*C*P (P threads per row); the rows
    of the tile go to consecutive groups of P threads. Tile index = row + ROWS * column."""
    P = 32 * num_warps // ROWS
    return lk.TVLayout((ROWS, P * C * K),
                       lk.Layout(((P, ROWS), (C, K)), ((ROWS * C, 1), (ROWS, ROWS * C * P))))


def _softmax_body(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32, n: lk.i32,
                  WARPS: lk.constexpr, ROWS: lk.constexpr, C: lk.constexpr, K: lk.constexpr):
    tv = row_layout(WARPS, ROWS, C, K)

    def rows_of(ptr):
        matrix = lk.global_tensor(ptr, lk.Layout((m, n), (n, 1)))
        return matrix.tile(tv.tile, (lk.block_id(0), 0)).partition(tv)

    v = lk.cast(lk.load(rows_of(x), other=float("-inf")), lk.f32)
    shift = lk.reduce_max(v, 1) * (-LOG2E)
    e = lk.exp2(lk.fma(v, LOG2E, lk.broadcast(shift, tv)))
    scale = 1.0 / lk.reduce_sum(e, 1)
    lk.store(rows_of(y), lk.cast(e * lk.broadcast(scale, tv), lk.bf16))


_KERNELS: dict = {}


def kernel_for(num_warps: int) -> lk.Kernel:
    """The softmax kernel compiled for blocks of num_warps warps (one Kernel per block size)."""
    if num_warps not in _KERNELS:
        body = type(_softmax_body)(_softmax_body.__code__, _softmax_body.__globals__,
                                   f"softmax_w{num_warps}")
        body.__annotations__ = _softmax_body.__annotations__
        _KERNELS[num_warps] = lk.kernel(body, num_warps=num_warps)
    return _KERNELS[num_warps]


def _arguments(m: int, n: int):
    cfg = config(n)
    k = kernel_for(cfg["num_warps"])
    grid = (m + cfg["ROWS"] - 1) // cfg["ROWS"]
    constexprs = {"WARPS": cfg["num_warps"], "ROWS": cfg["ROWS"], "C": cfg["C"], "K": cfg["K"]}
    return k, grid, constexprs


def softmax(x, out=None):
    """torch.softmax(x, dim=-1) for a contiguous CUDA bf16 tensor, computed by this recipe."""
    import torch
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or not x.is_cuda:
        raise ValueError(f"softmax: x must be a CUDA bfloat16 tensor, got {type(x).__name__} "
                         f"{getattr(x, 'dtype', '')}")
    if x.dim() < 1 or not x.is_contiguous():
        raise ValueError("softmax: x must be contiguous with at least one dimension")
    n = x.shape[-1]
    m = x.numel() // n if n else 0
    out = torch.empty_like(x) if out is None else out
    if m == 0:
        return out
    k, grid, constexprs = _arguments(m, n)
    k[grid](x, out, m, n, **constexprs)
    return out


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx} for 1k, 4k, 8k and 32k columns."""
    ptr = lk.Pointer[lk.bf16]
    result = {}
    for n in (1024, 4096, 8192, 32768):
        k, _, constexprs = _arguments(4096, n)
        result[f"softmax n={n}"] = k.ptx(ptr, ptr, 4096, n, **constexprs)
    return result


def check(shapes=((1, 1), (3, 7), (17, 100), (64, 1000), (9, 2049), (5, 4096), (4, 8191),
                  (3, 32768), (2, 32767)), seed: int = 0) -> float:
    """Run on random inputs and compare with torch.softmax in float64; returns the worst
    error relative to the largest output of its row (AssertionError beyond bf16 tolerance)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    worst = 0.0
    for m, n in shapes:
        x = (torch.randn(m, n, device="cuda", generator=gen) * 4).to(torch.bfloat16)
        got = softmax(x).double()
        want = torch.softmax(x.double(), dim=-1)
        err = ((got - want).abs() / want.amax(dim=-1, keepdim=True)).max().item()
        assert err < 2 ** -7, f"softmax ({m}, {n}): relative error {err:.3g} over bf16 tolerance"
        worst = max(worst, err)
    return worst


def _median_ms(fn, reps: int) -> float:
    import torch
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def benchmark(m: int = 4096, columns=(1024, 4096, 8192, 16384, 32768), reps: int = 50) -> list:
    """Time this softmax against torch.softmax on the same random bf16 (m, n) inputs (CUDA
    events, medians of `reps`, interleaved); prints and returns the table rows."""
    import torch
    rows = []
    print(f"{'shape':>16} {'layoutkit ms':>13} {'torch ms':>9} {'GB/s':>7} {'speedup':>8}")
    for n in columns:
        x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        out = torch.empty_like(x)
        softmax(x, out)                                          # compile + warm up
        torch.softmax(x, dim=-1)
        torch.cuda.synchronize()
        ours = _median_ms(lambda: softmax(x, out), reps)
        theirs = _median_ms(lambda: torch.softmax(x, dim=-1), reps)
        gbps = 2 * x.numel() * x.element_size() / ours / 1e6
        rows.append({"m": m, "n": n, "layoutkit_ms": ours, "torch_ms": theirs, "gbps": gbps,
                     "speedup": theirs / ours})
        print(f"{f'({m}, {n})':>16} {ours:13.4f} {theirs:9.4f} {gbps:7.0f} "
              f"{theirs / ours:8.2f}")
    return rows


if __name__ == "__main__":
    print(f"max relative error {check():.3g}")
    benchmark()
