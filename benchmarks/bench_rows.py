"""Row kernels beside quack, torch and the device copy, in one run: softmax and layernorm
(and rmsnorm and the backward kernels through their recipes' benchmark_rows, where those
exist), bf16, over issue 19's shape grid M in {1, 7, 1000, 4096, 32768} x N in {1000, 3000,
4096, 8192, 16384, 32768, 65536, 131072}. One markdown table per kernel.

    PYTHONPATH=. python3 benchmarks/bench_rows.py [--grid full|quick] [--kernels softmax,...]
    PYTHONPATH=. python3 benchmarks/bench_rows.py --shapes 4096x131072,1000x3000   # some shapes
    PYTHONPATH=. python3 benchmarks/bench_rows.py --sweep     # the split's alternatives
    PYTHONPATH=. python3 benchmarks/bench_rows.py --exchange sync ...   # the other DSMEM form

Per shape every candidate is timed interleaved with the others (layoutkit.tools.benchmarking:
CUDA events, L2 flushed before every call, medians, random data), after a warm-up that also
compiles. GB/s counts the bytes the kernel must move, the same count for every candidate (a
ratio of two GB/s is a ratio of times): each input read once and each output written once.
"clone" is a device copy (Tensor.clone) that moves as many bytes (x.clone() for softmax), the
practical roofline of a shape; "vs clone" divides layoutkit's GB/s by clone's. quack
(`quack-kernels`, CuTe DSL) comes from the peers pack (../shared/peers: `.peers/peers_site.py`,
carried to the GPU machine); its layernorm takes f32 weight and bias, its softmax
bf16. A candidate that is missing or raises prints "-" and the reason under its table.
"check" compares layoutkit's output with torch's on the first and last 64 rows (max
|difference|, in output units).

--grid full (the default) is issue 19's 40 shapes for all six ops (about 4 minutes on the
H200), --grid quick 7 of them. Every table is printed row by row as it is measured (a run cut
short keeps its rows), ends with its ratio summary and its seconds; a shape whose call raises
(out of memory at 32768 x 131072, a peer's fault) prints a "failed" row and the run goes on.

--sweep times, on a few shapes, the split the heuristic picks (recipes/_row_split.py) beside
the splits other budgets give (values per thread, threads per row, CTA size), for tuning:
softmax and layernorm (recipes/_row_split.choose_config's budgets), softmax_backward
(recipes/_row_split.split's), layernorm_backward (persistent CTAs of 512 threads, 1024 as
before, or rows of at most 512 or 256 threads), rmsnorm forward (rows held in registers or
staged in shared memory, recipes/rmsnorm.forward_staged; other budgets) and softmax_staged
(the heuristic's split, rows in registers or staged: recipes/softmax.staged); `--sweep
layernorm_backward` (comma-separated names) times only those. `--exchange sync` builds the single-exchange kernels' cluster
exchange with st.shared::cluster and a cluster barrier instead of st.async on an mbarrier
(recipes/_rowwise_kernel.ASYNC_EXCHANGE), to compare the two forms run against run;
`--peers late` moves the single-exchange kernels' relaxed cluster barrier from right after
their loads to right before their exchange (recipes/_rowwise_kernel.PEERS_STARTED_LATE).
"""
from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

M_GRID = (1, 7, 1000, 4096, 32768)
N_GRID = (1000, 3000, 4096, 8192, 16384, 32768, 65536, 131072)
QUICK = ((7, 131072), (1000, 3000), (4096, 4096), (4096, 16384), (4096, 32768),
         (4096, 131072), (32768, 4096))
GRIDS = {"full": tuple((m, n) for m in M_GRID for n in N_GRID), "quick": QUICK}
SWEEP = ((4096, 1000), (1000, 3000), (4096, 4096), (4096, 8192), (4096, 16384), (4096, 32768),
         (4096, 65536), (4096, 131072), (32768, 4096), (7, 131072))
SWEEP_BUDGETS = {                    # label -> choose_config keywords (narrow: its rule for
    "heuristic": {},                 # n % 8 != 0, halving the values a thread of every budget)
    "without the narrow-access rule": {"narrow": False},
    "V<=32": {"max_values": 32, "max_threads_per_row": 512},
    "V<=32, 1024-thread rows": {"max_values": 32, "max_threads_per_row": 1024},
    "V<=128, <=128 threads a row": {"max_values": 128, "max_threads_per_row": 128},
    "256-thread CTAs": {"cta_threads": 256},
    "V<=32, <=256 threads a row (2x the cluster)": {"max_values": 32, "max_threads_per_row": 256},
    "V<=16, <=256 threads a row (4x the cluster)": {"max_values": 16, "max_threads_per_row": 256},
}
BACKWARD_SWEEP = ((4096, 4096), (32768, 4096), (4096, 16384), (4096, 32768), (1000, 3000),
                  (7, 131072))
