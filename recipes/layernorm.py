"""Row layernorm: y[r, :] = (x[r, :] - mean_r) / sqrt(var_r + eps) * w + b, bf16 in and out
(x, w, b, y), f32 math, for a row-major contiguous (m, n) matrix; var is the biased variance
(torch.nn.functional.layer_norm's).

Pipeline (one pass over x: every value of a row is read once, kept in registers, written once):

    global --ld.global.v4 (16 B)--> registers (bf16 -> f32; columns past n read as 0)
      mean:  row sum (in-thread tree -> shfl.bfly over the row's lanes -> [smem across warps])
             / the columns this CTA holds
      d = x - mean, 0 past n (lk.in_bounds)  -- two-pass variance, no E[x^2] - mean^2 cancellation
      M2:    row sum of d * d, same tree
      [cluster: each CTA's (columns, sum, M2) -> every CTA's shared memory (st.async, on the
       receiver's mbarrier) -> every CTA's; mean = sum / n,
       M2 = sum_r M2_r + (sum_r - n_r mean)^2 / n_r (Chan et al.),
       d += mean_cta - mean]
      w, b --ld.global.v4--> registers (after the statistics: short register lifetimes)
      y = d * rsqrt(M2 / n + eps) * w + b -> bf16 --st.global.v4--> global

Work split: softmax's (recipes/_row_split.py, `choose_config(m, n)`): up to 16384 columns per
CTA of 128-256 threads, 64 values a thread at most, longer rows over a cluster of up to 8
CTAs; 16-byte accesses when n % 8 == 0.

Constraints: x is a contiguous CUDA bf16 tensor (2-D, or N-D normalized over the last dim);
w and b are contiguous bf16 vectors of n; 1 <= n <= 131072; eps > 0. Tensors not 16-byte
aligned take narrower accesses (correct, slower).
"""
from __future__ import annotations

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _row_split as rs
from recipes import _rowwise_kernel as rk
from recipes import softmax as _softmax

MAX_COLUMNS = rs.MAX_COLUMNS
is_plain_bf16 = _softmax.is_plain_bf16   # the fast check of every tensor argument


def config(m: int, n: int) -> rs.Config:
    """The work split layernorm launches for an (m, n) bf16 x (recipes/_row_split.py)."""
    try:
        return rs.choose_config(m, n, lk.bf16)
    except ValueError as exc:
        raise ValueError(f"layernorm: {exc}".replace("row kernels: ", "")) from None


def _layernorm_rows(x, w, b, y, m, n_vectors, eps, WARPS, ROWS, C, K, CLUSTER):
    """The kernel body: this CTA's ROWS rows (its part of them in a cluster)."""
    rows = rk.RowTiles(m, n_vectors * C, WARPS, ROWS, C, K, CLUSTER)
    tv = rows.tv
    X = rows.rows_of(x)
    raw = lk.load(X)
    rows.peers_started()                            # a cluster's peers, while x is in flight
    v = lk.cast(raw, lk.f32)                        # (its first use: after the barrier)
    inv_n = 1.0 / lk.cast(rows.n, lk.f32)
    held = lk.cast(rows.part_columns(), lk.f32)     # n without a cluster
    part_sum = lk.reduce_sum(v, 1)
    part_mean = part_sum * (inv_n if CLUSTER == 1 else 1.0 / held)
    d = lk.where(lk.in_bounds(X), v - lk.broadcast(part_mean, tv), 0.0)
    m2 = lk.reduce_sum(d * d, 1)
    if CLUSTER > 1:
        counts, sums, m2s = rows.exchange([lk.full(part_sum.layout, held), part_sum, m2])
        mean = lk.reduce_sum(sums, 1) * inv_n
        spread = sums - counts * lk.broadcast(mean, counts.layout)
        m2 = lk.reduce_sum(m2s + spread * spread / counts, 1)
        d = d + lk.broadcast(part_mean - mean, tv)
    rstd = lk.rsqrt(m2 * inv_n + eps)
    scale = lk.cast(lk.load(rows.vector_of(w)), lk.f32)
    shift = lk.cast(lk.load(rows.vector_of(b)), lk.f32)
    out = lk.fma(d * lk.broadcast(rstd, tv), scale, shift)
    lk.store(rows.rows_of(y), lk.cast(out, lk.bf16))


