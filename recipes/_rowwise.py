"""The host side of the row-kernel recipes rmsnorm.py, softmax_backward.py and
layernorm_backward.py (their device side is recipes/_rowwise_kernel.py): argument checks that
name the argument and the rule, the persistent grid (`resident_ctas`), the column sum's launch,
CPU-interpreter runs that compare interleavings bit for bit, and the benchmark rows and markdown
table (benchmarks/bench_rows.py prints the recipes' `benchmark_rows` with `markdown_table`).
"""
from __future__ import annotations

import math
import os

import layoutkit as lk

DTYPES = {"torch.bfloat16": lk.bf16, "torch.float16": lk.f16, "torch.float32": lk.f32}


def launch(launches) -> None:
    """Run a recipe's `launches(...)` ([(kernel, grid, args, constexprs)], in order) on the GPU,
    the constexprs passed by position (the launch fast path): `positional_constexprs`."""
    for kernel, grid, args, constexprs in launches:
        kernel[grid](*args, *positional_constexprs(kernel, args, constexprs))


def planned(launches, tensors: tuple) -> tuple:
    """A recipe's `launches(...)` kept for later calls with other tensors: per launch
    (PlannedLaunch, its arguments after the first tensors[i] (the tensors each call brings));
    a later call runs launch(*its tensors, *rest)."""
    if len(launches) != len(tensors):
        raise ValueError(f"planned: {len(launches)} launches, tensor counts {tensors}")
    return tuple((PlannedLaunch(kernel, grid, positional_constexprs(kernel, args, constexprs)),
                  args[count:])
                 for (kernel, grid, args, constexprs), count in zip(launches, tensors))


_DEBUG_LOOKUP = lk.ptx.debug_raw_lookup()      # (key, flags) of LAYOUTKIT_DEBUG, or None


class PlannedLaunch:
    """One launch a recipe's plan keeps: kernel[grid] with its constexprs fixed, called with the
    kernel's pointer and scalar arguments (`launch(*args)`, the pointers first). The first call
    goes through kernel[grid] (its checked path: traced, protocol-checked, loaded). After it,
    a call whose pointers are all 16-byte aligned, under the LAYOUTKIT_DEBUG it saw, calls that
    specialization's configured launcher (layoutkit.ptx.launcher: it checks each tensor's type,
    device and alignment, packs and launches on torch's current stream): a plan's key fixes
    every other fact the fast path's per-call key reads (the dtypes, the integers, the
    constexprs, the grid), so this skips only that key. Any other call, and a kernel with
    lk.Tensor parameters, lk.assume facts, hidden parameters or a debug build's sink, takes
    kernel[grid]."""

    __slots__ = ("kernel", "grid", "launch", "constexprs", "pointers", "direct", "debug")

    def __init__(self, kernel: lk.Kernel, grid, constexprs: tuple):
        self.kernel, self.grid, self.constexprs = kernel, grid, tuple(constexprs)
        self.launch = kernel[grid]
        kinds = [p.kind for p in kernel.params]
        self.pointers = kinds.count("pointer")
        order = ("pointer", "scalar", "constexpr")
        plain = set(kinds) <= set(order) and kinds == sorted(kinds, key=order.index)
        self.direct = None if plain and _DEBUG_LOOKUP is not None else False
        self.debug = None

    def __call__(self, *args) -> None:
        direct = self.direct
        if direct:
            if os.environ._data.get(_DEBUG_LOOKUP[0]) == self.debug:
                address = 0
                for t in args[:self.pointers]:
                    address |= t.data_ptr()
                if not address & 15:
                    direct(*args)
                    return
        self.launch(*args, *self.constexprs)
        if direct is None:
            self.direct = self._configured(args) or False

    def _configured(self, args: tuple):
        """The configured launcher of the specialization just launched for `args`, or None
        where kernel[grid] must stay (see the class docstring)."""
        if any(t.data_ptr() & 15 for t in args[:self.pointers]) or self.kernel.debug is not None:
            return None
        spec = self.kernel.specialize(*args, *self.constexprs)
        plan = spec.plan
        if plan.sink is not None or plan.assumptions or plan.hidden:
            return None
        self.debug = os.environ._data.get(_DEBUG_LOOKUP[0])
        return spec.launcher(self.grid, 32 * self.kernel.num_warps)