BACKWARD_BUDGETS = {                 # label -> (values a thread, threads a row, CTA threads)
    "heuristic": None,
    "V<=16": (16, 1024, 128),
    "V<=64, <=256 threads a row": (64, 256, 128),
    "V<=32, 256-thread CTAs": (32, 512, 256),
    "V<=8": (8, 1024, 128),
}
LAYERNORM_BACKWARD_SWEEP = ((32768, 4096), (4096, 4096), (1000, 3000), (4096, 16384),
                            (4096, 32768))
LAYERNORM_BACKWARD_BUDGETS = {       # label -> (values a thread, CTA threads = threads a row cap)
    "heuristic": None,
    "1024-thread CTAs (before 512)": (16, 1024),
    "512-thread CTAs, rows too": (16, 512),
    "256-thread CTAs": (16, 256),
    "V<=32, 512-thread CTAs": (32, 512),
}
RMSNORM_SWEEP = ((1000, 32768), (1000, 65536), (1000, 131072), (4096, 32768), (4096, 65536),
                 (4096, 131072), (32768, 32768), (1000, 16384), (4096, 16384), (4096, 8192),
                 (4096, 4096), (4096, 3000), (1000, 4096), (32768, 4096), (1, 4096),
                 (7, 8192), (1, 65536), (7, 131072), (1000, 1000))
RMSNORM_BUDGETS = {        # label -> (values a thread, threads a row, staged, early weight)
    "heuristic": None,     # (None: rmsnorm.forward_split, forward_staged, forward_early_weight)
    "rows in registers, weight late": (64, 256, False, False),
    "staged in shared memory, weight late": (64, 256, True, False),
    "weight early, rows as the heuristic": (64, 256, None, True),
    "staged, V<=32, <=512 threads a row": (32, 512, True, None),
}
SOFTMAX_STAGED_SWEEP = ((1000, 32768), (1000, 65536), (1000, 131072), (4096, 32768),
                        (4096, 65536), (4096, 131072), (32768, 32768), (1000, 16384),
                        (4096, 16384), (4096, 8192), (4096, 4096), (1000, 4096), (32768, 4096))
SWEEPS = ("softmax", "layernorm", "softmax_backward", "layernorm_backward", "rmsnorm",
          "softmax_staged")
CHECK_ROWS = 64
TIME_PER_SHAPE_S = 0.15             # GPU time aimed at per shape: sets the repetitions


def activate_peers() -> str | None:
    """Make quack importable through the peers pack; None, or why it is not available."""
    site = ROOT / ".peers" / "peers_site.py"
    if not site.is_file():
        return f"no {site.relative_to(ROOT)} (pack with ../shared/peers/pack.sh, carry .peers)"
    sys.path.insert(0, str(site.parent))
    try:
        import peers_site
        peers_site.activate()
        import quack  # noqa: F401
    except Exception as exc:         # ImportError, or the DSL failing to load
        return f"peers_site.activate(): {type(exc).__name__}: {exc}"
    return None


@dataclass
class Case:
    """One shape of one kernel: the candidates to time ({name: fn}), the bytes that count,
    the outputs to compare (layoutkit's and torch's, as functions) and the split used."""

    calls: dict
    nbytes: int
    ours: Callable | None = None
    reference: Callable | None = None
    split: str = ""
    missing: dict = field(default_factory=dict)     # candidate -> why it is not timed


@dataclass
class RowKernel:
    """A row kernel of the table: `make(m, n)` builds its Case (raises when the recipe is
    missing: the whole table is skipped, with the reason)."""

    name: str
    make: Callable


def _split_text(cfg) -> str:
    text = f"{cfg.threads}t x{cfg.rows} C{cfg.vector} K{cfg.chunks}"
    return text + (f" cl{cfg.cluster}" if cfg.cluster > 1 else "")


def _peer(case: Case, name: str, build: Callable) -> None:
    """Add candidate `name` = build() to the case, or record why it is missing."""
    try:
        case.calls[name] = build()
    except Exception as exc:
        case.missing[name] = f"{type(exc).__name__}: {exc}"


