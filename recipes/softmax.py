"""Row softmax: y[r, :] = exp(x[r, :] - max_r) / sum(exp(x[r, :] - max_r)), bf16 in and out,
f32 math, for a row-major contiguous (m, n) matrix.

Pipeline (one pass: every value of a row is read once, kept in registers, written once):

    global --ld.global.v4 (16 B)--> registers (bf16 -> f32; columns past n read as -inf)
      (CTAs of 16k columns, `staged`: global --cp.async 16 B--> shared memory, read into
      registers for the max, the sum and the output: no row held in registers across the
      reductions, the exponentials computed twice)
      row max:  in-thread tree -> shfl.bfly over the lanes of the row -> [smem across warps]
      e = exp2(x * log2(e) - max * log2(e))        (one fma + ex2.approx.ftz per element:
                                                    results below 2**-126 of the max flush to 0)
      row sum:  same reduction tree
      [cluster: each CTA's (max, sum) of its columns -> every CTA's shared memory (st.async,
       completing on the receiver's mbarrier; recipes/_rowwise_kernel.py) -> every CTA's
       partials;
       max = max_r max_r', sum = sum_r sum_r' * exp(max_r' - max)]
      y = e * (exp(max_cta - max) / sum) -> bf16 --st.global.v4--> global

Work split (recipes/_row_split.py, chosen per (m, n) by `choose_config`): rows of up to 16384
columns in one CTA of 128-256 threads (several rows per CTA for short rows), each thread 64
values at most; longer rows over a cluster of up to 8 CTAs. Accesses are 16 bytes wide when n
% 8 == 0 (the kernel takes n as n_vectors * C, so the row stride is provably a multiple of C),
narrower for other n.

Constraints: x is a CUDA bf16 tensor, contiguous, at least 1-D (softmax over the last dim);
1 <= n <= 131072.
"""
from __future__ import annotations

import layoutkit as lk
from layoutkit.tools.benchmarking import gbps, interleaved
from layoutkit.tools.dependencies import require_torch
from recipes import _row_split as rs
from recipes import _rowwise_kernel as rk

LOG2E = 1.4426950408889634
MAX_COLUMNS = rs.MAX_COLUMNS


def config(m: int, n: int) -> rs.Config:
    """The work split softmax launches for an (m, n) bf16 x (recipes/_row_split.py)."""
    try:
        return rs.choose_config(m, n, lk.bf16)
    except ValueError as exc:
        raise ValueError(f"softmax: {exc}".replace("row kernels: ", "")) from None


def _softmax_rows(x, y, m, n_vectors, WARPS, ROWS, C, K, CLUSTER, staged: bool = False):
    """The kernel body: this CTA's ROWS rows (its part of them in a cluster). `staged`: x is
    copied into shared memory (cp.async) and read there twice, its exponentials computed
    again after the statistics, instead of held in registers (f32) across them."""
    rows = rk.RowTiles(m, n_vectors * C, WARPS, ROWS, C, K, CLUSTER)
    tv = rows.tv
    X = rows.rows_of(x)
    if staged:
        kept = rk.staged_rows(X, tv, "rows_staged")
        lk.sm80.cp_async_commit()
        rows.peers_started()
        lk.sm80.cp_async_wait(0)
        lk.barrier()
        inside = lk.in_bounds(X)                    # the copies zero-fill: -inf past n

        def values():
            return lk.where(inside, lk.cast(lk.load(kept), lk.f32), float("-inf"))
        v = values()
    else:
        raw = lk.load(X, other=float("-inf"))
        rows.peers_started()                        # a cluster's peers, while x is in flight
        v = lk.cast(raw, lk.f32)                    # (its first use: after the barrier)

    def exponentials(v, shift):
        return lk.exp2(lk.fma(v, LOG2E, lk.broadcast(shift * (-LOG2E), tv)), ftz=True)
    part_max = lk.reduce_max(v, 1)
    e = exponentials(values() if staged else v, part_max)    # (staged: read after the max)
    part_sum = lk.reduce_sum(e, 1)
    shift = part_max
    if CLUSTER == 1:
        scale = 1.0 / part_sum
    else:
        maxes, sums = rows.exchange([part_max, part_sum])
        row_max = lk.reduce_max(maxes, 1)
        weights = lk.exp2((maxes - lk.broadcast(row_max, maxes.layout)) * LOG2E, ftz=True)
        total = lk.reduce_sum(sums * weights, 1)
        if staged:
            shift, scale = row_max, 1.0 / total
        else:
            scale = lk.exp2((part_max - row_max) * LOG2E, ftz=True) / total
    if staged:
        e = exponentials(values(), shift)
    lk.store(rows.rows_of(y), lk.cast(e * lk.broadcast(scale, tv), lk.bf16))