def positional_constexprs(kernel: lk.Kernel, args: tuple, constexprs: dict) -> tuple:
    """The constexprs' values in the kernel's parameter order after `args`, taken by name (the
    binding the interpreter's keyword call makes, whatever the dict order); ValueError unless
    they name exactly the parameters left."""
    rest = kernel.params[len(args):]
    if len(rest) != len(constexprs) or any(p.name not in constexprs for p in rest):
        raise ValueError(f"{kernel.name}: {len(args)} arguments and constexprs "
                         f"{sorted(constexprs)} for the parameters "
                         f"{[p.name for p in kernel.params]}")
    return tuple(constexprs[p.name] for p in rest)


def cuda_floats(device):
    """The `floats(count)` of a recipe's `launches` on the GPU: an uninitialised f32 CUDA
    buffer of count elements on `device` (a cluster scratch, a column sum's partials)."""
    import torch
    return lambda count: torch.empty(count, device=device, dtype=torch.float32)


# --- argument checks ---------------------------------------------------------------------------


def lk_dtype(t):
    """The layoutkit dtype of a torch tensor (by name, so fakes without torch work too)."""
    return DTYPES[str(t.dtype)]


def check_tensor(what: str, name: str, t, shape=None, dtypes=DTYPES, device=None) -> None:
    """Raise TypeError / ValueError naming `what`'s argument `name` unless t is a contiguous
    CUDA torch tensor of one of `dtypes` (names), of `shape` and on `device` when given."""
    if not all(hasattr(t, a) for a in ("dtype", "shape", "is_cuda", "is_contiguous")):
        raise TypeError(f"{what}: {name} must be a torch tensor, got {type(t).__name__}")
    if str(t.dtype) not in dtypes:
        raise TypeError(f"{what}: {name} has dtype {t.dtype}; it must be one of "
                        f"{', '.join(dtypes)}")
    if not t.is_cuda or not t.is_contiguous():
        raise ValueError(f"{what}: {name} must be a contiguous CUDA tensor, got one on "
                         f"{t.device} with strides {tuple(t.stride())}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{what}: {name} has shape {tuple(t.shape)}; it must be "
                         f"{tuple(shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{what}: {name} is on {t.device}; it must be on {device}")


def plain_like(t, dtype, shape, device: int, torch) -> bool:
    """Whether t is certainly an exact contiguous torch tensor of this dtype (a torch.dtype)
    and shape on CUDA device `device` (get_device()): a plan's fast test, True only where
    check_tensor would pass; False sends a call to the worded checks."""
    return type(t) is torch.Tensor and t.dtype is dtype and t.shape == shape and \
        t.is_contiguous() and t.get_device() == device


def plain_vector(t, n: int, device: int, torch) -> bool:
    """plain_like for a vector of n of any dtype (a plan's key holds the dtype)."""
    return type(t) is torch.Tensor and t.dim() == 1 and t.shape[0] == n and \
        t.is_contiguous() and t.get_device() == device


def rows_and_columns(what: str, shape) -> tuple[int, int]:
    """(m, n) of a tensor normalized over its last dimension; ValueError for a 0-d one."""
    if len(shape) < 1:
        raise ValueError(f"{what}: x must have at least one dimension, got shape {tuple(shape)}")
    return math.prod(shape[:-1]), shape[-1]


def check_eps(what: str, eps) -> None:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"{what}: eps = {eps!r} must be a positive number")


_RESIDENT: dict = {}


def resident_ctas(kernel: lk.Kernel, args: tuple, constexprs: dict, cluster: int,
                  device) -> int:
    """How many CTAs of this specialization run at once on `device` (whole clusters): the
    grid of a persistent launch, from cuOccupancyMaxActiveClusters (registers, shared memory
    and threads per SM all counted by the driver); one per SM where the driver cannot say.
    Any grid is correct (CTAs depend on nothing but their own cluster): this is speed only."""
    import torch
    key = (kernel, tuple(constexprs.items()), device)
    if key not in _RESIDENT:
        spec = kernel.specialize(*args, **constexprs)
        try:
            clusters = spec.compiled.max_active_clusters(
                32 * kernel.num_warps, spec.ir.shared_bytes, (cluster, 1, 1), device.index)
        except (lk.ptx.CudaDriverError, lk.ptx.LaunchConfigError):
            clusters = torch.cuda.get_device_properties(device).multi_processor_count // cluster
        _RESIDENT[key] = max(1, clusters) * cluster
    return _RESIDENT[key]


# --- CPU-interpreter checks -------------------------------------------------------------------

