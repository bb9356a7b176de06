"""Row softmax backward: dx = y * (dy - sum(dy * y, row)) for y = softmax(x) over the last dim
of a row-major contiguous (m, n) matrix (or N-D), bf16 / fp16 / f32 in and out, f32 math.

Pipeline (one pass, every row value in registers; recipes/_row_split.py has the split,
recipes/_rowwise_kernel.py the cluster exchange and the views):

    y, dy --ld 16 B--> registers (-> f32)
      dot = sum(dy * y): in-thread tree -> shfl.bfly -> [smem across warps]
            -> [past 16k columns: a cluster's CTAs exchange their parts through distributed
               shared memory: st.async completing on each receiver's mbarrier]
      dx = y * (dy - dot) --st 16 B--> global

Work split (recipes/_row_split.split): at most 32 values a thread (y and dy both live:
~80 registers) and 512 threads a row, 8 or more threads a row, rows sharing CTAs of 128 threads
(fewer rows a CTA for a small m), one CTA per row up to 16384 columns, a cluster of up to 8
CTAs per row up to 131072.

Constraints: dy and y contiguous CUDA tensors of one shape and dtype (bf16, fp16, f32);
1 <= n <= 131072. 16-byte accesses need n % 8 == 0 (16-bit) / n % 4 == 0 (f32).

Benchmark interface (benchmarks/bench_rows.py): `benchmark_rows(shapes, reps)` returns (rows,
skipped) for recipes/_rowwise.markdown_table, timing this against quack's softmax_bwd and
torch's autograd of torch.softmax (eager and torch.compile).
"""
from __future__ import annotations

import functools

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _rowwise as rw
from recipes import _row_split as rs
from recipes import _rowwise_kernel as rk

VALUES, THREADS = 32, 512               # a thread / a row's threads (y and dy both live)
CTA_THREADS = 128


def split_for(n: int, itemsize: int, m: int | None = None) -> rs.RowSplit:
    """The work split of rows of n columns (recipes/_row_split.split), for m rows if given."""
    return rs.split(n, itemsize, VALUES, CTA_THREADS, "softmax_backward", THREADS, m=m,
                    target_ctas=rs.TARGET_CTAS)


def _body(dy: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], dx: lk.Pointer[lk.bf16],
          m: lk.i32, nv: lk.i32, P: lk.constexpr,
          ROWS: lk.constexpr, C: lk.constexpr, K: lk.constexpr, CLUSTER: lk.constexpr,
          VEC: lk.constexpr):
    tv = rk.row_layout(P, ROWS, C, K)
    n = nv * VEC
    row = rk.row_block(CLUSTER)
    full = rk.exchange_barrier(CLUSTER, ROWS, "row_sums_full")
    raw = [lk.load(rk.rows_view(t, m, n, tv, row, CLUSTER)) for t in (y, dy)]
    rk.loads_issued(CLUSTER)                       # a cluster's peers, while y, dy are in flight
    yv, dyv = (lk.cast(t, lk.f32) for t in raw)    # (their first use: after the barrier)
    (dot,) = rk.row_sums([dyv * yv], row, P, ROWS, CLUSTER, start=False, barrier=full)
    lk.store(rk.rows_view(dx, m, n, tv, row, CLUSTER),
             lk.cast(yv * (dyv - lk.broadcast(dot, tv)), dx.dtype))


def kernel_for(dtype, s: rs.RowSplit) -> lk.Kernel:
    """The kernel for a dtype and the split's block size and cluster."""
    return rk.make_kernel(_body, f"softmax_backward_{rk._name(dtype)}_w{s.num_warps}"
                                 f"_c{s.CLUSTER}", s.num_warps, s.CLUSTER,
                          (("dy", dtype), ("y", dtype), ("dx", dtype)))


