"""Row softmax: y[r, :] = exp(x[r, :] - max_r) / sum(exp(x[r, :] - max_r)), bf16 in and out,
f32 math, for a row-major contiguous (m, n) matrix.

Pipeline (one pass, the whole row lives in registers):

    global --ld.v4.b32--> registers (bf16 -> f32; columns past n read as -inf)
      row max:  in-thread tree -> shfl.bfly over the lanes of the row -> [smem across warps]
      e = exp2(x * log2(e) - max * log2(e))        (one fma + ex2.approx per element)
      row sum:  same reduction tree
      y = e * (1 / sum) -> bf16 --st.v4.b32--> global

Work split, from the row length (the tile is (ROWS, BLOCK_N), BLOCK_N = next power of two >= n):
  BLOCK_N <= 1024: one row per warp, 4 rows per block of 4 warps (shuffles only);
  longer rows: one row per block of BLOCK_N / 1024 warps (2 at 2k ... 32 at 32k): shuffles,
  then the warps' partials through shared memory between barriers.
Each lane owns K chunks of C = 8 consecutive columns (16 bytes of bf16), chunks 8 * lanes apart;
past 1k columns every lane holds VALUES = C * K = 32 values, whatever the row length.

Why 32 values a lane: a block's loads are in flight only until its first reduction, so the
bandwidth an SM reaches grows with the bytes its resident blocks hold (Little's law). The f32
row is in registers, so that is bounded by the register file: 32 values cost ptxas 48-62
registers (recipe compile --resources), i.e. ~1024 threads and 64-80 KB of bf16 input
resident per SM at every row length. The earlier split (16 values a lane up to 16k, 32 warps
at 16k) had 57 registers x 1024 threads at 16k: one block and 32 KB per SM, every SM idle
during that block's two 32-warp reductions (32 shared loads per thread each); 16k was the
slowest row length. Fewer warps per row also means fewer partials to combine per barrier.

Constraints: x is a CUDA bf16 tensor, contiguous, 2-D (or N-D: softmax over the last dim);
1 <= n <= 32768 (longer rows would spill registers). Vector accesses need n % 16 == 0
(other n use scalar, masked accesses: correct, slower).
"""
from __future__ import annotations

import functools

import layoutkit as lk
from layoutkit.tools.benchmarking import gbps, interleaved

LOG2E = 1.4426950408889634
MAX_COLUMNS = 32768
CHUNK = 8                        # bf16 values per 16-byte access
ROW_PER_WARP_MAX = 1024
VALUES_PER_LANE = 32             # see "Why 32 values a lane" above


@functools.lru_cache(maxsize=None)
def config(n: int) -> dict:
    """The tile for rows of n columns: num_warps, ROWS (rows per block), C (consecutive
    columns per access), K (chunks per lane)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COLUMNS:
        raise ValueError(f"softmax: the row length n = {n!r} must be an int in 1..{MAX_COLUMNS}")
    block_n = max(32, 1 << (n - 1).bit_length())
    chunk = min(CHUNK, block_n // 32)
    if block_n <= ROW_PER_WARP_MAX:
        return {"num_warps": 4, "ROWS": 4, "C": chunk, "K": block_n // (32 * chunk)}
    return {"num_warps": block_n // (32 * VALUES_PER_LANE), "ROWS": 1, "C": chunk,
            "K": VALUES_PER_LANE // chunk}


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


@functools.lru_cache(maxsize=None)
def _launch_plan(n: int):
    cfg = config(n)
    constexprs = {"WARPS": cfg["num_warps"], "ROWS": cfg["ROWS"], "C": cfg["C"], "K": cfg["K"]}
    return kernel_for(cfg["num_warps"]), cfg["ROWS"], constexprs


def _arguments(m: int, n: int):
    k, rows, constexprs = _launch_plan(n)
    return k, (m + rows - 1) // rows, constexprs


_PLANS: dict = {}       # x.shape -> (kernel[grid] or None when x is empty, m, n, constexprs)
MAX_PLANS = 256


def _plan(shape):
    """What softmax launches for an x of this shape (checked; kept per shape)."""
    plan = _PLANS.get(shape)
    if plan is None:
        if len(shape) < 1:
            raise ValueError("softmax: x must be contiguous with at least one dimension")
        n = shape[-1]
        m = 1
        for extent in shape[:-1]:
            m *= extent
        plan = (None, m, n, ())
        if m and n:
            k, grid, constexprs = _arguments(m, n)
            plan = (k[grid], m, n, tuple(constexprs.values()))
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[shape] = plan
    return plan


def is_plain_bf16(t, torch) -> bool:
    """Whether t is certainly a contiguous CUDA bf16 torch.Tensor (the fast check)."""
    return type(t) is torch.Tensor and t.dtype is torch.bfloat16 and t.is_cuda and \
        t.is_contiguous()


def check_input(x) -> None:
    """Raise ValueError naming the rule unless x is a contiguous CUDA bf16 torch tensor."""
    import torch
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or not x.is_cuda:
        raise ValueError(f"softmax: x must be a CUDA bfloat16 tensor, got {type(x).__name__} "
                         f"{getattr(x, 'dtype', '')}")
    if x.dim() < 1 or not x.is_contiguous():
        raise ValueError("softmax: x must be contiguous with at least one dimension")


def check_output(x, out) -> None:
    """Raise ValueError naming the rule unless out can hold softmax(x): a contiguous bf16
    torch tensor of x's shape on x's device."""
    import torch
    if not isinstance(out, torch.Tensor) or out.dtype != torch.bfloat16 or \
            tuple(out.shape) != tuple(x.shape) or out.device != x.device or \
            not out.is_contiguous():
        raise ValueError(f"softmax: out must be a contiguous bfloat16 tensor of shape "
                         f"{tuple(x.shape)} on {x.device}, got {type(out).__name__} "
                         f"{getattr(out, 'dtype', '')} {tuple(getattr(out, 'shape', ()))} on "
                         f"{getattr(out, 'device', '?')}")


def softmax(x, out=None):
    """torch.softmax(x, dim=-1) for a contiguous CUDA bf16 tensor, computed by this recipe
    (written into `out`, a contiguous bf16 tensor of x's shape on x's device, when given)."""
    import torch
    if not is_plain_bf16(x, torch):
        check_input(x)
    plan = _plan(x.shape)
    if out is None:
        out = torch.empty_like(x)
    elif not (is_plain_bf16(out, torch) and out.shape == x.shape and
              out.get_device() == x.get_device()):
        check_output(x, out)
    launch, m, n, constexprs = plan
    if launch is not None:
        launch(x, out, m, n, *constexprs)
    return out


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx} for 1k to 32k columns."""
    ptr = lk.Pointer[lk.bf16]
    result = {}
    for n in (1024, 4096, 8192, 16384, 32768):
        k, _, constexprs = _arguments(4096, n)
        result[f"softmax n={n}"] = k.ptx(ptr, ptr, 4096, n, **constexprs)
    return result