def _layernorm_body(x: lk.Pointer[lk.bf16], w: lk.Pointer[lk.bf16], b: lk.Pointer[lk.bf16],
                    y: lk.Pointer[lk.bf16], m: lk.i32, n_vectors: lk.i32, eps: lk.f32,
                    WARPS: lk.constexpr, ROWS: lk.constexpr, C: lk.constexpr, K: lk.constexpr):
    _layernorm_rows(x, w, b, y, m, n_vectors, eps, WARPS, ROWS, C, K, 1)


def _layernorm_cluster_body(x: lk.Pointer[lk.bf16], w: lk.Pointer[lk.bf16],
                            b: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32,
                            n_vectors: lk.i32, eps: lk.f32, WARPS: lk.constexpr,
                            ROWS: lk.constexpr, C: lk.constexpr, K: lk.constexpr):
    _layernorm_rows(x, w, b, y, m, n_vectors, eps, WARPS, ROWS, C, K,
                    lk.sm90.cluster_size())


def kernel_for(cfg: rs.Config) -> lk.Kernel:
    """The layernorm kernel for cfg's block size and cluster (one lk.Kernel per pair)."""
    body = _layernorm_body if cfg.cluster == 1 else _layernorm_cluster_body
    return rk.make_kernel(body, rs.kernel_name("layernorm", cfg), cfg.warps, cfg.cluster, ())