def host_array(values, dtype):
    """`values` as the interpreter's array of an lk dtype (bf16: uint16 bit patterns)."""
    import numpy as np

    from layoutkit.dsl.interpreter import to_bf16
    if dtype == lk.bf16:
        return to_bf16(values)
    return np.asarray(values, dtype=np.float16 if dtype == lk.f16 else np.float32)


def host_floats(count: int):
    """The `floats(count)` of a recipe's `launches` on the interpreter: f32 NaNs (a value read
    before it is written shows)."""
    import numpy as np
    return np.full(count, np.nan, np.float32)


def float64_of(array, dtype):
    """The values of an interpreter array of an lk dtype, in float64."""
    import numpy as np

    from layoutkit.dsl.interpreter import from_bf16
    return (from_bf16(array) if dtype == lk.bf16 else array).astype(np.float64)


def tolerance(dtype) -> float:
    """Error bound relative to the largest output: 2**-7 for 16-bit outputs (a few roundings
    of 2**-9), 2**-16 for f32 (f32 sums in another order, rsqrt.approx)."""
    return 2 ** -16 if dtype == lk.f32 else 2 ** -7


def relative_to_max(got, want) -> float:
    import numpy as np
    scale = float(np.abs(want).max()) or 1.0
    return float(np.abs(got - want).max()) / scale


def run_on_cpu(launches, outputs: dict, seeds=(0, 1)) -> dict:
    """Run `launches` (a list of (kernel, grid, args, constexprs), in order, sharing the arrays
    of `args`) on the CPU interpreter once per seed, each time on fresh copies of every array;
    returns {name: array} of the `outputs` ({name: array among the args}) of the first seed,
    AssertionError if any output differs between seeds (a result that depends on the
    interleaving of threads)."""
    import numpy as np

    from layoutkit.dsl.interpreter import interpret
    first = None
    for seed in seeds:
        copies: dict = {}

        def fresh(a):
            if not isinstance(a, np.ndarray):
                return a
            if id(a) not in copies:
                copies[id(a)] = a.copy()
            return copies[id(a)]
        for kernel, grid, args, constexprs in launches:
            interpret(kernel, grid, *[fresh(a) for a in args], seed=seed, **constexprs)
        got = {name: fresh(a) for name, a in outputs.items()}
        if first is None:
            first = got
        for name, array in got.items():
            if not np.array_equal(array, first[name], equal_nan=True):
                raise AssertionError(f"{name} differs between interleavings (seeds {seeds})")
    return first


# --- benchmarks: the same rows timed against quack, torch eager and torch.compile ------------

CHECK_SHAPES = ((1, 1), (3, 7), (17, 100), (64, 1000), (1, 3000), (7, 3000), (5, 4096),
                (4, 8191), (3, 16385), (2, 32768), (2, 65537), (1, 131072))   # the recipes' check()
BENCH_SHAPES = ((4096, 1024), (4096, 4096), (4096, 8192), (4096, 32768), (32768, 4096),
                (1000, 3000), (7, 4096), (1024, 65536), (512, 131072))      # their benchmark()

def quack(module: str):
    """(quack.<module>, None) on a machine with the peers pack (../shared/peers: .peers
    carried to the GPU machine), else (None, the reason it cannot be imported)."""
    import importlib
    import pathlib
    import sys
    peers = pathlib.Path(__file__).resolve().parents[1] / ".peers"
    try:
        if "quack" not in sys.modules:
            sys.path.insert(0, str(peers))
            import peers_site
            peers_site.activate()
        return importlib.import_module(f"quack.{module}"), None
    except ImportError as exc:
        return None, f"quack.{module} not importable ({exc})"


def quack_peer(module: str) -> tuple:
    """(quack.<module> or None, skipped): a benchmark's peer and its {candidate: reason}
    dict, holding quack's reason where it cannot be imported."""
    qk, why = quack(module)
    return qk, ({} if qk else {"quack": why})


def benchmark_printing(benchmark_rows):
    """A recipe's benchmark(shapes, reps, torch_compile) -> rows: `benchmark_rows`' table
    printed (markdown), its rows returned (for layoutkit run)."""
    def benchmark(shapes=BENCH_SHAPES, reps: int = 30, torch_compile: bool = True) -> list:
        """Print benchmark_rows' table (markdown); return its rows (for layoutkit run)."""
        return printed(*benchmark_rows(shapes, reps, torch_compile=torch_compile))
    return benchmark


def compiled(fn):
    """torch.compile(fn) for one shape (a fresh compile per call site: no recompile limit)."""
    import torch
    return torch.compile(fn, dynamic=False)


