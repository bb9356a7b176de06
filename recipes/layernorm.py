"""Row layernorm: y[r, :] = (x[r, :] - mean_r) / sqrt(var_r + eps) * w + b, bf16 in and out
(x, w, b, y), f32 math, for a row-major contiguous (m, n) matrix; var is the biased variance
(torch.nn.functional.layer_norm's).

Pipeline (one pass over x, the whole row lives in registers):

    global --ld.v4.b32--> registers (bf16 -> f32; columns past n read as 0)
      mean:  row sum (in-thread tree -> shfl.bfly over the row's lanes -> [smem across warps]) / n
      d = x - mean, 0 past n (lk.in_bounds)  -- two-pass variance, no E[x^2] - mean^2 cancellation
      var:   row sum of d * d, same tree, / n
      w, b --ld.v4.b32--> registers (after the statistics: short register lifetimes)
      y = d * rsqrt(var + eps) * w + b -> bf16 --st.v4.b32--> global

Work split, from the row length (the tile is (ROWS, BLOCK_N), BLOCK_N = next power of two >= n,
each lane owns chunks of C = 8 consecutive columns, 16 bytes of bf16, chunks 8 * lanes apart):
  BLOCK_N <= 1024: one row per warp, 4 rows per block of 4 warps (shuffles only);
  longer rows: one row per block of BLOCK_N / 1024 warps, each lane K = 4 chunks (32 values
  whatever the row length: 58-64 registers, ~1024 resident threads and 64 KB of bf16 input
  per SM; recipes/softmax.py says why that is the split to want); shuffles, then the warps'
  partials through shared memory between barriers.

Constraints: x is a contiguous CUDA bf16 tensor (2-D, or N-D normalized over the last dim);
w and b are contiguous bf16 vectors of n; 1 <= n <= 32768; eps > 0. Vector accesses need
n % 16 == 0 and 16-byte aligned tensors (others use narrower, masked accesses: correct,
slower).
"""
from __future__ import annotations

import functools

import layoutkit as lk
from recipes import softmax as _softmax   # the row split is softmax's, shared, not copied

MAX_COLUMNS = _softmax.MAX_COLUMNS
row_layout = _softmax.row_layout
is_plain_bf16 = _softmax.is_plain_bf16   # the fast check of every tensor argument