def softmax_case(m: int, n: int, torch, quack_missing) -> Case:
    from recipes import softmax
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 4
    out = torch.empty_like(x)
    case = Case({"layoutkit": lambda: softmax.softmax(x, out)}, 2 * x.numel() * 2,
                ours=lambda: softmax.softmax(x, out), reference=lambda: torch.softmax(x, -1),
                split=_split_text(softmax.config(m, n)))
    if quack_missing is None:
        from quack.softmax import softmax as quack_softmax
        _peer(case, "quack", lambda: (lambda: quack_softmax(x)))
    else:
        case.missing["quack"] = quack_missing
    case.calls["torch"] = lambda: torch.softmax(x, -1)
    return case


def layernorm_case(m: int, n: int, torch, quack_missing) -> Case:
    from recipes import layernorm
    F = torch.nn.functional
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 3 + 1
    w, b = (torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(x)
    case = Case({"layoutkit": lambda: layernorm.layernorm(x, w, b, 1e-5, out)},
                2 * x.numel() * 2 + 2 * n * 2,
                ours=lambda: layernorm.layernorm(x, w, b, 1e-5, out),
                reference=lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                split=_split_text(layernorm.config(m, n)))
    if quack_missing is None:
        from quack.rmsnorm import layernorm_fwd
        w32, b32 = w.float(), b.float()
        _peer(case, "quack", lambda: (lambda: layernorm_fwd(x, w32, b32, 1e-5)))
    else:
        case.missing["quack"] = quack_missing
    case.calls["torch"] = lambda: F.layer_norm(x, (n,), w, b, 1e-5)
    return case


KERNELS = {k.name: k for k in (RowKernel("softmax", softmax_case),
                                RowKernel("layernorm", layernorm_case))}
# other helpers' recipes, timed by their own entry point benchmark_rows(shapes, reps,
# torch_compile=False) -> (rows, skipped) and printed by recipes/_rowwise.py's markdown_table
ENTRY_POINTS = ("rmsnorm", "softmax_backward", "layernorm_backward")
ENTRY_POINT_REPS = 20


ENTRY_COLUMNS = ("layoutkit", "quack", "torch", "clone")     # their tables' candidates


def run_entry_point(name: str, shapes, torch, title: str = "") -> None:
    """Print recipes.<name>.benchmark_rows' table over `shapes`, a shape at a time (each row
    as it is measured; a shape that raises prints a failed row), or why it is skipped."""
    import importlib
    print(f"\n### {name}{title}\n", flush=True)
    try:
        entry = importlib.import_module(f"recipes.{name}").benchmark_rows
        from recipes._rowwise import markdown_table
    except (ImportError, AttributeError) as exc:
        print(f"skipped: no recipes.{name}.benchmark_rows ({type(exc).__name__}: {exc})")
        return
    started = time.perf_counter()
    print(markdown_table([], {}, ENTRY_COLUMNS), flush=True)
    notes, ratios = {}, {}
    for m, n in shapes:
        try:
            rows, skipped = entry([(m, n)], reps=ENTRY_POINT_REPS, torch_compile=False)
        except Exception as exc:           # its failure is its row's, not the run's
            print(f"| {name} | {m}x{n} | failed: {type(exc).__name__}: {str(exc)[:160]} |",
                  flush=True)
            torch.cuda.empty_cache()
            continue
        print(markdown_table(rows, {}, ENTRY_COLUMNS, header=False), flush=True)
        for row in rows:
            if row.get("quack_gbps"):
                ratios.setdefault(row["op"], []).append(
                    (row["layoutkit_gbps"] / row["quack_gbps"], m, n))
        for who, why in skipped.items():
            notes.setdefault(f"{who.split(' (')[0]}: {why}", []).append(f"{m}x{n}")
        del rows
        torch.cuda.empty_cache()
    for op, found in ratios.items():
        print(f"\n{op} {summary(found)}")
    print_notes(notes)
    print(f"\n({name}: {time.perf_counter() - started:.0f} s)", flush=True)


def summary(ratios: list) -> str:
    """'vs quack: geometric mean, shapes >= 1.00, worst' of [(ratio, m, n)]."""
    worst = min(ratios)
    mean = math.exp(statistics.fmean(math.log(r) for r, _, _ in ratios))
    return (f"vs quack: geometric mean {mean:.2f}, {sum(r >= 1.0 for r, _, _ in ratios)}/"
            f"{len(ratios)} shapes >= 1.00, worst {worst[0]:.2f} at {worst[1]}x{worst[2]}")


def print_notes(notes: dict) -> None:
    """The reasons candidates were missing ({reason: [shapes]}), a line each."""
    for note, where in notes.items():
        print(f"\n- {note} ({', '.join(where[:4])}{', ...' if len(where) > 4 else ''})")


def repetitions(nbytes: int, candidates: int) -> int:
    """Calls per candidate for about TIME_PER_SHAPE_S of GPU time (10..100)."""
    per_call = nbytes / 3.5e12 + 8e-6 + 80e-6          # the kernel and the L2 flush
    return max(10, min(100, int(TIME_PER_SHAPE_S / (per_call * candidates))))


def _check(case: Case, m: int, torch) -> str:
    """max |layoutkit - torch| over the first and last CHECK_ROWS rows of the output."""
    if case.ours is None or case.reference is None:
        return ""
    got, want = case.ours(), case.reference()
    got = got[0] if isinstance(got, tuple) else got
    rows = list(range(min(m, CHECK_ROWS))) + list(range(max(CHECK_ROWS, m - CHECK_ROWS), m))
    index = torch.tensor(rows, device="cuda")
    diff = (got.reshape(m, -1).index_select(0, index).float() -
            want.reshape(m, -1).index_select(0, index).float()).abs().max().item()
    return f"{diff:.2g}"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def _warm(case: Case, torch) -> None:
    """Call each candidate once (compiling it); a peer that raises is dropped with its reason,
    layoutkit raising is an error."""
    for name, fn in list(case.calls.items()):
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as exc:
            if name == "layoutkit":
                raise
            case.missing[name] = f"{type(exc).__name__}: {exc}"
            del case.calls[name]


def time_kernel(kernel: RowKernel, shapes, torch, quack_missing, interleaved, gbps,
                title: str = "") -> None:
    """Print one markdown table: GB/s per candidate and layoutkit's ratios, per shape."""
    print(f"\n### {kernel.name}{title}\n")
    print("| m x n | layoutkit GB/s | quack GB/s | torch GB/s | clone GB/s | vs quack | vs clone "
          "| split | check |\n|---|---:|---:|---:|---:|---:|---:|---|---|", flush=True)
    notes, ratios = {}, []
    started = time.perf_counter()
    for m, n in shapes:
        try:
            case = kernel.make(m, n, torch, quack_missing)
        except (ImportError, AttributeError) as exc:
            print(f"\n{kernel.name}: skipped ({type(exc).__name__}: {exc})")
            return
        except Exception as exc:           # out of memory: this row's failure, not the run's
            print(f"| {m} x {n} | failed: {type(exc).__name__}: {str(exc)[:160]} |", flush=True)
            torch.cuda.empty_cache()
            continue
        try:
            copy = torch.empty(case.nbytes // 4, device="cuda", dtype=torch.bfloat16)
            case.calls["clone"] = copy.clone              # moves case.nbytes: read + write
            _warm(case, torch)
            check = _check(case, m, torch)
            times = interleaved(case.calls, reps=repetitions(case.nbytes, len(case.calls)),
                                warmup=2)
        except Exception as exc:
            print(f"| {m} x {n} | failed: {type(exc).__name__}: {str(exc)[:160]} |", flush=True)
            case = copy = None                      # its tensors, before the cache is emptied
            torch.cuda.empty_cache()
            continue
        rate = {name: gbps(case.nbytes, t.median_ms) for name, t in times.items()}
        for name, why in case.missing.items():
            notes.setdefault(f"{name}: {why}", []).append(f"{m}x{n}")
        ours = rate["layoutkit"]
        if rate.get("quack"):
            ratios.append((ours / rate["quack"], m, n))
        cells = [f"{rate[c]:.0f}" if rate.get(c) else "-"
                 for c in ("layoutkit", "quack", "torch", "clone")]
        print(f"| {m} x {n} | " + " | ".join(cells) + f" | {_ratio(ours, rate.get('quack'))} | "
              f"{_ratio(ours, rate.get('clone'))} | {case.split} | {check} |", flush=True)
        del case, times, copy
        torch.cuda.empty_cache()
    if ratios:
        print(f"\n{summary(ratios)}")
    print_notes(notes)
    print(f"\n({kernel.name}: {time.perf_counter() - started:.0f} s)", flush=True)


def sweep(torch, quack_missing, interleaved, gbps, shapes=SWEEP,
          kernels=("softmax", "layernorm")) -> None:
    """Per shape, GB/s of softmax and layernorm (`kernels`) with each budget's split
    (SWEEP_BUDGETS)."""
    from recipes import _row_split as rs
    from recipes import layernorm, softmax
    for name in kernels:
        print(f"\n### {name}: splits by budget (GB/s; the split under each)\n")
        print("| m x n | quack | " + " | ".join(SWEEP_BUDGETS) + " |\n|---|---:|" +
              "---:|" * len(SWEEP_BUDGETS), flush=True)
        for m, n in shapes:
            x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            out = torch.empty_like(x)
            w, b = (torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            calls, splits = {}, {}
            for label, budget in SWEEP_BUDGETS.items():
                try:
                    cfg = rs.choose_config(m, n, **budget)
                except ValueError as exc:
                    splits[label] = f"({exc})"[:40]
                    continue
                splits[label] = _split_text(cfg)
                calls[label] = (lambda cfg=cfg: softmax.softmax(x, out, config=cfg)) \
                    if name == "softmax" else \
                    (lambda cfg=cfg: layernorm.layernorm(x, w, b, 1e-5, out, config=cfg))
            if quack_missing is None:
                if name == "softmax":
                    from quack.softmax import softmax as quack_softmax
                    calls["quack"] = lambda: quack_softmax(x)
                else:
                    from quack.rmsnorm import layernorm_fwd
                    w32, b32 = w.float(), b.float()
                    calls["quack"] = lambda: layernorm_fwd(x, w32, b32, 1e-5)
            nbytes = 2 * x.numel() * 2
            times = interleaved(calls, reps=repetitions(nbytes, len(calls)))
            cells = [f"{gbps(nbytes, times[label].median_ms):.0f} ({splits[label]})"
                     if label in times else splits.get(label, "-") for label in SWEEP_BUDGETS]
            quack = f"{gbps(nbytes, times['quack'].median_ms):.0f}" if "quack" in times else "-"
            print(f"| {m} x {n} | {quack} | " + " | ".join(cells) + " |", flush=True)
            torch.cuda.empty_cache()


def budget_row(m: int, n: int, calls: dict, splits: dict, budgets, nbytes: int, interleaved,
               gbps) -> None:
    """Time `calls` (one per budget label, and "quack" where it runs) interleaved and print the
    sweep's row: quack's GB/s, then each budget's GB/s and split (the split alone for a budget
    with no call: one that does not run at this shape)."""
    times = interleaved(calls, reps=repetitions(nbytes, len(calls)))
    cells = [f"{gbps(nbytes, times[label].median_ms):.0f} ({splits[label]})"
             if label in times else splits[label] for label in budgets]
    quack = f"{gbps(nbytes, times['quack'].median_ms):.0f}" if "quack" in times else "-"
    print(f"| {m} x {n} | {quack} | " + " | ".join(cells) + " |", flush=True)


def sweep_backward(torch, quack_missing, interleaved, gbps, shapes=BACKWARD_SWEEP) -> None:
    """Per shape, GB/s of softmax_backward with each budget's split (BACKWARD_BUDGETS)."""
    import layoutkit as lk
    from recipes import _row_split as rs
    from recipes import _rowwise as rw
    from recipes import softmax_backward as sb
    print("\n### softmax_backward: splits by budget (GB/s; P x ROWS, C x K, cluster)\n")
    print("| m x n | quack | " + " | ".join(BACKWARD_BUDGETS) + " |\n|---|---:|" +
          "---:|" * len(BACKWARD_BUDGETS), flush=True)
    for m, n in shapes:
        y = torch.softmax(torch.randn(m, n, device="cuda"), -1).to(torch.bfloat16)
        dy = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        dx = torch.empty_like(y)
        calls, splits = {}, {}
        for label, budget in BACKWARD_BUDGETS.items():
            s = sb.split_for(n, 2, m) if budget is None else rs.split(
                n, 2, budget[0], budget[2], "sweep", budget[1], m=m, target_ctas=rs.TARGET_CTAS)
            splits[label] = f"{s.P}x{s.ROWS}, C{s.C} K{s.K}, cl{s.CLUSTER}"
            launch = sb.launches(dy, y, dx, rw.cuda_floats(y.device), m, n, lk.bf16, s)
            calls[label] = lambda launch=launch: rw.launch(launch)
        if quack_missing is None:
            from quack.softmax import softmax_bwd
            calls["quack"] = lambda: softmax_bwd(dy, y)
        budget_row(m, n, calls, splits, BACKWARD_BUDGETS, 3 * y.numel() * 2, interleaved, gbps)
        calls = None
        torch.cuda.empty_cache()


def sweep_rmsnorm(torch, quack_missing, interleaved, gbps, shapes=RMSNORM_SWEEP) -> None:
    """Per shape, GB/s of rmsnorm forward (weight, rstd stored: bench_rows' table) with each
    budget's split and staging (RMSNORM_BUDGETS), through the plans' direct launch
    (recipes/_rowwise.planned), beside quack's rmsnorm_fwd."""
    import layoutkit as lk
    from recipes import _row_split as rs
    from recipes import _rowwise as rw
    from recipes import rmsnorm
    print("\n### rmsnorm forward: splits by budget (GB/s; P x ROWS, C x K, cluster, staged, "
          "weight early)\n")
    print("| m x n | quack | " + " | ".join(RMSNORM_BUDGETS) + " |\n|---|---:|" +
          "---:|" * len(RMSNORM_BUDGETS), flush=True)
    for m, n in shapes:
        x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, device="cuda").to(torch.bfloat16)
        y, rstd = torch.empty_like(x), torch.empty(m, device="cuda")
        calls, splits = {}, {}
        for label, budget in RMSNORM_BUDGETS.items():
            try:
                if budget is None:
                    s, staged, early = rmsnorm.forward_split(n, 2, m), None, None
                else:
                    s = rs.split(n, 2, budget[0], rmsnorm.FWD_CTA_THREADS, "sweep", budget[1],
                                 m=m, target_ctas=rs.TARGET_CTAS)
                    staged, early = budget[2:]
                launches = rmsnorm.forward_launches(x, None, w, y, None, rstd,
                                                    rw.cuda_floats(x.device), m, n, 1e-6,
                                                    (lk.bf16, lk.bf16), s, staged, early)
                flags = launches[0][3]
                ((launch, rest),) = rw.planned(launches, (rmsnorm.FORWARD_TENSORS,))
                launch(x, x, w, y, y, rstd, *rest)
                torch.cuda.synchronize()
            except Exception as exc:           # a split that does not build or launch
                splits[label] = f"({type(exc).__name__}: {str(exc)[:60]})"
                continue
            splits[label] = f"{s.P}x{s.ROWS}, C{s.C} K{s.K}, cl{s.CLUSTER}" + \
                (", staged" if flags["STAGED"] else "") + (", w early" if flags["EARLY_WEIGHT"]
                                                          else "")
            calls[label] = lambda launch=launch, rest=rest: launch(x, x, w, y, y, rstd, *rest)
        if quack_missing is None:
            from quack.rmsnorm import rmsnorm_fwd
            calls["quack"] = lambda: rmsnorm_fwd(x, w, eps=1e-6, store_rstd=True)
        budget_row(m, n, calls, splits, RMSNORM_BUDGETS, 2 * m * n * 2 + n * 2 + 4 * m,
                   interleaved, gbps)
        calls = None
        torch.cuda.empty_cache()


def sweep_softmax_staged(torch, quack_missing, interleaved, gbps,
                         shapes=SOFTMAX_STAGED_SWEEP) -> None:
    """Per shape, GB/s of softmax with the heuristic's split, its rows held in registers and
    staged in shared memory (recipes/softmax.kernel_for's staged_rows), beside quack."""
    from recipes import softmax
    labels = {"heuristic": None, "rows in registers": False, "staged in shared memory": True}
    print("\n### softmax: rows in registers or staged in shared memory (GB/s)\n")
    print("| m x n | split | quack | " + " | ".join(labels) + " |\n|---|---|---:|" +
          "---:|" * len(labels), flush=True)
    for m, n in shapes:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 4
        out = torch.empty_like(x)
        cfg = softmax.config(m, n)
        calls = {}
        for label, staged in labels.items():
            kernel, grid, ints, constexprs = softmax.launch_arguments(cfg, m, n, staged)
            launch, rest = kernel[grid], (*ints, *constexprs.values())
            calls[label] = lambda launch=launch, rest=rest: launch(x, out, *rest)
            calls[label]()
        torch.cuda.synchronize()
        if quack_missing is None:
            from quack.softmax import softmax as quack_softmax
            calls["quack"] = lambda: quack_softmax(x)
        nbytes = 2 * x.numel() * 2
        times = interleaved(calls, reps=repetitions(nbytes, len(calls)))
        cells = [f"{gbps(nbytes, times[label].median_ms):.0f}" for label in labels]
        quack = f"{gbps(nbytes, times['quack'].median_ms):.0f}" if "quack" in times else "-"
        print(f"| {m} x {n} | {_split_text(cfg)} | {quack} | " + " | ".join(cells) + " |",
              flush=True)
        calls = times = None
        torch.cuda.empty_cache()


def shape_list(text: str) -> tuple:
    """'4096x131072,7x3000' -> ((4096, 131072), (7, 3000)) (argparse's type: ValueError)."""
    shapes = []
    for item in text.split(","):
        m, _, n = item.strip().lower().partition("x")
        if not (m.isdigit() and n.isdigit() and int(m) > 0 and int(n) > 0):
            raise ValueError(f"{item!r} is not MxN with positive integers")
        shapes.append((int(m), int(n)))
    return tuple(shapes)


def layernorm_backward_split(n: int, budget):
    """layernorm_backward's split for a budget of LAYERNORM_BACKWARD_BUDGETS (None: its own):
    rs.split with that many values a thread and threads a CTA, sub-tiled as split_for does."""
    import dataclasses

    from recipes import _row_split as rs
    from recipes import layernorm_backward as lb
    if budget is None:
        return lb.split_for(n, 2)
    values, threads = budget
    s = rs.split(n, 2, values, threads, "sweep", threads, min_threads=rs.PERSISTENT_MIN_THREADS)
    return dataclasses.replace(s, K=s.K // 2, SUBS=2) if s.K % 2 == 0 else s


def sweep_layernorm_backward(torch, quack_missing, interleaved, gbps,
                             shapes=LAYERNORM_BACKWARD_SWEEP) -> None:
    """Per shape, GB/s of layernorm_backward (statistics given, as bench_rows' table) with
    each budget's split (LAYERNORM_BACKWARD_BUDGETS), on as many persistent CTAs as are
    resident for it, beside quack's layernorm_bwd."""
    from recipes import _rowwise as rw
    from recipes import layernorm_backward as lb
    import layoutkit as lk
    print("\n### layernorm_backward: splits by budget (GB/s; threads x ROWS, C x K x SUBS, "
          "cluster, CTAs)\n")
    print("| m x n | quack | " + " | ".join(LAYERNORM_BACKWARD_BUDGETS) + " |\n|---|---:|" +
          "---:|" * len(LAYERNORM_BACKWARD_BUDGETS), flush=True)
    for m, n in shapes:
        x = (torch.randn(m, n, device="cuda") + 3).to(torch.bfloat16)
        dy = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, device="cuda").to(torch.bfloat16)
        mean, rstd = x.float().mean(-1), torch.rand(m, device="cuda") + 0.5
        dx, sums = torch.empty_like(x), torch.empty(2, n, device="cuda", dtype=torch.bfloat16)
        calls, splits = {}, {}
        for label, budget in LAYERNORM_BACKWARD_BUDGETS.items():
            try:
                s = layernorm_backward_split(n, budget)
                kernel = lb.kernel_for(lk.bf16, lk.bf16, s)
                probe = torch.empty(1, device="cuda")
                resident = rw.resident_ctas(kernel, (dy, x, w, probe, probe, dy, probe, m,
                                                     n // s.VEC, 1e-5, 2, 3),
                                            lb.constexprs(s, True), s.CLUSTER, x.device)
                ctas = max(1, min(s.row_tiles(m), resident // s.CLUSTER))
                launch = lb.launches(dy, x, w, mean, rstd, dx, sums, rw.cuda_floats(x.device), m,
                                     n, 1e-5, (lk.bf16, lk.bf16), ctas, s)
                rw.launch(launch)
                torch.cuda.synchronize()
            except Exception as exc:           # a split that does not build or launch
                splits[label] = f"({type(exc).__name__}: {str(exc)[:60]})"
                continue
            splits[label] = (f"{s.P * s.ROWS}x{s.ROWS}, C{s.C} K{s.K} S{s.SUBS}, "
                             f"cl{s.CLUSTER}, {ctas}")
            calls[label] = lambda launch=launch: rw.launch(launch)
        if quack_missing is None:
            from quack.rmsnorm import layernorm_bwd
            w32 = w.float()
            calls["quack"] = lambda: layernorm_bwd(x, w32, dy, rstd, mean)
        budget_row(m, n, calls, splits, LAYERNORM_BACKWARD_BUDGETS,
                   3 * m * n * 2 + 3 * n * 2 + 8 * m, interleaved, gbps)
        calls = None
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=tuple(GRIDS), default="full",
                        help=f"issue 19's {len(GRIDS['full'])} shapes (full) or "
                             f"{len(QUICK)} of them (quick)")
    parser.add_argument("--quick", action="store_true", help="the same as --grid quick")
    parser.add_argument("--shapes", type=shape_list, default=None,
                        help="comma-separated MxN instead of the grid (e.g. 4096x131072,7x3000)")
    parser.add_argument("--kernels", default=",".join((*KERNELS, *ENTRY_POINTS)),
                        help=f"comma-separated, from {', '.join((*KERNELS, *ENTRY_POINTS))}")
    parser.add_argument("--sweep", nargs="?", const=",".join(SWEEPS), default=None,
                        help="time the split's alternatives instead (comma-separated, from "
                             f"{', '.join(SWEEPS)}; default all)")
    parser.add_argument("--exchange", choices=("async", "sync"), default="async",
                        help="the single-exchange kernels' cluster exchange: st.async on an "
                             "mbarrier (default) or st.shared::cluster and a cluster barrier")
    parser.add_argument("--peers", choices=("early", "late"), default="early",
                        help="the single-exchange kernels' relaxed cluster barrier: right after "
                             "the loads (default) or right before the exchange")
    args = parser.parse_args()
    from recipes import _rowwise_kernel
    _rowwise_kernel.ASYNC_EXCHANGE = args.exchange == "async"     # before any kernel is built
    _rowwise_kernel.PEERS_STARTED_LATE = args.peers == "late"
    started = time.perf_counter()
    quack_missing = activate_peers()
    import torch

    from layoutkit.tools.benchmarking import gbps, interleaved
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    quack_version = "unavailable: " + quack_missing if quack_missing else \
        getattr(sys.modules.get("quack"), "__version__", "?")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, quack {quack_version}, "
          f"layoutkit {commit}; bf16, L2 flushed, medians; GB/s = bytes read + written; "
          f"cluster exchange {args.exchange}, peers' barrier {args.peers}")
    if args.sweep:
        chosen = args.sweep.split(",")
        for name in chosen:
            if name not in SWEEPS:
                parser.error(f"--sweep: {name!r} is not one of {', '.join(SWEEPS)}")
        given = [args.shapes] if args.shapes else []
        forward = [k for k in ("softmax", "layernorm") if k in chosen]
        if forward:
            sweep(torch, quack_missing, interleaved, gbps, *given, kernels=forward)
        if "softmax_backward" in chosen:
            sweep_backward(torch, quack_missing, interleaved, gbps, *given)
        if "layernorm_backward" in chosen:
            sweep_layernorm_backward(torch, quack_missing, interleaved, gbps, *given)
        if "rmsnorm" in chosen:
            sweep_rmsnorm(torch, quack_missing, interleaved, gbps, *given)
        if "softmax_staged" in chosen:
            sweep_softmax_staged(torch, quack_missing, interleaved, gbps, *given)
    else:
        shapes = args.shapes or GRIDS["quick" if args.quick else args.grid]
        names = args.kernels.split(",")
        for name in names:
            if name not in KERNELS and name not in ENTRY_POINTS:
                parser.error(f"--kernels: {name!r} is not one of "
                             f"{', '.join((*KERNELS, *ENTRY_POINTS))}")
        # shapes past 2**31 elements last, every kernel's: a candidate faulting on 64-bit
        # offsets leaves the CUDA context unusable, and only these rows would be lost
        for part, title in (([s for s in shapes if s[0] * s[1] < 1 << 31], ""),
                            ([s for s in shapes if s[0] * s[1] >= 1 << 31],
                             ", shapes past 2**31 elements")):
            for name in names if part else ():
                if name in KERNELS:
                    time_kernel(KERNELS[name], part, torch, quack_missing, interleaved, gbps,
                                title)
                else:
                    run_entry_point(name, part, torch, title)
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