def launch_arguments(cfg: rs.Config, m: int, n: int):
    """(kernel, grid, integer arguments after the tensors (before eps), constexprs) of a
    layernorm launch of `cfg` over an (m, n) x."""
    cfg.check(n)
    return kernel_for(cfg), cfg.grid(m), (m, n // cfg.vector), cfg.constexprs()


def launches(x, w, b, y, floats, m: int, n: int, eps: float,
             cfg: rs.Config | None = None) -> list:
    """[(kernel, grid, args, constexprs)]: y = layernorm(x, w, b, eps) over (m, n) bf16 rows
    with `cfg` or the heuristic's split (tensors and floats as recipes/softmax.launches'):
    the launch_arguments the GPU path keeps per shape, with the tensors and eps."""
    kernel, grid, ints, constexprs = launch_arguments(cfg or config(m, n), m, n)
    return [(kernel, grid, (x, w, b, y, *ints, eps), constexprs)]


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


_PLANS: dict = {}       # x.shape -> (kernel[grid] or None, ints, constexprs, (n,))
MAX_PLANS = 256


def _plan(shape, m: int, n: int, cfg: rs.Config | None = None):
    """What layernorm launches for an x of this (checked) shape, with cfg or the heuristic's
    split; kept per shape and cfg."""
    key = shape if cfg is None else (shape, cfg)
    plan = _PLANS.get(key)
    if plan is None:
        plan = (None, (), (), (n,))
        if m:
            kernel, grid, ints, constexprs = launch_arguments(cfg or config(m, n), m, n)
            plan = (kernel[grid], ints, tuple(constexprs.values()), (n,))
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
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


def layernorm(x, weight, bias, eps: float = 1e-5, out=None, config: rs.Config | None = None):
    """torch.nn.functional.layer_norm(x, (n,), weight, bias, eps) for contiguous CUDA bf16
    tensors (n = x.shape[-1]), computed by this recipe (written into `out`, a contiguous bf16
    tensor of x's shape on x's device, when given; with the work split `config` instead of
    the heuristic's, when given: for sweeps)."""
    torch = require_torch("recipes.layernorm.layernorm")
    plan = _PLANS.get(x.shape if config is None else (x.shape, config)) \
        if type(x) is torch.Tensor else None
    if plan is None or not (is_plain_bf16(x, torch) and is_plain_bf16(weight, torch) and
                            is_plain_bf16(bias, torch) and weight.shape == plan[3] and
                            bias.shape == plan[3] and type(eps) is float and eps > 0 and
                            weight.get_device() == bias.get_device() == x.get_device()):
        m, n = check_arguments(x, weight, bias, eps)
        plan = _plan(x.shape, m, n, config)
    launch, ints, constexprs, _ = plan
    if out is None:
        out = torch.empty_like(x)
    elif not (is_plain_bf16(out, torch) and out.shape == x.shape and
              out.get_device() == x.get_device()):
        check_output(x, out)
    if launch is not None:
        launch(x, weight, bias, out, *ints, float(eps), *constexprs)
    return out


def ptx_for(cfg: rs.Config, m: int, n: int) -> str:
    """The PTX of a layernorm launch of `cfg` over an (m, n) x (no GPU)."""
    kernel, _, ints, constexprs = launch_arguments(cfg, m, n)
    return kernel.ptx(*(lk.Pointer[lk.bf16],) * 4, *ints, 1e-5, **constexprs)


DEFAULT_COLUMNS = _softmax.DEFAULT_COLUMNS


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx}, 4096 rows of 1k to 128k."""
    return {f"layernorm n={n}": ptx_for(config(4096, n), 4096, n) for n in DEFAULT_COLUMNS}


def _error(got, want) -> float:
    """Worst |got - want| / max(|want|, 1): bf16 rounding of an O(1) output is <= 2**-8."""
    return ((got.double() - want).abs() / want.abs().clamp(min=1.0)).max().item()


# (m, n, config or None for config(m, n)): softmax's cases (recipes/softmax.py CPU_CASES): a
# row per 8 threads, narrower accesses, several rows per warp, rows over clusters of 2 and 3
CPU_CASES = _softmax.CPU_CASES


def check_cpu(seed: int = 0, cases=CPU_CASES) -> float:
    """Run the kernel on the CPU interpreter (layoutkit.dsl.interpreter.check_on_cpu, race
    checking on) for `cases` (m, n, config or None: the heuristic's), rows offset far from 0
    and rising along the row, and compare with layer norm in float64 (numpy); returns the
    worst error (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16

    def error(got, want) -> float:          # _error's metric on numpy arrays
        return float((np.abs(got - want) / np.maximum(np.abs(want), 1.0)).max())
    rng = np.random.default_rng(seed)
    worst = 0.0
    for m, n, cfg in cases:
        x = to_bf16(rng.standard_normal((m, n)) * 3 + rng.standard_normal((m, 1)) * 8 +
                    np.linspace(-6.0, 6.0, n))   # a ramp: a cluster's parts differ in mean
        w, b = to_bf16(rng.standard_normal(n)), to_bf16(rng.standard_normal(n))
        xf, wf, bf = (from_bf16(t).astype(np.float64) for t in (x, w, b))
        centred = xf - xf.mean(axis=1, keepdims=True)
        want = centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + 1e-5) * wf + bf
        ((kernel, grid, args, constexprs),) = launches(
            x, w, b, np.zeros((m, n), np.uint16), lambda count: np.zeros(count, np.float32), m,
            n, 1e-5, cfg)
        worst = max(worst, check_on_cpu(kernel, grid, *args, expect={"y": want},
                                        tolerance=2 ** -7, error=error, **constexprs))
    return worst


def check(shapes=((1, 1), (3, 7), (17, 100), (64, 1000), (9, 1024), (5, 2049), (1000, 3000),
                  (6, 4096), (4, 8191), (3, 16384), (7, 16385), (2, 32767), (3, 32768),
                  (2, 65536), (3, 65530), (1, 131072), (2, 131071)), seed: int = 0) -> float:
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


def benchmark(m: int = 4096, columns=DEFAULT_COLUMNS, reps: int = 30) -> list:
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