@functools.lru_cache(maxsize=None)
def config(n: int) -> dict:
    """The tile for rows of n columns: num_warps, ROWS (rows per block), C (consecutive
    columns per access), K (chunks per lane): softmax.config's split; see the module docstring."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COLUMNS:
        raise ValueError(f"layernorm: the row length n = {n!r} must be an int in "
                         f"1..{MAX_COLUMNS}")
    return _softmax.config(n)


def _layernorm_body(x: lk.Pointer[lk.bf16], w: lk.Pointer[lk.bf16], b: lk.Pointer[lk.bf16],
                    y: lk.Pointer[lk.bf16], m: lk.i32, n: lk.i32, eps: lk.f32,
                    WARPS: lk.constexpr, ROWS: lk.constexpr, C: lk.constexpr, K: lk.constexpr):
    tv = row_layout(WARPS, ROWS, C, K)
    tile = (lk.block_id(0), 0)

    def rows_of(ptr):
        return lk.global_tensor(ptr, lk.Layout((m, n), (n, 1))).tile(tv.tile, tile).partition(tv)

    def columns_of(ptr):            # a vector of n, the same for every row of the tile
        return lk.global_tensor(ptr, lk.Layout((m, n), (0, 1))).tile(tv.tile, tile).partition(tv)

    X = rows_of(x)
    v = lk.cast(lk.load(X), lk.f32)
    inv_n = 1.0 / lk.cast(n, lk.f32)
    mean = lk.reduce_sum(v, 1) * inv_n
    d = lk.where(lk.in_bounds(X), v - lk.broadcast(mean, tv), 0.0)
    rstd = lk.rsqrt(lk.reduce_sum(d * d, 1) * inv_n + eps)
    scale = lk.cast(lk.load(columns_of(w)), lk.f32)
    shift = lk.cast(lk.load(columns_of(b)), lk.f32)
    out = lk.fma(d * lk.broadcast(rstd, tv), scale, shift)
    lk.store(rows_of(y), lk.cast(out, lk.bf16))


@functools.lru_cache(maxsize=None)
def kernel_for(num_warps: int) -> lk.Kernel:
    """The layernorm kernel compiled for blocks of num_warps warps (one Kernel per size)."""
    body = type(_layernorm_body)(_layernorm_body.__code__, _layernorm_body.__globals__,
                                 f"layernorm_w{num_warps}")
    body.__annotations__ = _layernorm_body.__annotations__
    return lk.kernel(body, num_warps=num_warps)


@functools.lru_cache(maxsize=None)
def _launch_plan(n: int):
    cfg = config(n)
    constexprs = {"WARPS": cfg["num_warps"], "ROWS": cfg["ROWS"], "C": cfg["C"], "K": cfg["K"]}
    return kernel_for(cfg["num_warps"]), cfg["ROWS"], constexprs


def check_arguments(x, weight, bias, eps) -> tuple[int, int]:
    """(m, n): rows and row length, after checking the arguments as layernorm() needs them;
    raises TypeError / ValueError naming the argument and the rule."""
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if not all(hasattr(t, a) for a in ("dtype", "shape", "is_cuda", "is_contiguous")):
            raise TypeError(f"layernorm: {name} must be a torch tensor, got {type(t).__name__}")
        if str(t.dtype) != "torch.bfloat16":
            raise TypeError(f"layernorm: {name} has dtype {t.dtype}; it must be torch.bfloat16")
        if not t.is_cuda or not t.is_contiguous():
            raise ValueError(f"layernorm: {name} must be a contiguous CUDA tensor, got one on "
                             f"{t.device} with strides {tuple(t.stride())}")
    if len(x.shape) < 1 or not 1 <= x.shape[-1] <= MAX_COLUMNS:
        raise ValueError(f"layernorm: x has shape {tuple(x.shape)}; its last dimension n must "
                         f"be in 1..{MAX_COLUMNS}")
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if tuple(t.shape) != (n,) or t.device != x.device:
            raise ValueError(f"layernorm: {name} has shape {tuple(t.shape)} on {t.device}; it "
                             f"must be a vector of n = {n} on {x.device}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"layernorm: eps = {eps!r} must be a positive number")
    m = 1
    for extent in x.shape[:-1]:
        m *= extent
    return m, n


_PLANS: dict = {}       # x.shape -> (kernel[grid], m, n, its constexprs, the vectors' shape)
MAX_PLANS = 256


def _plan(shape, m: int, n: int):
    """What layernorm launches for an x of this (checked) shape; kept per shape."""
    plan = _PLANS.get(shape)
    if plan is None:
        kernel, rows, constexprs = _launch_plan(n)
        plan = (kernel[(m + rows - 1) // rows] if m else None, m, n,
                tuple(constexprs.values()), (n,))
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[shape] = plan
    return plan


def check_output(x, out) -> None:
    """Raise ValueError naming the rule unless out can hold layernorm's result for x: a
    contiguous tensor of x's dtype and shape on x's device."""
    if str(getattr(out, "dtype", None)) != str(x.dtype) or \
            tuple(getattr(out, "shape", ())) != tuple(x.shape) or \
            getattr(out, "device", None) != x.device or not out.is_contiguous():
        raise ValueError(f"layernorm: out must be a contiguous {x.dtype} tensor of shape "
                         f"{tuple(x.shape)} on {x.device}, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} "
                         f"{tuple(getattr(out, 'shape', ()))} on {getattr(out, 'device', '?')}")


def layernorm(x, weight, bias, eps: float = 1e-5, out=None):
    """torch.nn.functional.layer_norm(x, (n,), weight, bias, eps) for contiguous CUDA bf16
    tensors (n = x.shape[-1]), computed by this recipe (written into `out`, a contiguous bf16
    tensor of x's shape on x's device, when given)."""
    import torch
    plan = _PLANS.get(x.shape) if type(x) is torch.Tensor else None
    if plan is None or not (is_plain_bf16(x, torch) and is_plain_bf16(weight, torch) and
                            is_plain_bf16(bias, torch) and weight.shape == plan[4] and
                            bias.shape == plan[4] and type(eps) is float and eps > 0 and
                            weight.get_device() == bias.get_device() == x.get_device()):
        m, n = check_arguments(x, weight, bias, eps)
        plan = _plan(x.shape, m, n)
    launch, m, n, constexprs, _ = plan
    if out is None:
        out = torch.empty_like(x)
    elif not (is_plain_bf16(out, torch) and out.shape == x.shape and
              out.get_device() == x.get_device()):
        check_output(x, out)
    if launch is not None:
        launch(x, weight, bias, out, m, n, float(eps), *constexprs)
    return out


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx} for 1k to 32k columns."""
    ptr = lk.Pointer[lk.bf16]
    result = {}
    for n in (1024, 4096, 8192, 16384, 32768):
        kernel, _, constexprs = _launch_plan(n)
        result[f"layernorm n={n}"] = kernel.ptx(ptr, ptr, ptr, ptr, 4096, n, 1e-5, **constexprs)
    return result