def _softmax_body(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32, n_vectors: lk.i32,
                  WARPS: lk.constexpr, ROWS: lk.constexpr, C: lk.constexpr, K: lk.constexpr):
    _softmax_rows(x, y, m, n_vectors, WARPS, ROWS, C, K, 1)


def _softmax_cluster_body(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32,
                          n_vectors: lk.i32, WARPS: lk.constexpr, ROWS: lk.constexpr,
                          C: lk.constexpr, K: lk.constexpr):
    _softmax_rows(x, y, m, n_vectors, WARPS, ROWS, C, K, lk.sm90.cluster_size())


def _softmax_staged_body(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32,
                         n_vectors: lk.i32, WARPS: lk.constexpr, ROWS: lk.constexpr,
                         C: lk.constexpr, K: lk.constexpr):
    _softmax_rows(x, y, m, n_vectors, WARPS, ROWS, C, K, 1, staged=True)


def _softmax_staged_cluster_body(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32,
                                 n_vectors: lk.i32, WARPS: lk.constexpr, ROWS: lk.constexpr,
                                 C: lk.constexpr, K: lk.constexpr):
    _softmax_rows(x, y, m, n_vectors, WARPS, ROWS, C, K, lk.sm90.cluster_size(), staged=True)


STAGED_FROM_COLUMNS = 16384   # a CTA holding this many columns of a row stages them (0: never)


def staged(cfg: rs.Config) -> bool:
    """Whether softmax stages x in shared memory for split `cfg` (_softmax_rows' `staged`):
    CTAs that hold at least STAGED_FROM_COLUMNS columns of a row (256 threads x 64 values:
    rows of 16k columns and every cluster split) with 16-byte accesses. Held in registers, x
    and its exponentials took 117-127 registers at 256 threads in a cluster: 2 CTAs an SM,
    idle through each exchange; staged, 40-44 (5-6 CTAs an SM), the exponentials computed
    twice. H200, same run (docs/PERFORMANCE.md): 4096 x 131072 3397 -> 3943 GB/s (quack
    4171), 1000 x 65536 3277 -> 3523, 4096 x 16384 3666 -> 3784, 4096 x 32768 unchanged
    (3776, 3760); 1000 x 4096 (128-thread CTAs of 2 rows) lost 8%: not staged."""
    return 0 < STAGED_FROM_COLUMNS <= cfg.columns and cfg.vector == 8


def kernel_for(cfg: rs.Config, staged_rows: bool | None = None) -> lk.Kernel:
    """The softmax kernel for cfg's block size and cluster (one lk.Kernel per pair), its rows
    staged in shared memory where `staged_rows` says (default: staged(cfg))."""
    stage = staged(cfg) if staged_rows is None else staged_rows
    bodies = ((_softmax_body, _softmax_cluster_body),
              (_softmax_staged_body, _softmax_staged_cluster_body))[stage]
    return rk.make_kernel(bodies[cfg.cluster > 1],
                          rs.kernel_name("softmax", cfg) + ("_staged" if stage else ""),
                          cfg.warps, cfg.cluster, ())


