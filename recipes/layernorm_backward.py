"""Row layernorm backward for y = (x - mean) * rstd * weight + bias over the last dim of a
row-major contiguous (m, n) matrix (or N-D), bf16 / fp16 / f32, f32 math:

    xhat = (x - mean) * rstd,  g = dy * weight
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))       (x's dtype)
    dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy   (weight's dtype)

mean and rstd (f32 per row) are the forward's if given; recipes/layernorm.py does not return
them, so by default they are recomputed here from x, which is in registers anyway (two more row
sums, the two-pass variance of the forward: no extra memory traffic).

Pipeline (persistent CTAs, as many as are resident, each over rows g, g + G, ...; every row
value in registers; recipes/_row_split.py has the split, recipes/_rowwise_kernel.py the cluster
exchange and the sums):

    x, dy, weight [, mean, rstd] --ld 16 B--> registers (-> f32)
      [mean = sum(x) / n; var = sum((x - mean)^2) / n; rstd = rsqrt(var + eps)]
      dweight, dbias partials += dy * xhat, dy  (f32, in shared memory: registers are scarce)
      sum(g), sum(g * xhat): one tree (cluster exchange past 16k columns)
      dx = rstd * (g - (sum(g) + xhat * sum(g * xhat)) / n) --st 16 B--> global
    then partials (2, G, n) f32 --column sum in a fixed order--> dweight, dbias.

Work split (`split_for`) as recipes/rmsnorm.py's backward (16 values a thread, up to 1024
threads a row holding 16384 columns, clusters of up to 8 CTAs: n <= 131072) but with rows
sharing CTAs of 512 threads (two an SM), each CTA walking its columns in two sub-tiles (SUBS)
where K is even: every pass loads, uses and drops half its values before the next half, so x,
dy, weight and the running sums fit 64 registers.

Constraints: dy and x contiguous CUDA tensors of one shape and dtype (bf16, fp16, f32); weight
a contiguous vector of n in x's dtype or f32; mean and rstd both f32 vectors of x's rows, or
both None; eps > 0.

Benchmark interface (benchmarks/bench_rows.py): `benchmark_rows(shapes, reps)` returns (rows,
skipped) for recipes/_rowwise.markdown_table, timing this against quack's layernorm_bwd and
torch's autograd of F.layer_norm (eager and torch.compile).
"""
from __future__ import annotations

import dataclasses
import functools

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _rowwise as rw
from recipes import _row_split as rs
from recipes import _rowwise_kernel as rk



CTA_THREADS = 512    # rows share CTAs of 512 threads: two CTAs an SM, out of phase


