"""Row RMSNorm, forward and backward, for a row-major contiguous (m, n) matrix (or N-D, over the
last dim) of bf16, fp16 or f32, f32 math, outputs in the input's dtype:

    forward   h = x (+ residual);  rstd = 1 / sqrt(mean(h^2) + eps);  y = h * rstd (* weight)
              (returns y; with return_residual=True also h, the residual stream models carry
              on, in x's dtype; with return_rstd=True also rstd, f32 per row, for the backward)
    backward  xhat = h * rstd, g = dy * weight;  dx = rstd * (g - xhat * mean(g * xhat))
              dweight = sum over rows of dy * xhat (f32 partials per persistent CTA, then a
              column sum in a fixed order: deterministic, no atomics)

Pipeline (one pass over the inputs, every row value in registers; recipes/_row_split.py has the
work split, recipes/_rowwise_kernel.py the cluster exchange and the column sum):

  forward, one row tile per CTA (a cluster per row past 16k columns):
    global --ld 16 B--> registers (-> f32), + residual  [--st--> residual out]
      (past 16k columns, forward_staged: global --cp.async 16 B--> shared memory, read into
      registers here and again after the sums: no row held in registers across them)
      sum(h^2): in-thread tree -> shfl.bfly -> [smem across warps] -> [cluster: st.async into
      every CTA's shared memory, on its mbarrier]   rstd = rsqrt(sum / n + eps)
      weight --ld--> (after the statistics: short register lifetimes; beside x for grids of
      at most one CTA an SM, forward_early_weight: one memory latency, not two)
      y = h * rstd * w --st 16 B--> global   [rstd --st--> global]
  backward, persistent CTAs (as many as are resident), each over rows g, g + G, ...:
      x, dy, weight, rstd --ld--> registers; acc += dy * xhat (the CTA's dweight partial, f32
      in shared memory); c = sum(g * xhat) / n (same tree; cluster exchange past 16k columns)
      x, dy, weight --ld again (L1)--> dx = rstd * (g - xhat * c) --st--> global
      (reloading after the row sum frees 32 registers across its barriers)
    then partial (G, n) f32 --column sum--> dweight (n) in weight's dtype.

Work split (recipes/_row_split.split): forward as recipes/_row_split.py's measured
heuristic, at most 64 values a thread and 256 threads a row (CTAs of 128-256 threads, several
per SM at different phases; 16384 columns a CTA; half the values for narrow accesses), fewer
rows per CTA for a small m; backward rs.persistent_split (16 values a thread: x, dy and the
temporaries in <= 64 registers at 1024 threads; the dweight partial in shared memory),
persistent CTAs of 1024 threads (16384 columns). Longer rows are split over a cluster of up to
8 CTAs: n <= 131072.

Constraints: x (and residual, dy) contiguous CUDA tensors of one dtype in bf16 / fp16 / f32;
weight a contiguous vector of n in x's dtype or f32, or None; eps > 0. 16-byte accesses need
n % 8 == 0 (bf16/fp16) or n % 4 == 0 (f32); other n use narrower accesses (correct, slower).

Host side: rmsnorm() keeps a plan per (shape, dtypes, weight and residual presence, outputs,
device): the kernel's launch for its grid, sizes and constexprs, made after check_forward;
later calls test the per-call rules in a few attribute reads and launch it (any other call
takes check_forward, whose errors name the rule).

Benchmark interface (benchmarks/bench_rows.py): `benchmark_rows(shapes, reps)` times forward
and backward against quack and torch (eager and torch.compile) on each (m, n) and returns
(rows, skipped): one dict per (op, shape) with {candidate}_ms / {candidate}_gbps keys, and the
candidates skipped with the reason; recipes/_rowwise.markdown_table prints them.
"""
from __future__ import annotations

import functools

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _rowwise as rw
from recipes import _row_split as rs
from recipes import _rmsnorm_kernels as kernels
from recipes import _rowwise_kernel as rk

FWD_VALUES, FWD_THREADS = 64, 256       # a thread / a row's threads: recipes/_row_split.py
FWD_CTA_THREADS = 128                    # (the forward heuristic measured on the H200)