def _error(got, want) -> float:
    """Worst |got - want| / max(|want|, 1): bf16 rounding of an O(1) output is <= 2**-8."""
    return ((got.double() - want).abs() / want.abs().clamp(min=1.0)).max().item()


def check_cpu(seed: int = 0) -> float:
    """Run the kernel on the CPU interpreter (layoutkit.dsl.interpreter.check_on_cpu, race
    checking on) for small shapes of both work splits, rows offset far from 0, and compare
    with layer norm in float64 (numpy); returns the worst error (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16

    def error(got, want) -> float:          # _error's metric on numpy arrays
        return float((np.abs(got - want) / np.maximum(np.abs(want), 1.0)).max())
    rng = np.random.default_rng(seed)
    worst = 0.0
    for m, n in ((3, 7), (5, 100), (2, 1500)):
        x = to_bf16(rng.standard_normal((m, n)) * 3 + rng.standard_normal((m, 1)) * 8)
        w, b = to_bf16(rng.standard_normal(n)), to_bf16(rng.standard_normal(n))
        xf, wf, bf = (from_bf16(t).astype(np.float64) for t in (x, w, b))
        centred = xf - xf.mean(axis=1, keepdims=True)
        want = centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + 1e-5) * wf + bf
        kernel, rows, constexprs = _launch_plan(n)
        worst = max(worst, check_on_cpu(kernel, -(-m // rows), x, w, b,
                                        np.zeros((m, n), np.uint16), m, n, 1e-5,
                                        expect={"y": want}, tolerance=2 ** -7, error=error,
                                        **constexprs))
    return worst


def check(shapes=((1, 1), (3, 7), (17, 100), (64, 1000), (9, 1024), (5, 2049), (6, 4096),
                  (4, 8191), (3, 16384), (2, 32767), (3, 32768)), seed: int = 0) -> float:
    """Run on random inputs (rows with offsets far from 0, random w and b) and compare with
    layer_norm in float64; returns the worst error (AssertionError beyond bf16 tolerance)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    worst = 0.0
    for m, n in shapes:
        offset = torch.randn(m, 1, device="cuda", generator=gen) * 8
        x = (torch.randn(m, n, device="cuda", generator=gen) * 3 + offset).to(torch.bfloat16)
        w = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
        got = layernorm(x, w, b, 1e-5)
        want = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        err = _error(got, want)
        assert err < 2 ** -7, f"layernorm ({m}, {n}): error {err:.3g} over bf16 tolerance"
        worst = max(worst, err)
    return worst


def benchmark(m: int = 4096, columns=(1024, 4096, 8192, 16384, 32768), reps: int = 50) -> list:
    """Time this layernorm against torch.nn.functional.layer_norm on the same random bf16
    (m, n) inputs and (n,) weight and bias (softmax's `time_rows`); prints and returns the
    table rows."""
    import torch
    F = torch.nn.functional

    def calls(x):
        n = x.shape[1]
        w, b = (torch.randn(n, device="cuda").to(torch.bfloat16) for _ in range(2))
        out = torch.empty_like(x)
        return {"layoutkit": lambda: layernorm(x, w, b, 1e-5, out),
                "torch": lambda: F.layer_norm(x, (n,), w, b, 1e-5)}
    return _softmax.time_rows(m, columns, reps, calls)


if __name__ == "__main__":
    print(f"max error {check():.3g}")
    benchmark()