def launch_arguments(cfg: rs.Config, m: int, n: int, staged_rows: bool | None = None):
    """(kernel, grid, integer arguments after the tensors, constexprs) of a softmax launch of
    `cfg` over an (m, n) x (rows staged as kernel_for's `staged_rows` says)."""
    cfg.check(n)
    return kernel_for(cfg, staged_rows), cfg.grid(m), (m, n // cfg.vector), cfg.constexprs()


def launches(x, y, floats, m: int, n: int, cfg: rs.Config | None = None,
             staged_rows: bool | None = None) -> list:
    """[(kernel, grid, args, constexprs)]: y = softmax(x) over (m, n) bf16 rows with `cfg` or
    the heuristic's split (tensors of any kind the launcher takes: CUDA torch tensors, the
    interpreter's arrays; `floats`, the f32 buffers of the other row recipes' launches, is
    not called: a cluster exchanges through distributed shared memory): the
    launch_arguments the GPU path keeps per shape, with the tensors (check_cpu and
    layoutkit.torch run it); `staged_rows` as kernel_for's."""
    kernel, grid, ints, constexprs = launch_arguments(cfg or config(m, n), m, n, staged_rows)
    return [(kernel, grid, (x, y, *ints), constexprs)]


_PLANS: dict = {}   # x.shape -> (kernel[grid] or None when x is empty, ints, constexprs)
MAX_PLANS = 256


def _plan(shape, cfg: rs.Config | None = None):
    """What softmax launches for an x of this shape, with cfg or the heuristic's split
    (checked; kept per shape and cfg)."""
    key = shape if cfg is None else (shape, cfg)
    plan = _PLANS.get(key)
    if plan is None:
        if len(shape) < 1:
            raise ValueError("softmax: x must be contiguous with at least one dimension")
        n = shape[-1]
        m = 1
        for extent in shape[:-1]:
            m *= extent
        plan = (None, (), ())
        if m and n:
            kernel, grid, ints, constexprs = launch_arguments(cfg or config(m, n), m, n)
            plan = (kernel[grid], ints, tuple(constexprs.values()))
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
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


def softmax(x, out=None, config: rs.Config | None = None):
    """torch.softmax(x, dim=-1) for a contiguous CUDA bf16 tensor, computed by this recipe
    (written into `out`, a contiguous bf16 tensor of x's shape on x's device, when given;
    with the work split `config` instead of the heuristic's, when given: for sweeps)."""
    torch = require_torch("recipes.softmax.softmax")
    if not is_plain_bf16(x, torch):
        check_input(x)
    plan = _plan(x.shape, config)
    if out is None:
        out = torch.empty_like(x)
    elif not (is_plain_bf16(out, torch) and out.shape == x.shape and
              out.get_device() == x.get_device()):
        check_output(x, out)
    launch, ints, constexprs = plan
    if launch is not None:
        launch(x, out, *ints, *constexprs)
    return out


def ptx_for(cfg: rs.Config, m: int, n: int) -> str:
    """The PTX of a softmax launch of `cfg` over an (m, n) x (no GPU)."""
    kernel, _, ints, constexprs = launch_arguments(cfg, m, n)
    return kernel.ptx(lk.Pointer[lk.bf16], lk.Pointer[lk.bf16], *ints, **constexprs)


DEFAULT_COLUMNS = (1024, 4096, 8192, 16384, 32768, 65536, 131072)


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx}, 4096 rows of 1k to 128k."""
    return {f"softmax n={n}": ptx_for(config(4096, n), 4096, n) for n in DEFAULT_COLUMNS}


def _row_relative(got, want) -> float:
    """Error relative to the largest output of each row (softmax outputs span decades)."""
    import numpy as np
    return float((np.abs(got - want) / want.max(axis=-1, keepdims=True)).max())


# (m, n, config or None for config(m, n)): a row per 8 threads (n = 7, scalar accesses), 8-byte
# accesses, several rows per warp; a row over 2 CTAs of a cluster (2 rows per CTA), over 3 CTAs
# of two warps each (shuffles, then shared memory, then the cluster)
CPU_CASES = ((3, 7, None), (5, 100, None), (2, 1500, None),
             (3, 100, rs.Config(threads=32, rows=2, vector=4, chunks=1, cluster=2)),
             (2, 300, rs.Config(threads=64, rows=1, vector=2, chunks=1, cluster=3)))


def check_cpu(seed: int = 0, cases=CPU_CASES, staged_rows: bool | None = None) -> float:
    """Run the kernel on the CPU interpreter (layoutkit.dsl.interpreter.check_on_cpu, race
    checking on) for `cases` (m, n, config or None: the heuristic's), its rows staged as
    kernel_for's `staged_rows` says, and compare with numpy in float64; returns the worst
    error relative to each row's largest output (AssertionError beyond 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for m, n, cfg in cases:
        x = to_bf16(rng.standard_normal((m, n)) * 4)
        xf = from_bf16(x).astype(np.float64)
        want = np.exp(xf - xf.max(axis=1, keepdims=True))
        want /= want.sum(axis=1, keepdims=True)
        ((kernel, grid, args, constexprs),) = launches(
            x, np.zeros((m, n), np.uint16), lambda count: np.zeros(count, np.float32), m, n, cfg,
            staged_rows)
        worst = max(worst, check_on_cpu(kernel, grid, *args, expect={"y": want},
                                        tolerance=2 ** -7, error=_row_relative, **constexprs))
    return worst


def check(shapes=((1, 1), (3, 7), (17, 100), (64, 1000), (9, 2049), (1000, 3000), (5, 4096),
                  (4, 8191), (7, 16385), (3, 32768), (2, 32767), (2, 65536), (3, 65530),
                  (1, 131072), (2, 131071)), seed: int = 0) -> float:
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


def benchmark(m: int = 4096, columns=DEFAULT_COLUMNS, reps: int = 30) -> list:
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