def forward_split(n: int, itemsize: int, m: int | None = None) -> rs.RowSplit:
    """The forward's split of rows of n columns (recipes/_row_split.split), for m rows if given;
    half the values a thread when n forbids 16-byte accesses (each narrower access has its own
    address and predicate registers)."""
    s = rs.split(n, itemsize, FWD_VALUES, FWD_CTA_THREADS, "rmsnorm", FWD_THREADS, m=m,
                 target_ctas=rs.TARGET_CTAS)
    if s.VEC < s.C:
        s = rs.split(n, itemsize, FWD_VALUES // 2, FWD_CTA_THREADS, "rmsnorm", 2 * FWD_THREADS,
                     m=m, target_ctas=rs.TARGET_CTAS)
    return s


STAGED_FROM_CLUSTER = 2        # the forward stages its rows in shared memory from this cluster


def forward_staged(s: rs.RowSplit) -> bool:
    """Whether the forward of split `s` stages x (and the residual) in shared memory by
    cp.async and reads it back there twice (before and after the row sum) instead of holding
    the row in registers across the sum: rows split over a cluster (CLUSTER >=
    STAGED_FROM_CLUSTER) with 16-byte accesses. There the register-held row took 103
    registers at 256 threads (152 with a residual): 2 CTAs an SM (1), 64 KB of loads in
    flight, idle through each cluster exchange (0.83-0.93 of quack); staged, 58 registers
    (114) and 32 KB of shared memory a CTA: 4 CTAs an SM (2)."""
    return s.CLUSTER >= STAGED_FROM_CLUSTER and s.VEC == s.C


EARLY_WEIGHT_CTAS = rs.SMS      # grids of at most this many CTAs load the weight beside x


def forward_early_weight(s: rs.RowSplit, m: int, staged: bool | None = None) -> bool:
    """Whether the forward loads the weight beside x, before the row sum, instead of after it
    (short register lifetimes: more CTAs an SM), with 16-byte accesses (the narrow splits'
    512 threads cap ptxas at 128 registers: 65537 columns with a residual spilled): grids of
    at most EARLY_WEIGHT_CTAS CTAs (one an SM or fewer: no occupancy to lose; a few rows,
    where the weight's load after the statistics is a second memory latency on the
    critical path: 1 x 4096 3 -> 5 GB/s, quack's 5), and staged rows (the row is in shared
    memory: 58 -> 80 registers, still 3 CTAs an SM; 4096 x 131072 3758 -> 3862 GB/s, 1000 x
    32768 3273 -> 3347, 4096 x 32768 3732 -> 3709: H200, docs/PERFORMANCE.md). `staged`:
    whether the rows are (default: forward_staged(s))."""
    staged = forward_staged(s) if staged is None else staged
    return (s.CLUSTER * s.row_tiles(m) <= EARLY_WEIGHT_CTAS or staged) and s.VEC == s.C


def backward_split(n: int, itemsize: int) -> rs.RowSplit:
    """The backward's split of rows of n columns (rs.persistent_split)."""
    return rs.persistent_split(n, itemsize, "rmsnorm_backward")


def _dtypes(kind: str, xdt, wdt) -> tuple:
    if kind == "forward":
        return (("x", xdt), ("res", xdt), ("w", wdt), ("y", xdt), ("res_out", xdt))
    return (("dy", xdt), ("x", xdt), ("w", wdt), ("dx", xdt))


def kernel_for(kind: str, xdt, wdt, s: rs.RowSplit, max_registers: int | None = None
               ) -> lk.Kernel:
    """The forward or backward kernel for x's and weight's dtypes and the split's block size
    and cluster, its threads capped at max_registers if given (one Kernel per combination;
    constexprs specialize it further)."""
    body = kernels.forward_body if kind == "forward" else kernels.backward_body
    name = f"rmsnorm_{kind}_{rk._name(xdt)}_{rk._name(wdt)}_w{s.num_warps}_c{s.CLUSTER}" + \
        (f"_r{max_registers}" if max_registers else "")
    return rk.make_kernel(body, name, s.num_warps, s.CLUSTER, _dtypes(kind, xdt, wdt),
                          max_registers)


# --- host side ------------------------------------------------------------------------------

def check_forward(x, weight, residual, eps) -> tuple[int, int]:
    """(m, n) after checking rmsnorm's arguments (TypeError / ValueError naming the rule)."""
    rw.check_tensor("rmsnorm", "x", x)
    m, n = rw.rows_and_columns("rmsnorm", x.shape)
    forward_split(n, rw.lk_dtype(x).nbytes)             # the row length it can hold
    if residual is not None:
        rw.check_tensor("rmsnorm", "residual", residual, x.shape, (str(x.dtype),), x.device)
    if weight is not None:
        rw.check_tensor("rmsnorm", "weight", weight, (n,), (str(x.dtype), "torch.float32"),
                        x.device)
    rw.check_eps("rmsnorm", eps)
    return m, n