def split_for(n: int, itemsize: int) -> rs.RowSplit:
    """The work split of rows of n columns: rs.persistent_split's (16 values a thread, up to
    1024 threads a row) with rows sharing CTAs of CTA_THREADS = 512 threads (up to 8192
    16-byte columns a row): two CTAs an SM, so one's accumulator traffic in shared memory and
    barriers overlap the other's loads (one 1024-thread CTA an SM ran 32768x4096 at 0.76 of
    quack); its columns walked in two sub-tiles where K allows (half the values live at once:
    x, dy, weight and the two running sums fit 64 registers)."""
    s = rs.split(n, itemsize, rs.PERSISTENT_VALUES, CTA_THREADS, "layernorm_backward",
                 rs.PERSISTENT_THREADS, min_threads=rs.PERSISTENT_MIN_THREADS)
    return dataclasses.replace(s, K=s.K // 2, SUBS=2) if s.K % 2 == 0 else s


def constexprs(s: rs.RowSplit, stats: bool) -> dict:
    """The kernel's constexprs for a split (the statistics given or recomputed)."""
    return {**s.constexprs(), "SUBS": s.SUBS, "STATS": stats}


def _body(dy: lk.Pointer[lk.bf16], x: lk.Pointer[lk.bf16], w: lk.Pointer[lk.bf16],
          mean: lk.Pointer[lk.f32], rstd: lk.Pointer[lk.f32], dx: lk.Pointer[lk.bf16],
          partial: lk.Pointer[lk.f32], m: lk.i32, nv: lk.i32,
          eps: lk.f32, rounds: lk.i32, ctas: lk.i32, P: lk.constexpr, ROWS: lk.constexpr,
          C: lk.constexpr, K: lk.constexpr, CLUSTER: lk.constexpr, VEC: lk.constexpr,
          SUBS: lk.constexpr, STATS: lk.constexpr):
    # the CTA's columns: SUBS sub-tiles of row_layout(P, ROWS, C, K), walked one after another
    tv = rk.row_layout(P, ROWS, C, K)
    n = nv * VEC
    inv_n = 1.0 / lk.cast(n, lk.f32)
    acc_w = [rk.Accumulator(P, ROWS, C, K, f"dweight{j}") for j in range(SUBS)]
    acc_b = [rk.Accumulator(P, ROWS, C, K, f"dbias{j}") for j in range(SUBS)]
    # the exchanges' buffers are doubled by round parity (rk.cluster_exchange): a round writes
    # the copy its peers read two rounds ago, so no exchange needs a first cluster barrier
    rk.peers_started(CLUSTER)
    for i in lk.range(0, rounds):
        parity = i % 2
        row = rk.row_block(CLUSTER) + i * ctas     # past the last tile: every access masked
        X, DY, W = ([view(t, m, n, tv, row, CLUSTER, j, SUBS) for j in range(SUBS)]
                    for view, t in ((rk.rows_view, x), (rk.rows_view, dy), (rk.columns_view, w)))

        def over_subtiles(term):                    # sum_j term(j), elementwise
            total = term(0)
            for j in range(1, SUBS):
                total = total + term(j)
            return total

        def load(views, j):
            return lk.cast(lk.load(views[j]), lk.f32)
        if STATS:
            mu = lk.broadcast(lk.load(rk.scalars_view(mean, m, P, ROWS, row)), tv)
            r = lk.broadcast(lk.load(rk.scalars_view(rstd, m, P, ROWS, row)), tv)
        else:                                       # the forward's two-pass statistics
            (total,) = rk.row_sums([over_subtiles(lambda j: load(X, j))], row, P, ROWS,
                                   CLUSTER, 0, start=False, parity=parity)
            mu = lk.broadcast(total * inv_n, tv)

            def squares(j):
                d = lk.where(lk.in_bounds(X[j]), load(X, j) - mu, 0.0)
                return d * d
            (var,) = rk.row_sums([over_subtiles(squares)], row, P, ROWS, CLUSTER, 1,
                                 start=False, parity=parity)
            r = lk.broadcast(lk.rsqrt(var * inv_n + eps), tv)

        def xhat_and_g(j):                          # loaded again after the row sums: the
            dyv = load(DY, j)                       # barriers end their registers' lifetime
            return dyv, (load(X, j) - mu) * r, dyv * load(W, j)
        sum_g = sum_gx = None                       # sum_j g and g * xhat, elementwise
        for j in range(SUBS):
            _, xhat, g = xhat_and_g(j)
            sum_g = g if j == 0 else sum_g + g
            sum_gx = g * xhat if j == 0 else lk.fma(g, xhat, sum_gx)
        sum_g, sum_gx = rk.row_sums([sum_g, sum_gx], row, P, ROWS, CLUSTER, 2, start=False,
                                    parity=parity)
        for j in range(SUBS):
            dyv, xhat, g = xhat_and_g(j)
            acc_w[j].put(lk.fma(dyv, xhat, acc_w[j].get()))
            acc_b[j].put(acc_b[j].get() + dyv)
            dxv = (g - (lk.broadcast(sum_g, tv) + xhat * lk.broadcast(sum_gx, tv)) * inv_n) * r
            lk.store(rk.rows_view(dx, m, n, tv, row, CLUSTER, j, SUBS), lk.cast(dxv, dx.dtype))
    for j in range(SUBS):                           # partials (2, ctas, n): dweight, dbias
        acc_w[j].store_rows_summed(partial, 2 * ctas, n, CLUSTER, 0, j, SUBS)
        acc_b[j].store_rows_summed(partial, 2 * ctas, n, CLUSTER, ctas, j, SUBS)


def kernel_for(xdt, wdt, s: rs.RowSplit) -> lk.Kernel:
    """The kernel for x's and weight's dtypes and the split's block size and cluster."""
    return rk.make_kernel(_body, f"layernorm_backward_{rk._name(xdt)}_{rk._name(wdt)}"
                                 f"_w{s.num_warps}_c{s.CLUSTER}", s.num_warps, s.CLUSTER,
                          (("dy", xdt), ("x", xdt), ("w", wdt), ("dx", xdt)))


def check_arguments(dy, x, weight, mean, rstd, eps) -> tuple[int, int]:
    """(m, n) after checking layernorm_backward's arguments (TypeError / ValueError naming
    the argument and the rule)."""
    what = "layernorm_backward"
    rw.check_tensor(what, "x", x)
    m, n = rw.rows_and_columns(what, x.shape)
    split_for(n, rw.lk_dtype(x).nbytes)
    rw.check_tensor(what, "dy", dy, x.shape, (str(x.dtype),), x.device)
    rw.check_tensor(what, "weight", weight, (n,), (str(x.dtype), "torch.float32"), x.device)
    if (mean is None) != (rstd is None):
        raise ValueError(f"{what}: give both mean and rstd (the forward's statistics) or "
                         f"neither (recomputed from x), got mean={type(mean).__name__}, "
                         f"rstd={type(rstd).__name__}")
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t is not None:
            rw.check_tensor(what, name, t, x.shape[:-1], ("torch.float32",), x.device)
    rw.check_eps(what, eps)
    return m, n


def launches(dy, x, weight, mean, rstd, dx, sums, floats, m: int, n: int, eps: float,
             dtypes: tuple, ctas: int, s: rs.RowSplit | None = None,
             sum_warps: int = rk.SUM_WARPS) -> list:
    """[(kernel, grid, args, constexprs)]: (dx, dweight, dbias) of layernorm_backward over (m,
    n) rows by `ctas` persistent CTAs (clusters), then the column sums of their partials (CTAs
    of sum_warps warps) into the (2, n) `sums` (dweight, dbias); mean and rstd the forward's
    or both None (recomputed); dtypes = (x's, weight's) lk dtypes; tensors of any kind the
    launcher takes (CUDA torch tensors, the interpreter's arrays), f32 buffers from
    floats(count); the split `s` or split_for(n, x's itemsize). The one description of the
    launch: the GPU path, check_cpu and layoutkit.torch all run it."""
    xdt, wdt = dtypes
    s = s or split_for(n, xdt.nbytes)
    partial = floats(partial_floats(ctas, n))
    unused = floats(1) if mean is None else None      # the statistics' stand-in when absent
    args = (*backward_tensors(dy, x, weight, mean, rstd, dx, partial, unused), m, n // s.VEC,
            eps, -(-s.row_tiles(m) // ctas), ctas)
    column_sum, grid, sum_constexprs = rk.column_sum_launch(wdt, 2, ctas, n, sum_warps)
    return [(kernel_for(xdt, wdt, s), s.CLUSTER * ctas, args, constexprs(s, mean is not None)),
            (column_sum, grid, (partial, sums, 2, ctas, n), sum_constexprs)]


MAIN_TENSORS, SUM_TENSORS = 7, 2   # launches' tensors: backward_tensors(...); the column
                                   # sums' (partial, sums)


def backward_tensors(dy, x, weight, mean, rstd, dx, partial, unused) -> tuple:
    """The kernel's tensor arguments in its order (absent statistics: `unused` in their place,
    unread)."""
    return (dy, x, weight, unused if mean is None else mean, unused if rstd is None else rstd,
            dx, partial)


def partial_floats(ctas: int, n: int) -> int:
    """The f32 entries of the partials: (2, ctas, n), dweight's and dbias'."""
    return 2 * ctas * n


_CTAS: dict = {}                 # (shape, dtypes, statistics given, device) -> clusters
MAX_PLANS = 256


def persistent_ctas(dy, x, weight, stats: bool, m: int, n: int) -> int:
    """The persistent grid on x's device: as many CTAs (clusters) as are resident at once, at
    most one per row tile (kept per shape, dtypes, statistics and device)."""
    key = (x.shape, x.dtype, weight.dtype, stats, x.device)
    if key not in _CTAS:
        import torch
        s = split_for(n, rw.lk_dtype(x).nbytes)
        kernel = kernel_for(rw.lk_dtype(x), rw.lk_dtype(weight), s)
        probe = torch.empty(1, device=x.device, dtype=torch.float32)
        resident = rw.resident_ctas(kernel, (dy, x, weight, probe, probe, dy, probe, m,
                                             n // s.VEC, 1e-5, 2, 3), constexprs(s, stats),
                                    s.CLUSTER, x.device)
        if len(_CTAS) >= MAX_PLANS:
            _CTAS.clear()
        _CTAS[key] = max(1, min(s.row_tiles(m), resident // s.CLUSTER))
    return _CTAS[key]


def layernorm_backward(dy, x, weight, mean=None, rstd=None, eps: float = 1e-5):
    """(dx, dweight, dbias) of y = layer_norm(x, (n,), weight, bias, eps) given dy; mean and
    rstd are the forward's per-row statistics (f32) or None (recomputed from x and eps)."""
    torch = require_torch("recipes.layernorm_backward.layernorm_backward")
    plain = _plainly_valid(dy, x, weight, mean, rstd, eps, torch)
    if not plain:
        check_arguments(dy, x, weight, mean, rstd, eps)     # every rule, each worded
    key = (x.shape, x.dtype, weight.dtype, mean is not None, float(eps), x.get_device())
    plan = _PLANS.get(key)
    if plan is None:
        if plain:
            check_arguments(dy, x, weight, mean, rstd, eps)  # the rules the key fixes
        plan = _plan(key, dy, x, weight, mean, rstd, float(eps))
    dx = torch.empty_like(x)
    count, unused, steps, device = plan
    if not steps:                                   # x is empty
        return dx, torch.zeros_like(weight), torch.zeros_like(weight)
    sums = torch.empty((2, x.shape[-1]), device=device, dtype=weight.dtype)
    partial = torch.empty(count, device=device, dtype=torch.float32)
    (main, rest), (column_sum, sum_rest) = steps
    main(*backward_tensors(dy, x, weight, mean, rstd, dx, partial, unused), *rest)
    column_sum(partial, sums, *sum_rest)
    return dx, sums[0], sums[1]


_PLANS: dict = {}   # (shape, dtypes, statistics given, eps, device) -> plan


def _plainly_valid(dy, x, weight, mean, rstd, eps, torch) -> bool:
    """Whether check_arguments' per-call rules certainly hold (exact contiguous CUDA torch
    tensors on x's device: dy of x's shape and dtype, weight a vector of n, mean and rstd both
    absent or both f32 of x's rows; eps a positive float); False sends the call to
    check_arguments. The rules a plan's key fixes (dtypes, row length) were checked when it was
    made."""
    if not (type(x) is torch.Tensor and x.is_cuda and x.is_contiguous() and x.dim() and
            type(eps) is float and eps > 0 and (mean is None) == (rstd is None)):
        return False
    device, rows = x.get_device(), x.shape[:-1]
    return rw.plain_like(dy, x.dtype, x.shape, device, torch) and \
        rw.plain_vector(weight, x.shape[-1], device, torch) and \
        (mean is None or (rw.plain_like(mean, torch.float32, rows, device, torch) and
                          rw.plain_like(rstd, torch.float32, rows, device, torch)))


def _plan(key: tuple, dy, x, weight, mean, rstd, eps: float) -> tuple:
    """(the partials' f32 count, the statistics' stand-in or None, rw.planned steps of
    `launches`: the persistent kernel, the column sums, () when x is empty; x's device) for
    checked arguments, kept as _PLANS[key]."""
    m, n = rw.rows_and_columns("layernorm_backward", x.shape)
    plan = (0, None, (), x.device)
    if m and n:
        ctas = persistent_ctas(dy, x, weight, mean is not None, m, n)
        floats = rw.cuda_floats(x.device)
        unused = floats(1) if mean is None else None
        steps = launches(dy, x, weight, mean, rstd, x, weight, lambda count: unused, m, n, eps,
                         (rw.lk_dtype(x), rw.lk_dtype(weight)), ctas)   # tensors: stand-ins
        plan = (partial_floats(ctas, n), unused, rw.planned(steps, (MAIN_TENSORS, SUM_TENSORS)),
                x.device)
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan
    return plan


def reference(dy, x, weight, eps=1e-5):
    """(dx, dweight, dbias) in float64 numpy, from x (the statistics recomputed)."""
    n = x.shape[-1]
    centred = x - x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / (((centred ** 2).mean(axis=-1, keepdims=True) + eps) ** 0.5)
    xhat = centred * rstd
    g = dy * weight
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) -
                 xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).reshape(-1, n).sum(axis=0), dy.reshape(-1, n).sum(axis=0)


def statistics(x, eps=1e-5):
    """(mean, rstd) per row in float64 numpy."""
    mean = x.mean(axis=-1)
    return mean, 1.0 / ((((x - mean[..., None]) ** 2).mean(axis=-1) + eps) ** 0.5)


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx}, bf16, 1k to 128k columns,
    statistics recomputed and given."""
    ptr, f32p = lk.Pointer[lk.bf16], lk.Pointer[lk.f32]
    result = {}
    for n, stats in ((1024, False), (4096, False), (4096, True), (32768, False),
                     (131072, False), (131072, True)):
        s = split_for(n, 2)
        result[f"layernorm_backward n={n}{' stats' if stats else ''}"] = \
            kernel_for(lk.bf16, lk.bf16, s).ptx(ptr, ptr, ptr, f32p, f32p, ptr, f32p, 4096,
                                                n // s.VEC, 1e-5, 4, 132,
                                                **constexprs(s, stats))
    return result


def cpu_case(rng, dtype, m, n, s, ctas: int, stats: bool) -> float:
    """One case on the interpreter (the kernel, then the column sum; two interleavings)
    against float64 numpy: the worst error relative to each output's largest value."""
    import numpy as np
    x = rw.host_array(rng.standard_normal((m, n)) * 2 + rng.standard_normal((m, 1)) * 8, dtype)
    dy = rw.host_array(rng.standard_normal((m, n)), dtype)
    w = rw.host_array(rng.standard_normal(n), dtype)
    xf, dyf, wf = (rw.float64_of(t, dtype) for t in (x, dy, w))
    mean, rstd = (v.astype(np.float32) for v in statistics(xf))
    dx = rw.host_array(np.zeros((m, n)), dtype)
    sums = rw.host_array(np.zeros((2, n)), dtype)
    got = rw.run_on_cpu(launches(dy, x, w, *((mean, rstd) if stats else (None, None)), dx, sums,
                                 rw.host_floats, m, n, 1e-5, (dtype, dtype), ctas, s,
                                 sum_warps=2), {"dx": dx, "sums": sums})
    want = reference(dyf, xf, wf)
    worst = max(rw.relative_to_max(rw.float64_of(g, dtype), w_)
                for g, w_ in ((got["dx"], want[0]), (got["sums"][0], want[1]),
                              (got["sums"][1], want[2])))
    assert worst <= rw.tolerance(dtype), \
        f"layernorm_backward {dtype} ({m}, {n}) {s} stats={stats}: error {worst:.3g}"
    return worst


def cpu_cases() -> list:
    """The interpreter's cases (dtype, m, n, split, ctas, statistics given): a warp, a CTA and a
    cluster per row, ragged m and n, several persistent rounds, at sizes it runs in seconds."""
    cluster = rs.split(700, 2, 8, 64, "t", max_threads=64)
    return [(lk.bf16, 9, 100, rs.split(100, 2, 16, 128, "t"), 2, False),
            (lk.f32, 3, 601, rs.split(601, 4, 16, 128, "t"), 2, True),
            (lk.bf16, 3, 700, cluster, 2, False), (lk.bf16, 2, 700, cluster, 1, True)]


def check_cpu(seed: int = 0) -> float:
    """Run cpu_cases on the CPU interpreter (race checking on, two interleavings that must
    agree bit for bit) and compare with float64 numpy (statistics recomputed and given);
    returns the worst error relative to each output's largest value."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return max(cpu_case(rng, *case) for case in cpu_cases())


def check(shapes=rw.CHECK_SHAPES, dtypes=("bfloat16", "float32"), seed: int = 0) -> float:
    """Random rows offset far from 0, weights and upstream gradients against float64, with
    the statistics recomputed and given; returns the worst error relative to each output's
    largest value (AssertionError past rw.tolerance)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    worst = 0.0
    for name in dtypes:
        dtype = getattr(torch, name)
        for m, n in shapes:
            offset = torch.randn(m, 1, device="cuda", generator=gen) * 8
            x = (torch.randn(m, n, device="cuda", generator=gen) * 2 + offset).to(dtype)
            dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
            w = torch.randn(n, device="cuda", generator=gen).to(dtype)
            xf, dyf, wf = (t.double().cpu().numpy() for t in (x, dy, w))
            want = reference(dyf, xf, wf)
            mean, rstd = (torch.from_numpy(v).float().cuda() for v in statistics(xf))
            for given in (False, True):
                got = layernorm_backward(dy, x, w, *((mean, rstd) if given else ()))
                for what, g, w_ in zip(("dx", "dweight", "dbias"), got, want):
                    err = rw.relative_to_max(g.double().cpu().numpy(), w_)
                    assert err <= rw.tolerance(rw.DTYPES[str(dtype)]), \
                        f"layernorm_backward {name} ({m}, {n}) stats given={given}: {what} " \
                        f"error {err:.3g}"
                    worst = max(worst, err)
    return worst


@functools.lru_cache(maxsize=None)
def compiled_layer_norm(n: int):
    """torch.compile of F.layer_norm over rows of n (one compiled function per row length)."""
    import torch
    return rw.compiled(lambda a, b, c: torch.nn.functional.layer_norm(a, (n,), b, c, 1e-5))


def benchmark_rows(shapes=rw.BENCH_SHAPES, reps: int = 30, dtype: str = "bfloat16",
                   torch_compile: bool = True) -> tuple[list, dict]:
    """Time layernorm_backward (the forward's mean and rstd given) on random (m, n) rows
    against quack's layernorm_bwd (which takes f32 weights) and torch's autograd of
    F.layer_norm (eager, torch.compile) in one run; returns (rows, skipped) for
    rw.markdown_table (GB/s counts reading x, dy, weight, mean, rstd and writing dx, dweight,
    dbias once)."""
    import torch
    F = torch.nn.functional
    qk, skipped = rw.quack_peer("rmsnorm")
    rows = []
    for m, n in shapes:
        dt = getattr(torch, dtype)
        x = (torch.randn(m, n, device="cuda") + 3).to(dt)
        dy = torch.randn(m, n, device="cuda").to(dt)
        w, b = (torch.randn(n, device="cuda").to(dt) for _ in range(2))
        xf = x.float()
        mean = xf.mean(-1)
        rstd = torch.rsqrt(xf.var(-1, unbiased=False) + 1e-5)
        calls = {"layoutkit": lambda: layernorm_backward(dy, x, w, mean, rstd)}
        if qk:
            w32 = w.float()
            calls["quack"] = lambda: qk.layernorm_bwd(x, w32, dy, rstd, mean)
        fns = {"torch": lambda a, c, d: F.layer_norm(a, (n,), c, d, 1e-5)}
        if torch_compile:
            fns["torch.compile"] = compiled_layer_norm(n)
        calls.update(rw.autograd_calls(fns, (x, w, b), dy, skipped, f"layernorm bwd {m}x{n}"))
        item = x.element_size()
        rows.append(rw.time_row_op("layernorm bwd", x, calls,
                                   3 * m * n * item + 3 * n * item + 8 * m, reps, skipped))
    return rows, skipped


benchmark = rw.benchmark_printing(benchmark_rows)


if __name__ == "__main__":
    print(f"max error {check():.3g}")
    benchmark()