def autograd_calls(fns: dict, inputs: tuple, dy, skipped: dict, where: str) -> dict:
    """{name: a call of torch.autograd.grad of fn(*inputs) with respect to the inputs, given
    dy} for each of fns (the forward run once here, its graph kept: only the backward is
    timed); a forward that raises (a compile failing) is left out, its reason in `skipped`."""
    import functools

    import torch
    calls = {}
    for name, fn in fns.items():
        leaves = tuple(t.detach().requires_grad_() for t in inputs)
        try:
            out = fn(*leaves)
        except Exception as exc:    # a peer's failure is its column's, not the table's
            skipped[f"{name} ({where})"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        calls[name] = functools.partial(torch.autograd.grad, out, leaves, dy,
                                        retain_graph=True)
    return calls


def time_row_op(op: str, x, candidates: dict, nbytes: int, reps: int,
                skipped: dict) -> dict:
    """Time `candidates` ({name: fn}, layoutkit first) and x.clone() interleaved
    (layoutkit.tools.benchmarking: CUDA events, L2 flushed before each call, medians); a row
    of {name}_ms and {name}_gbps (nbytes moved per call; the clone: 2 * x.nbytes), "case",
    "speedup" (the fastest other candidate's time / layoutkit's: > 1 is faster, the ratio
    `layoutkit run` reports) and "vs_clone" (layoutkit's GB/s / the clone's). A peer that
    raises on its first call is left out of the row and its reason put in `skipped`."""
    from layoutkit.tools.benchmarking import gbps, interleaved
    m, n = x.numel() // x.shape[-1], x.shape[-1]
    dtype = str(x.dtype).removeprefix("torch.")
    for name in [k for k in candidates if k != "layoutkit"]:
        try:
            candidates[name]()
        except Exception as exc:    # a peer's limit (a shape it refuses) is its row's, not ours
            skipped[f"{name} ({op} {m}x{n})"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            del candidates[name]
    times = interleaved({**candidates, "clone": lambda: x.clone()}, reps=reps)
    row = {"op": op, "m": m, "n": n, "dtype": dtype, "case": f"{op} {m}x{n} {dtype}"}
    for name, timing in times.items():
        moved = 2 * x.numel() * x.element_size() if name == "clone" else nbytes
        row[f"{name}_ms"] = timing.median_ms
        row[f"{name}_gbps"] = gbps(moved, timing.median_ms)
    ours = row["layoutkit_ms"]
    others = [row[f"{k}_ms"] for k in candidates if k != "layoutkit"]
    row["speedup"] = min(others) / ours if others else 1.0
    row["vs_clone"] = row["layoutkit_gbps"] / row["clone_gbps"]
    return row


def markdown_table(rows: list, skipped: dict, names=None, header: bool = True) -> str:
    """The benchmark rows as a markdown table of GB/s with layoutkit's ratio to quack, to the
    best torch variant and to the clone; `skipped` ({candidate: reason}) is listed under it.
    `names`: the candidate columns (default: every candidate of the rows, in order; fixed
    columns let a table be printed row by row, `header=False` after its first row)."""
    if names is None:
        names = list(dict.fromkeys(k[:-5] for r in rows for k in r if k.endswith("_gbps")))
    lines = ["| op | shape | dtype | " + " | ".join(f"{n} GB/s" for n in names) +
             " | vs quack | vs best torch | vs clone |",
             "|---|---|---|" + "---:|" * (len(names) + 3)] if header else []
    for r in rows:
        torch_best = max((r[k] for k in r if k.startswith("torch") and k.endswith("_gbps")),
                         default=None)
        ours = r["layoutkit_gbps"]

        def ratio(v):
            return f"{ours / v:.2f}" if v else "-"
        lines.append(f"| {r['op']} | {r['m']}x{r['n']} | {r['dtype']} | " +
                     " | ".join(f"{r[f'{n}_gbps']:.0f}" if f"{n}_gbps" in r else "-"
                                for n in names) +
                     f" | {ratio(r.get('quack_gbps'))} | {ratio(torch_best)} | "
                     f"{ratio(r.get('clone_gbps'))} |")
    lines += [f"\n{name} skipped: {why}" for name, why in skipped.items()]
    return "\n".join(lines)


def printed(rows: list, skipped: dict) -> list:
    """Print the rows' markdown_table; return the rows (a recipe's benchmark())."""
    print(markdown_table(rows, skipped))
    return rows