def _row_relative(got, want) -> float:
    """Error relative to the largest output of each row (softmax outputs span decades)."""
    import numpy as np
    return float((np.abs(got - want) / want.max(axis=-1, keepdims=True)).max())


def check_cpu(seed: int = 0) -> float:
    """Run the kernel on the CPU interpreter (layoutkit.dsl.interpreter.check_on_cpu, race
    checking on) for small shapes of both work splits (a warp per row, a block per row) and
    compare with numpy in float64; returns the worst error relative to each row's largest
    output (AssertionError beyond 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for m, n in ((3, 7), (5, 100), (2, 1500)):
        x = to_bf16(rng.standard_normal((m, n)) * 4)
        xf = from_bf16(x).astype(np.float64)
        want = np.exp(xf - xf.max(axis=1, keepdims=True))
        want /= want.sum(axis=1, keepdims=True)
        kernel, grid, constexprs = _arguments(m, n)
        worst = max(worst, check_on_cpu(kernel, grid, x, np.zeros((m, n), np.uint16), m, n,
                                        expect={"y": want}, tolerance=2 ** -7,
                                        error=_row_relative, **constexprs))
    return worst


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


def time_rows(m: int, columns, reps: int, calls_for) -> list:
    """For each n in columns, time the calls `calls_for(x)` returns ({"layoutkit": fn,
    "torch": fn}) on a random bf16 (m, n) x (layoutkit.tools.benchmarking: CUDA events, L2 flushed
    before each call, which also keeps the Python launch out of the timed span, medians,
    interleaved); GB/s counts one read and one write of x. Prints and returns the rows (also
    recipes/layernorm.py's)."""
    import torch
    rows = []
    print(f"{'shape':>16} {'layoutkit ms':>13} {'torch ms':>9} {'GB/s':>7} {'speedup':>8}")
    for n in columns:
        x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        times = interleaved(calls_for(x), reps=reps)
        ours, theirs = times["layoutkit"].median_ms, times["torch"].median_ms
        rate = gbps(2 * x.numel() * x.element_size(), ours)
        rows.append({"m": m, "n": n, "layoutkit_ms": ours, "torch_ms": theirs, "gbps": rate,
                     "speedup": theirs / ours})
        print(f"{f'({m}, {n})':>16} {ours:13.4f} {theirs:9.4f} {rate:7.0f} "
              f"{theirs / ours:8.2f}")
    return rows


def benchmark(m: int = 4096, columns=(1024, 4096, 8192, 16384, 32768), reps: int = 50) -> list:
    """Time this softmax against torch.softmax on the same random bf16 (m, n) inputs
    (`time_rows`); prints and returns the rows."""
    import torch

    def calls(x):
        out = torch.empty_like(x)
        return {"layoutkit": lambda: softmax(x, out), "torch": lambda: torch.softmax(x, dim=-1)}
    return time_rows(m, columns, reps, calls)


if __name__ == "__main__":
    print(f"max relative error {check():.3g}")
    benchmark()