def check_arguments(dy, y) -> tuple[int, int]:
    """(m, n) after checking softmax_backward's arguments (TypeError / ValueError naming the
    argument and the rule)."""
    rw.check_tensor("softmax_backward", "y", y)
    m, n = rw.rows_and_columns("softmax_backward", y.shape)
    split_for(n, rw.lk_dtype(y).nbytes)
    rw.check_tensor("softmax_backward", "dy", dy, y.shape, (str(y.dtype),), y.device)
    return m, n


def launches(dy, y, dx, floats, m: int, n: int, dtype, s: rs.RowSplit | None = None) -> list:
    """[(kernel, grid, args, constexprs)]: dx = softmax_backward(dy, y) over (m, n) rows of
    `dtype` (tensors of any kind the launcher takes: CUDA torch tensors, or the interpreter's
    arrays; `floats`, the other row recipes' f32 buffers, is not called here), with the split
    `s` or split_for(n, dtype.nbytes, m). The one description of the launch: the GPU path, check_cpu
    and layoutkit.torch's CPU path all run it."""
    s = s or split_for(n, dtype.nbytes, m)
    return [(kernel_for(dtype, s), s.CLUSTER * s.row_tiles(m), (dy, y, dx, m, n // s.VEC),
             s.constexprs())]


_PLANS: dict = {}   # (shape, dtype, device) -> (rw.PlannedLaunch or None, sizes)
MAX_PLANS = 256


def _plan(key: tuple, dy, y, dx) -> tuple:
    """What softmax_backward launches for checked arguments of this key: `launches`' kernel on
    its grid with its constexprs (rw.PlannedLaunch; None: y is empty) and the sizes after the
    tensors."""
    m, n = rw.rows_and_columns("softmax_backward", y.shape)
    plan = (None, ())
    if m and n:
        ((kernel, grid, args, constexprs),) = launches(dy, y, dx, rw.cuda_floats(y.device), m, n,
                                                       rw.lk_dtype(y))
        sizes = args[3:]                        # after dy, y, dx: m, n // VEC
        plan = (rw.PlannedLaunch(kernel, grid, rw.positional_constexprs(kernel, args, constexprs)),
                sizes)
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan
    return plan


def softmax_backward(dy, y):
    """dx of y = softmax(x, dim=-1) given the upstream gradient dy (y's shape and dtype)."""
    torch = require_torch("recipes.softmax_backward.softmax_backward")
    plain = type(y) is torch.Tensor and y.is_cuda and y.is_contiguous() and \
        rw.plain_like(dy, y.dtype, y.shape, y.get_device(), torch)
    if not plain:
        check_arguments(dy, y)                  # every rule, each worded
    key = (y.shape, y.dtype, y.get_device())
    plan = _PLANS.get(key)
    if plan is None and plain:
        check_arguments(dy, y)                  # the rules the key fixes (dtype, row length)
    dx = torch.empty_like(y)
    if plan is None:
        plan = _plan(key, dy, y, dx)
    launch, sizes = plan
    if launch is not None:
        launch(dy, y, dx, *sizes)
    return dx


def reference(dy, y):
    """dx in float64 numpy."""
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx}, bf16, 1k to 128k columns."""
    ptr = lk.Pointer[lk.bf16]
    result = {}
    for n in (1024, 4096, 16384, 32768, 131072):
        s = split_for(n, 2)
        result[f"softmax_backward n={n}"] = kernel_for(lk.bf16, s).ptx(
            ptr, ptr, ptr, 4096, n // s.VEC, **s.constexprs())
    return result


def _softmax_rows(rng, m, n):
    import numpy as np
    x = rng.standard_normal((m, n)) * 3
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cpu_cases() -> list:
    """The interpreter's cases (dtype, m, n, split): a warp (several rows a warp), a CTA and a
    cluster per row, ragged m and n, at sizes it runs in about a second."""
    return [(lk.bf16, 5, 100, split_for(100, 2)), (lk.f32, 3, 1001, split_for(1001, 4)),
            (lk.bf16, 2, 700, rs.split(700, 2, 8, 64, "t", max_threads=64)),
            (lk.f16, 7, 24, split_for(24, 2))]


def cpu_case(rng, dtype, m, n, s) -> float:
    """One case on the interpreter (two interleavings) against float64 numpy: the error
    relative to the largest |dx| (AssertionError past rw.tolerance)."""
    import numpy as np
    y = rw.host_array(_softmax_rows(rng, m, n), dtype)
    dy = rw.host_array(rng.standard_normal((m, n)), dtype)
    dx = rw.host_array(np.zeros((m, n)), dtype)
    got = rw.run_on_cpu(launches(dy, y, dx, rw.host_floats, m, n, dtype, s), {"dx": dx})
    want = reference(rw.float64_of(dy, dtype), rw.float64_of(y, dtype))
    err = rw.relative_to_max(rw.float64_of(got["dx"], dtype), want)
    assert err <= rw.tolerance(dtype), f"softmax_backward {dtype} ({m}, {n}) {s}: {err:.3g}"
    return err


def check_cpu(seed: int = 0) -> float:
    """Run cpu_cases on the CPU interpreter (race checking on, two interleavings that must
    agree bit for bit) and compare with float64 numpy; returns the worst error relative to the
    largest |dx|."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return max(cpu_case(rng, *case) for case in cpu_cases())