def forward_launches(x, residual, weight, y, h, rstd, floats, m: int, n: int, eps: float,
                     dtypes: tuple, s: rs.RowSplit | None = None,
                     staged: bool | None = None, early_weight: bool | None = None) -> list:
    """[(kernel, grid, args, constexprs)]: y = rmsnorm(x (+ residual)) (* weight) over (m, n)
    rows, h = x + residual stored where h is given, rstd where rstd is given (residual,
    weight, h, rstd: None when absent); dtypes = (x's, weight's) lk dtypes; tensors of any kind
    the launcher takes (CUDA torch tensors, the interpreter's arrays), f32 buffers from
    floats(count) (rstd's stand-in when absent); the split `s` or forward_split(n, x's
    itemsize, m), its rows staged in shared memory where `staged` says (default:
    forward_staged(s)), the weight loaded beside x where `early_weight` says (default:
    forward_early_weight(s, m, staged)). The one description of the launch: the GPU path,
    check_cpu and layoutkit.torch all run it."""
    xdt, wdt = dtypes
    s = s or forward_split(n, xdt.nbytes, m)
    flags = {**s.constexprs(), "RESIDUAL": residual is not None, "WEIGHT": weight is not None,
             "STORE_RESIDUAL": h is not None, "STORE_RSTD": rstd is not None,
             "STAGED": forward_staged(s) if staged is None else bool(staged)}
    flags["EARLY_WEIGHT"] = forward_early_weight(s, m, flags["STAGED"]) \
        if early_weight is None else bool(early_weight)
    args = (*forward_tensors(x, residual, weight, y, h, floats(1) if rstd is None else rstd),
            m, n // s.VEC, eps)
    return [(kernel_for("forward", xdt, wdt, s), s.CLUSTER * s.row_tiles(m), args, flags)]


FORWARD_TENSORS = 6      # forward_launches' args: forward_tensors(...), then m, n // VEC, eps


def forward_tensors(x, residual, weight, y, h, rstd) -> tuple:
    """The forward kernel's tensor arguments in its order, an absent one (None) replaced by a
    tensor its constexprs keep it from touching."""
    return (x, x if residual is None else residual, x if weight is None else weight, y,
            y if h is None else h, rstd)


def dtypes_of(x, weight) -> tuple:
    """(x's, weight's) lk dtypes of torch tensors (weight None: x's)."""
    return rw.lk_dtype(x), rw.lk_dtype(weight if weight is not None else x)


_FORWARD: dict = {}   # (shape, dtype, weight's dtype, residual, h, rstd, device) -> plan
MAX_PLANS = 256


def _plainly_valid(x, weight, residual, eps, torch) -> bool:
    """Whether the per-call rules of check_forward certainly hold (exact contiguous CUDA torch
    tensors, residual of x's shape and dtype, weight a vector of x's last extent, both on x's
    device, eps a positive float): the fast test before a plan is looked up. The rules a plan's
    key fixes (dtypes, row length) were checked when the plan was made; False sends the call to
    check_forward, which words the rule (or lets a valid call of another kind through)."""
    if not (type(x) is torch.Tensor and x.is_cuda and x.is_contiguous() and x.dim() and
            type(eps) is float and eps > 0):
        return False
    device = x.get_device()
    return (residual is None or rw.plain_like(residual, x.dtype, x.shape, device, torch)) and \
        (weight is None or rw.plain_vector(weight, x.shape[-1], device, torch))


def _forward_plan(key: tuple, x, weight, residual, y, h, rstd, eps: float) -> tuple:
    """(rw.PlannedLaunch or None when x is empty, (m, n // VEC), the f32 stand-in for an absent
    rstd or None, rstd's shape, x's device): forward_launches' launch for checked arguments
    with everything but the tensors and eps fixed, kept as _FORWARD[key]."""
    m, n = rw.rows_and_columns("rmsnorm", x.shape)
    rows = tuple(x.shape[:-1])                  # torch.empty parses a tuple faster than a Size
    plan = (None, (), None, rows, x.device)
    if m and n:
        ((kernel, grid, args, constexprs),) = forward_launches(
            x, residual, weight, y, h, rstd, rw.cuda_floats(x.device), m, n, eps,
            dtypes_of(x, weight))
        plan = (rw.PlannedLaunch(kernel, grid, rw.positional_constexprs(kernel, args, constexprs)),
                args[FORWARD_TENSORS:FORWARD_TENSORS + 2],
                args[FORWARD_TENSORS - 1] if rstd is None else None, rows, x.device)
    if len(_FORWARD) >= MAX_PLANS:
        _FORWARD.clear()
    _FORWARD[key] = plan
    return plan


def rmsnorm(x, weight=None, residual=None, eps: float = 1e-6, return_residual: bool = False,
            return_rstd: bool = False):
    """RMSNorm of x over its last dim (see the module docstring): y, or the tuple (y,
    [h = x + residual], [rstd]) with the parts asked for; x's dtype in and out."""
    torch = require_torch("recipes.rmsnorm.rmsnorm")
    plain = _plainly_valid(x, weight, residual, eps, torch)
    if not plain:
        check_forward(x, weight, residual, eps)         # every rule, each worded
    keep_h = bool(return_residual) and residual is not None
    key = (x.shape, x.dtype, None if weight is None else weight.dtype, residual is not None,
           keep_h, bool(return_rstd), x.get_device())
    plan = _FORWARD.get(key)
    if plan is None and plain:
        check_forward(x, weight, residual, eps)         # the rules the key fixes
    y = torch.empty_like(x)
    h = torch.empty_like(x) if keep_h else None
    if plan is None:                                # y stands in for rstd: only its presence
        plan = _forward_plan(key, x, weight, residual, y, h, y if return_rstd else None,
                             float(eps))
    launch, sizes, spare, rows, device = plan
    rstd = torch.empty(rows, device=device, dtype=torch.float32) if return_rstd else None
    if launch is not None:
        launch(*forward_tensors(x, residual, weight, y, h, spare if rstd is None else rstd),
               *sizes, float(eps))
    if return_residual and h is None:
        h = x                                       # no residual: the stream is x itself
    extra = ((h,) if return_residual else ()) + ((rstd,) if return_rstd else ())
    return (y, *extra) if extra else y


def check_backward(dy, x, weight, rstd) -> tuple[int, int]:
    """(m, n) after checking rmsnorm_backward's arguments."""
    rw.check_tensor("rmsnorm_backward", "x", x)
    m, n = rw.rows_and_columns("rmsnorm_backward", x.shape)
    backward_split(n, rw.lk_dtype(x).nbytes)
    rw.check_tensor("rmsnorm_backward", "dy", dy, x.shape, (str(x.dtype),), x.device)
    if weight is not None:
        rw.check_tensor("rmsnorm_backward", "weight", weight, (n,),
                        (str(x.dtype), "torch.float32"), x.device)
    rw.check_tensor("rmsnorm_backward", "rstd", rstd, x.shape[:-1], ("torch.float32",),
                    x.device)
    return m, n


def backward_launches(dy, x, weight, rstd, dx, dweight, floats, m: int, n: int, dtypes: tuple,
                      ctas: int, s: rs.RowSplit | None = None,
                      sum_warps: int = rk.SUM_WARPS) -> list:
    """[(kernel, grid, args, constexprs)]: (dx, dweight) of rmsnorm_backward over (m, n) rows
    by `ctas` persistent CTAs (clusters), then the column sum of their dweight partials (CTAs
    of sum_warps warps) into dweight (weight and dweight None without a weight); dtypes,
    tensors and floats as forward_launches'; the split `s` or backward_split(n, itemsize)."""
    xdt, wdt = dtypes
    s = s or backward_split(n, xdt.nbytes)
    partial = floats(partial_floats(ctas, n, weight))
    args = (*backward_tensors(dy, x, weight, rstd, dx, partial), m, n // s.VEC,
            -(-s.row_tiles(m) // ctas), ctas)
    launches = [(kernel_for("backward", xdt, wdt, s), s.CLUSTER * ctas, args,
                 {**s.constexprs(), "WEIGHT": weight is not None})]
    if weight is not None:
        kernel, grid, constexprs = rk.column_sum_launch(wdt, 1, ctas, n, sum_warps)
        launches.append((kernel, grid, (partial, dweight, 1, ctas, n), constexprs))
    return launches


def partial_floats(ctas: int, n: int, weight) -> int:
    """The f32 entries of the backward's dweight partials (one row of n per persistent CTA;
    a stand-in of 1 without a weight)."""
    return ctas * n if weight is not None else 1


BACKWARD_TENSORS, SUM_TENSORS = 6, 2   # backward_launches' tensors: backward_tensors(...);
                                       # the column sum's (partial, dweight)


def backward_tensors(dy, x, weight, rstd, dx, partial) -> tuple:
    """The backward kernel's tensor arguments in its order (no weight: x in its place, unread);
    the column sum's are (partial, dweight)."""
    return (dy, x, x if weight is None else weight, rstd, dx, partial)


_CTAS: dict = {}           # (shape, dtypes, device) -> the persistent grid's clusters


def persistent_ctas(dy, x, weight, rstd, m: int, n: int) -> int:
    """The backward's persistent grid on x's device: as many CTAs (clusters) as are resident
    at once, at most one per row tile (kept per shape, dtypes and device)."""
    key = (x.shape, x.dtype, None if weight is None else weight.dtype, x.device)
    if key not in _CTAS:
        import torch
        s = backward_split(n, rw.lk_dtype(x).nbytes)
        kernel = kernel_for("backward", *dtypes_of(x, weight), s)
        flags = {**s.constexprs(), "WEIGHT": weight is not None}
        probe = torch.empty(1, device=x.device, dtype=torch.float32)
        w = weight if weight is not None else x
        resident = rw.resident_ctas(kernel, (dy, x, w, rstd, dy, probe, m, n // s.VEC, 2, 3),
                                    flags, s.CLUSTER, x.device)
        if len(_CTAS) >= MAX_PLANS:
            _CTAS.clear()
        _CTAS[key] = max(1, min(s.row_tiles(m), resident // s.CLUSTER))
    return _CTAS[key]


def rmsnorm_backward(dy, x, weight, rstd):
    """(dx, dweight) of y = rmsnorm(x, weight) given dy and the forward's rstd (x here is the
    normalized input h = x + residual when a residual was added; dweight is None without a
    weight). dx in x's dtype, dweight in weight's."""
    torch = require_torch("recipes.rmsnorm.rmsnorm_backward")
    plain = _plainly_valid_backward(dy, x, weight, rstd, torch)
    if not plain:
        check_backward(dy, x, weight, rstd)             # every rule, each worded
    key = (x.shape, x.dtype, None if weight is None else weight.dtype, x.get_device())
    plan = _BACKWARD.get(key)
    if plan is None:
        if plain:
            check_backward(dy, x, weight, rstd)         # the rules the key fixes
        plan = _backward_plan(key, dy, x, weight, rstd)
    dx = torch.empty_like(x)
    count, steps, device = plan
    if not steps:                                   # x is empty
        return dx, (torch.zeros_like(weight) if weight is not None else None)
    dw = torch.empty_like(weight) if weight is not None else None
    partial = torch.empty(count, device=device, dtype=torch.float32)
    for (launch, rest), tensors in zip(
            steps, (backward_tensors(dy, x, weight, rstd, dx, partial), (partial, dw))):
        launch(*tensors, *rest)
    return dx, dw


_BACKWARD: dict = {}   # (shape, dtype, weight's dtype, device) -> (partial floats, steps)


def _plainly_valid_backward(dy, x, weight, rstd, torch) -> bool:
    """Whether the per-call rules of check_backward certainly hold (as _plainly_valid: dy of
    x's shape and dtype, rstd f32 of x's rows, all exact contiguous CUDA tensors on x's
    device); False sends the call to check_backward."""
    if not (type(x) is torch.Tensor and x.is_cuda and x.is_contiguous() and x.dim()):
        return False
    device = x.get_device()
    return rw.plain_like(dy, x.dtype, x.shape, device, torch) and \
        rw.plain_like(rstd, torch.float32, x.shape[:-1], device, torch) and \
        (weight is None or rw.plain_vector(weight, x.shape[-1], device, torch))


def _backward_plan(key: tuple, dy, x, weight, rstd) -> tuple:
    """(the partials' f32 count, rw.planned steps of backward_launches: the backward kernel,
    then the column sum with a weight, () when x is empty; x's device) for checked arguments,
    kept as _BACKWARD[key]."""
    m, n = rw.rows_and_columns("rmsnorm_backward", x.shape)
    plan = (0, (), x.device)
    if m and n:
        ctas = persistent_ctas(dy, x, weight, rstd, m, n)
        launches = backward_launches(dy, x, weight, rstd, x, weight, lambda count: x, m, n,
                                     dtypes_of(x, weight), ctas)   # tensors: stand-ins
        plan = (partial_floats(ctas, n, weight),
                rw.planned(launches, (BACKWARD_TENSORS, SUM_TENSORS)[:len(launches)]),
                x.device)
    if len(_BACKWARD) >= MAX_PLANS:
        _BACKWARD.clear()
    _BACKWARD[key] = plan
    return plan


# --- checks ---------------------------------------------------------------------------------

def reference(x, weight=None, residual=None, eps=1e-6):
    """(y, h, rstd) in float64 numpy: the definition the kernels are checked against."""
    import numpy as np
    h = x.astype(np.float64) + (0 if residual is None else residual.astype(np.float64))
    rstd = 1.0 / np.sqrt((h * h).mean(axis=-1, keepdims=True) + eps)
    y = h * rstd * (1.0 if weight is None else weight.astype(np.float64))
    return y, h, rstd[..., 0]


def reference_backward(dy, h, weight, rstd):
    """(dx, dweight) in float64 numpy."""
    import numpy as np
    n = h.shape[-1]
    w = np.ones(n) if weight is None else weight.astype(np.float64)
    xhat = h * rstd[..., None]
    g = dy * w
    dx = rstd[..., None] * (g - xhat * (g * xhat).sum(axis=-1, keepdims=True) / n)
    return dx, (dy * xhat).reshape(-1, n).sum(axis=0)


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): {name: ptx}, bf16, 1k to 128k columns."""
    ptr, f32p = lk.Pointer[lk.bf16], lk.Pointer[lk.f32]
    result = {}
    for n in (1024, 4096, 32768, 131072):
        s = forward_split(n, 2)
        k = kernel_for("forward", lk.bf16, lk.bf16, s)
        result[f"rmsnorm n={n}"] = k.ptx(ptr, ptr, ptr, ptr, ptr, f32p, 4096, n // s.VEC, 1e-6,
                                         **s.constexprs(), RESIDUAL=True, WEIGHT=True,
                                         STORE_RESIDUAL=True, STORE_RSTD=True,
                                         STAGED=forward_staged(s),
                                         EARLY_WEIGHT=forward_early_weight(s, 4096))
        s = backward_split(n, 2)
        k = kernel_for("backward", lk.bf16, lk.bf16, s)
        result[f"rmsnorm_backward n={n}"] = k.ptx(ptr, ptr, ptr, f32p, ptr, f32p, 4096,
                                                  n // s.VEC, 4, 132, **s.constexprs(),
                                                  WEIGHT=True)
    kernel, _, constexprs = rk.column_sum_launch(lk.bf16, 1, 132, 4096)
    result["column_sum"] = kernel.ptx(f32p, ptr, 1, 132, 4096, **constexprs)
    return result


def _cpu_forward(rng, dtype, m, n, s, residual: bool, weight: bool,
                 staged: bool | None = None, early: bool | None = None) -> float:
    import numpy as np
    xs = rng.standard_normal((m, n)) * 2
    rs = rng.standard_normal((m, n)) if residual else None
    ws = rng.standard_normal(n) if weight else None
    x, res = rw.host_array(xs, dtype), rw.host_array(rs, dtype) if residual else None
    w = rw.host_array(ws, dtype) if weight else None
    y, h = rw.host_array(np.zeros((m, n)), dtype), rw.host_array(np.zeros((m, n)), dtype)
    rstd = np.zeros(m, np.float32)
    got = rw.run_on_cpu(forward_launches(x, res, w, y, h if residual else None, rstd,
                                         rw.host_floats, m, n, 1e-6, (dtype, dtype), s,
                                         staged, early),
                        {"y": y, "h": h, "rstd": rstd})
    want_y, want_h, want_rstd = reference(rw.float64_of(x, dtype),
                                          rw.float64_of(w, dtype) if weight else None,
                                          rw.float64_of(res, dtype) if residual else None)
    errors = {"y": rw.relative_to_max(rw.float64_of(got["y"], dtype), want_y) /
              rw.tolerance(dtype),
              "rstd": rw.relative_to_max(got["rstd"].astype(np.float64), want_rstd) /
              rw.tolerance(lk.f32)}            # rstd is f32 whatever x is
    if residual:
        errors["h"] = rw.relative_to_max(rw.float64_of(got["h"], dtype), want_h) / \
            rw.tolerance(dtype)
    assert max(errors.values()) <= 1, f"rmsnorm {dtype} ({m}, {n}) {s} staged={staged} " \
                                      f"early={early}: errors / tolerance {errors}"
    worst = max(errors.values()) * rw.tolerance(dtype)
    return worst


def _cpu_backward(rng, dtype, m, n, s, ctas: int, weight: bool) -> float:
    import numpy as np
    x = rw.host_array(rng.standard_normal((m, n)) * 2, dtype)
    dy = rw.host_array(rng.standard_normal((m, n)), dtype)
    w = rw.host_array(rng.standard_normal(n) if weight else np.ones(n), dtype)
    xf, dyf, wf = (rw.float64_of(t, dtype) for t in (x, dy, w))
    rstd = reference(xf)[2].astype(np.float32)
    dx = rw.host_array(np.zeros((m, n)), dtype)
    dw = rw.host_array(np.zeros(n), dtype)
    launches = backward_launches(dy, x, w if weight else None, rstd, dx, dw, rw.host_floats, m,
                                 n, (dtype, dtype), ctas, s, sum_warps=2)
    got = rw.run_on_cpu(launches, {"dx": dx, "dw": dw})
    want_dx, want_dw = reference_backward(dyf, xf, wf if weight else None,
                                          rstd.astype(np.float64))
    worst = rw.relative_to_max(rw.float64_of(got["dx"], dtype), want_dx)
    if weight:
        worst = max(worst, rw.relative_to_max(rw.float64_of(got["dw"], dtype), want_dw))
    assert worst <= rw.tolerance(dtype), (f"rmsnorm_backward {dtype} ({m}, {n}) {s}: error "
                                         f"{worst:.3g}")
    return worst


def small_cluster_split(n: int, itemsize: int) -> rs.RowSplit:
    """A cluster split of a short row (2-warp CTAs, 8 values a lane): the wide-row path at a
    size the CPU interpreter runs in seconds."""
    return rs.split(n, itemsize, 8, 64, "rmsnorm (small cluster)", max_threads=64)


def cpu_cases() -> tuple[list, list]:
    """The interpreter's cases (forward: dtype, m, n, split, residual, weight, staged, early
    weight (None: forward_staged's, forward_early_weight's choice); backward: dtype, m, n,
    split, ctas, weight): every work split at sizes it runs in about a second, rows held in
    registers and staged in shared memory, the weight loaded before and after the row sum."""
    split = forward_split
    forward = [(lk.bf16, 5, 100, split(100, 2), True, True, None, None),  # 16 rows, 8 threads
               (lk.f32, 2, 1501, split(1501, 4), False, True, None, False),  # odd n: scalar
               (lk.bf16, 3, 700, small_cluster_split(700, 2), True, False, None, None),
               (lk.f16, 1, 37, split(37, 2), False, False, None, None),   # a cluster of 2 ^
               (lk.bf16, 3, 704, small_cluster_split(704, 2), True, True, True, False),  # staged
               (lk.bf16, 3, 704, small_cluster_split(704, 2), False, True, False, True),  # or not
               (lk.bf16, 5, 100, split(100, 2), False, True, True, True),  # 8-byte cp.async
               (lk.f32, 2, 601, small_cluster_split(601, 4), True, True, True, None)]  # 4-byte
    backward = [(lk.bf16, 9, 100, rs.split(100, 2, 16, 128, "t"), 2, True),  # 2 rounds
                (lk.f32, 3, 601, rs.split(601, 4, 16, 128, "t"), 2, True),   # odd n
                (lk.bf16, 3, 700, small_cluster_split(700, 2), 2, True),     # a cluster of 2
                (lk.bf16, 2, 300, rs.split(300, 2, 16, 128, "t"), 1, False)]
    return forward, backward


def check_cpu(seed: int = 0) -> float:
    """Run the kernels on the CPU interpreter (race checking on, two interleavings that must
    agree bit for bit) on cpu_cases (a warp, a CTA, a cluster per row; ragged m and n; bf16,
    fp16 and f32; with and without residual and weight; several rounds of the persistent
    backward) and compare with float64 numpy; returns the worst error relative to each
    output's largest value."""
    import numpy as np
    rng = np.random.default_rng(seed)
    forward, backward = cpu_cases()
    worst = max(_cpu_forward(rng, *case) for case in forward)
    return max(worst, *(_cpu_backward(rng, *case) for case in backward))


# --- on the GPU -----------------------------------------------------------------------------

def check(shapes=rw.CHECK_SHAPES, dtypes=("bfloat16", "float32"), seed: int = 0) -> float:
    """Forward (with residual and weight, returning the residual stream and rstd) and backward
    on random inputs, against float64 (reference / reference_backward); returns the worst
    error relative to each output's largest value (AssertionError past rw.tolerance)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    worst = 0.0
    for name in dtypes:
        dtype = getattr(torch, name)
        tol = rw.tolerance(rw.DTYPES[str(dtype)])
        for m, n in shapes:
            x, res, dy = (torch.randn(m, n, device="cuda", generator=gen).to(dtype)
                          for _ in range(3))
            w = torch.randn(n, device="cuda", generator=gen).to(dtype)
            y, h, rstd = rmsnorm(x, w, res, 1e-6, return_residual=True, return_rstd=True)
            dx, dw = rmsnorm_backward(dy, h, w, rstd)
            want_y, want_h, want_rstd = reference(*(t.double().cpu().numpy() for t in (x, w, res)))
            want_dx, want_dw = reference_backward(dy.double().cpu().numpy(),
                                                  h.double().cpu().numpy(),
                                                  w.double().cpu().numpy(),
                                                  rstd.double().cpu().numpy())
            for what, got, want, bound in (("y", y, want_y, tol), ("h", h, want_h, tol),
                                           ("rstd", rstd, want_rstd, 2 ** -16),
                                           ("dx", dx, want_dx, tol), ("dw", dw, want_dw, tol)):
                err = rw.relative_to_max(got.double().cpu().numpy(), want)
                assert err <= bound, f"rmsnorm {name} ({m}, {n}): {what} error {err:.3g}"
                worst = max(worst, err)
    return worst


def benchmark_rows(shapes=rw.BENCH_SHAPES, reps: int = 30, dtype: str = "bfloat16",
                   torch_compile: bool = True) -> tuple[list, dict]:
    """Time forward (y and rstd, with weight) and backward (dx, dweight) on random (m, n)
    inputs against quack (rmsnorm_fwd / rmsnorm_bwd), torch eager (F.rms_norm and its
    autograd) and torch.compile of the same, in one run; returns (rows, skipped) for
    rw.markdown_table (GB/s counts the bytes of the inputs read and outputs written once)."""
    import torch
    F = torch.nn.functional
    qk, skipped = rw.quack_peer("rmsnorm")
    rows = []
    for m, n in shapes:
        dt = getattr(torch, dtype)
        x, dy = (torch.randn(m, n, device="cuda").to(dt) for _ in range(2))
        w = torch.randn(n, device="cuda").to(dt)
        _, rstd = rmsnorm(x, w, return_rstd=True)
        item, mn = x.element_size(), m * n
        fwd = {"layoutkit": lambda: rmsnorm(x, w, return_rstd=True)}
        if qk:
            fwd["quack"] = lambda: qk.rmsnorm_fwd(x, w, eps=1e-6, store_rstd=True)
        fwd["torch"] = lambda: F.rms_norm(x, (n,), w, 1e-6)
        if torch_compile:
            fwd["torch.compile"] = functools.partial(compiled_rms_norm(n), x, w)
        rows.append(rw.time_row_op("rmsnorm fwd", x, fwd, 2 * mn * item + n * item + 4 * m,
                                   reps, skipped))
        bwd = {"layoutkit": lambda: rmsnorm_backward(dy, x, w, rstd)}
        if qk:
            bwd["quack"] = lambda: qk.rmsnorm_bwd(x, w, dy, rstd)
        fns = {"torch": lambda a, b: F.rms_norm(a, (n,), b, 1e-6)}
        if torch_compile:
            fns["torch.compile"] = compiled_rms_norm(n)
        bwd.update(rw.autograd_calls(fns, (x, w), dy, skipped, f"rmsnorm bwd {m}x{n}"))
        rows.append(rw.time_row_op("rmsnorm bwd", x, bwd, 3 * mn * item + 2 * n * item + 4 * m,
                                   reps, skipped))
    return rows, skipped


@functools.lru_cache(maxsize=None)
def compiled_rms_norm(n: int):
    """torch.compile of F.rms_norm over rows of n (one compiled function per row length)."""
    import torch
    return rw.compiled(lambda a, b: torch.nn.functional.rms_norm(a, (n,), b, 1e-6))


benchmark = rw.benchmark_printing(benchmark_rows)


if __name__ == "__main__":
    print(f"max error {check():.3g}")
    benchmark()