def check(shapes=rw.CHECK_SHAPES, dtypes=("bfloat16", "float32"), seed: int = 0) -> float:
    """Random softmax rows and upstream gradients against float64; returns the worst error
    relative to the largest |dx| (AssertionError past rw.tolerance)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    worst = 0.0
    for name in dtypes:
        dtype = getattr(torch, name)
        for m, n in shapes:
            y = torch.softmax(torch.randn(m, n, device="cuda", generator=gen) * 3, -1).to(dtype)
            dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
            want = reference(dy.double().cpu().numpy(), y.double().cpu().numpy())
            err = rw.relative_to_max(softmax_backward(dy, y).double().cpu().numpy(), want)
            assert err <= rw.tolerance(rw.DTYPES[str(dtype)]), \
                f"softmax_backward {name} ({m}, {n}): error {err:.3g}"
            worst = max(worst, err)
    return worst


@functools.lru_cache(maxsize=None)
def compiled_softmax(n: int):
    """torch.compile of torch.softmax over rows of n (one compiled function per row length,
    so no shape runs past dynamo's recompile limit into eager)."""
    import torch
    return rw.compiled(lambda a: torch.softmax(a, -1))


def benchmark_rows(shapes=rw.BENCH_SHAPES, reps: int = 30, dtype: str = "bfloat16",
                   torch_compile: bool = True) -> tuple[list, dict]:
    """Time softmax_backward on random (m, n) rows against quack's softmax_bwd and torch's
    autograd of torch.softmax (eager, torch.compile) in one run; returns (rows, skipped) for
    rw.markdown_table (GB/s counts reading y and dy and writing dx once)."""
    import torch
    qk, skipped = rw.quack_peer("softmax")
    rows = []
    for m, n in shapes:
        dt = getattr(torch, dtype)
        x = torch.randn(m, n, device="cuda").to(dt)
        y, dy = torch.softmax(x, -1), torch.randn(m, n, device="cuda").to(dt)
        calls = {"layoutkit": lambda: softmax_backward(dy, y)}
        if qk:
            calls["quack"] = lambda: qk.softmax_bwd(dy, y)
        fns = {"torch": lambda a: torch.softmax(a, -1)}
        if torch_compile:
            fns["torch.compile"] = compiled_softmax(n)
        calls.update(rw.autograd_calls(fns, (x,), dy, skipped, f"softmax bwd {m}x{n}"))
        rows.append(rw.time_row_op("softmax bwd", y, calls, 3 * m * n * y.element_size(),
                                   reps, skipped))
    return rows, skipped


benchmark = rw.benchmark_printing(benchmark_rows)


if __name__ == "__main__":
    print(f"max error {check():.3g}")
    benchmark()
