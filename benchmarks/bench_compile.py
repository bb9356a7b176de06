"""Compile time per phase, on the CPU: every recipe's default specializations (its
compile_default()), each split into trace, verify, protocol check, lower and ptxas.

Cold, as an author's first call meets it: each recipe runs in a fresh Python process (fresh
Kernel objects, nothing cached in memory), with LAYOUTKIT_CACHE_DIR set to a new empty directory
so ptxas runs for every cubin (no on-disk hit), and LAYOUTKIT_DEBUG unset (the default build).
The phases are the ones `Specialization.timings` records while Kernel.specialize makes a
specialization (perf_counter around each; "ptxas" around the assemble that the cubin property
runs); nothing is patched. "w/o ptxas" is trace + verify + check + lower (what issue 14's
targets are about); "host" is the rest of compile_default()'s time (binding arguments, the
specialization key, the recipe's own host code); "import" is importing layoutkit and the recipe,
once per process. The first specialization of a process also pays one-time work
(lazily built tables, sympy's caches): that is part of a cold compile and stays in its row.

Each cell is the median over --repeats fresh processes, in milliseconds (wall clock). On a
shared machine a process waits for a core part of the time: each recipe's total row says what
fraction of its compile's wall time the process (and ptxas) spent on a CPU (CPU time / wall
time; ~100% on an idle machine, less when other jobs take the cores).

The second table is the first launch of a *new process with a warm specialization cache*
(layoutkit.dsl.core.spec_cache): after each cold run, another fresh process with the same cache
directory imports the recipe, finds the kernel calls of its compile_default() (Kernel.ptx
recorded, not run) and launches each on the fake GPU of tests/dsl/fake_hopper.py (real cubins,
tensor maps encoded by a recording fake, the launch a recorded driver call): "first launch" is
the time from the `kernel[grid](...)` call to the driver call (loading the entry, validating
it, rebuilding the launch plan and tensor maps, configuring the launcher, packing), "launch"
the same call again (what every launch costs), "above" their difference (issue 14: <= 50 ms).
"from" says where the specialization came from ("disk": no trace). With --gpu (a Hopper
machine) the warm process launches on the real GPU instead, on torch tensors of the recorded
shapes (uninitialized; grid of one CTA or cluster): "first launch" and "launch" are then the
host time of the `kernel[grid](...)` call, which returns once cuLaunchKernel(Ex) has queued it.

With --cpu-time the phases but ptxas are the compiling process's CPU time instead (the
kernel module's perf_counter replaced by time.process_time in the child): on a machine shared
with other jobs, wall time also counts the waits for a core ("host" is then wall time less CPU
time and means nothing).

With --sympy-first the child imports sympy, and the modules sympy imports inside its first
sum (sympy.tensor.tensor and what it pulls in; Add.flatten imports them on every call), after
the recipe and before the compile, and reports that time beside "import": the first
specialization's row then holds its own work (sympy's first evaluation of each expression
included) and not sympy's import, which `import layoutkit.dsl` defers to the first trace.

    python benchmarks/bench_compile.py [--repeats 3] [--markdown] [--no-warm] [--gpu]
                                       [--cpu-time] [--sympy-first] [RECIPE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHASES = ("trace", "verify", "check", "lower", "ptxas")
COLUMNS = PHASES + ("host", "w/o ptxas", "total")   # w/o ptxas: trace..lower; total: all


def child(recipe: str, cpu_time: bool = False, sympy_first: bool = False) -> None:
    """In the fresh process: compile the recipe's defaults, print one JSON object (with
    `cpu_time`, the phases but ptxas in this process's CPU seconds: see --cpu-time; with
    `sympy_first`, sympy imported before the compile and timed: see --sympy-first)."""
    start = time.perf_counter()
    from layoutkit.tools.recipe_runner import default_specializations, load_recipe
    if cpu_time:
        import importlib
        importlib.import_module("layoutkit.dsl.core.kernel").perf_counter = time.process_time
    load_recipe(recipe)
    sympy_import = import_sympy(cpu_time) if sympy_first else None
    imported, cpu_start = time.perf_counter(), _cpu_seconds()
    found = default_specializations(recipe)
    compiled = time.perf_counter()
    rows, seen = [], set()
    for d in found:
        spec = d.specialization
        if spec is None:
            raise SystemExit(f"{recipe}: {d.name}: PTX not made by Kernel.specialize")
        fresh = id(spec) not in seen
        seen.add(id(spec))
        spec.cubin                                   # assemble: records timings["ptxas"]
        rows.append({"name": d.name, "fresh": fresh, **spec.timings})
    python = sum(row[p] for row in rows if row["fresh"] for p in PHASES[:-1])
    on_cpu = (_cpu_seconds() - cpu_start) / (time.perf_counter() - imported)
    print(json.dumps({"recipe": recipe, "import": imported - start, "on_cpu": on_cpu,
                      "host": (compiled - imported) - python, "rows": rows,
                      "sympy_import": sympy_import}))


def import_sympy(cpu_time: bool) -> float:
    """Import sympy and the modules its first Add imports (--sympy-first); the seconds taken
    (CPU seconds with `cpu_time`)."""
    clock = time.process_time if cpu_time else time.perf_counter
    start = clock()
    import sympy
    sympy.Add(sympy.Symbol("x"), 1)     # sympy.tensor.tensor and the rest Add.flatten imports
    return clock() - start


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (ptxas), user + system."""
    import resource
    own, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def warm_child(recipe: str, gpu: bool = False) -> None:
    """In a fresh process whose cache a cold run filled: time each compile_default() kernel
    call's first launch on the fake GPU, or the real one (module docstring); print one JSON
    object."""
    import contextlib

    from pytest import MonkeyPatch

    from layoutkit.dsl import Kernel
    from layoutkit.tools.recipe_runner import load_recipe
    from tests.dsl.fake_hopper import FakeHopper
    module = load_recipe(recipe)
    calls = []
    with MonkeyPatch.context() as mp:
        mp.setattr(Kernel, "ptx", lambda self, *a, **kw: calls.append((self, a, kw)) or "")
        names = list(module.compile_default())
    stamps, rows = [], []
    with MonkeyPatch.context() if not gpu else contextlib.nullcontext() as mp:
        if not gpu:
            FakeHopper(mp, list({id(k): k for k, _, _ in calls}.values()),
                       on_launch=lambda: stamps.append(time.perf_counter()))
        argument = _real_argument if gpu else _fake_argument
        for i, (k, args, kwargs) in enumerate(calls):
            args = [argument(a, n) for n, a in enumerate(args)]
            kwargs = {n: argument(v, 100 + j) for j, (n, v) in enumerate(kwargs.items())}
            grid = (k.cluster[0] if k.cluster else 1,)
            times = []
            for _ in range(2):
                if gpu:
                    sys.modules["torch"].cuda.synchronize()
                start = time.perf_counter()
                k[grid](*args, **kwargs)
                times.append((time.perf_counter() if gpu else stamps[-1]) - start)
            spec = k._cache[k.key(*args, **kwargs)]
            rows.append({"name": names[i] if i < len(names) else k.name, "first": times[0],
                         "launch": times[1], "from": spec.source})
        if gpu:
            sys.modules["torch"].cuda.synchronize()
    print(json.dumps({"recipe": recipe, "rows": rows}))


def _real_argument(value, slot: int):
    """An uninitialized CUDA tensor for an lk.TensorSpec or lk.Pointer[dtype] (the spec's
    shape, strides and alignment); anything else as it is."""
    import torch

    from layoutkit.dsl import PointerType, TensorSpec
    names = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
             "i32": "int32", "i64": "int64", "u32": "uint32"}

    def dtype(d):
        return getattr(torch, names[d.name])
    if isinstance(value, TensorSpec):
        span = 1 + sum((n - 1) * s for n, s in zip(value.shape, value.strides))
        base = torch.empty(span + 8, dtype=dtype(value.dtype), device="cuda")
        return base.as_strided(value.shape, value.strides, 0 if value.aligned else 1)
    if isinstance(value, PointerType):
        return torch.empty(1 << 20, dtype=dtype(value.dtype), device="cuda")
    return value


def _fake_argument(value, slot: int):
    """A fake CUDA tensor for an lk.TensorSpec or lk.Pointer[dtype] (its own 16 MB slot of
    addresses, the spec's alignment); anything else as it is."""
    from layoutkit.dsl import PointerType, TensorSpec
    from layoutkit.dsl.core.types import HOST_NAMES
    from tests.dsl.fake_gpu import BASE, Tensor
    torch_name = {dtype: name for name, dtype in HOST_NAMES.items()}
    if isinstance(value, TensorSpec):
        address = BASE + (slot << 24) + (0 if value.aligned else value.dtype.nbytes)
        return Tensor(address, torch_name[value.dtype], value.shape, strides=value.strides)
    if isinstance(value, PointerType):
        return Tensor(BASE + (slot << 24), torch_name[value.dtype], (1 << 20,))
    return value


def run_child(recipe: str, warm: bool = False, gpu: bool = False, cpu_time: bool = False,
              sympy_first: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LAYOUTKIT_DEBUG",
                                                            "LAYOUTKIT_SPEC_CACHE")}
    with tempfile.TemporaryDirectory(prefix="layoutkit-bench-cache-") as cache:
        env["LAYOUTKIT_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, __file__, "--child", recipe,
                               *(["--cpu-time"] if cpu_time else []),
                               *(["--sympy-first"] if sympy_first else [])], env=env,
                              capture_output=True, text=True, timeout=3600, cwd=ROOT)
        if done.returncode == 0 and warm:
            again = subprocess.run([sys.executable, __file__, "--warm-child", recipe,
                                    *(["--gpu"] if gpu else [])], env=env,
                                   capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if done.returncode != 0:      # a recipe that does not compile here: say so, go on
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"  {recipe}: did not compile:\n{done.stderr}", file=sys.stderr)
        return {"recipe": recipe, "error": last}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if warm:
        if again.returncode == 0:
            result["warm"] = json.loads(again.stdout.strip().splitlines()[-1])["rows"]
        else:
            print(f"  {recipe}: the warm launch failed:\n{again.stderr}", file=sys.stderr)
            result["warm_error"] = (again.stderr.strip().splitlines() or ["?"])[-1]
    return result


def measure(recipes: list[str], repeats: int, warm: bool = True, gpu: bool = False,
            cpu_time: bool = False, sympy_first: bool = False) -> list[dict]:
    """Per recipe: {"recipe", "import", "host", "rows": [{"name", phase: median s}], "warm":
    [{"name", "first", "launch": median s, "from"}]}."""
    results = []
    for recipe in recipes:
        runs = []
        for _ in range(repeats):
            runs.append(run_child(recipe, warm, gpu, cpu_time, sympy_first))
            print(f"  {recipe}: run {len(runs)}/{repeats} done", file=sys.stderr, flush=True)
            if "error" in runs[-1]:
                break
        if "error" in runs[-1]:
            results.append(runs[-1])
            continue
        rows = []
        for i, row in enumerate(runs[0]["rows"]):
            med = {p: statistics.median(run["rows"][i].get(p, 0.0) for run in runs)
                   for p in PHASES}
            rows.append({"name": row["name"], "fresh": row["fresh"], **med})
        results.append({"recipe": recipe, "rows": rows,
                        "import": statistics.median(r["import"] for r in runs),
                        "sympy_import": None if runs[0].get("sympy_import") is None else
                        statistics.median(r["sympy_import"] for r in runs),
                        "on_cpu": statistics.median(r["on_cpu"] for r in runs),
                        "host": statistics.median(r["host"] for r in runs),
                        "warm": _warm_medians(runs),
                        "warm_error": next((r["warm_error"] for r in runs
                                            if "warm_error" in r), None)})
    return results


def _warm_medians(runs: list[dict]) -> list[dict]:
    warm = [r["warm"] for r in runs if "warm" in r]
    if not warm:
        return []
    return [{"name": row["name"], "from": "/".join(sorted({w[i]["from"] for w in warm})),
             **{t: statistics.median(w[i][t] for w in warm) for t in ("first", "launch")}}
            for i, row in enumerate(warm[0])]


def warm_rows(results: list[dict]) -> list[tuple]:
    """(recipe, call, first launch, launch, above, from) per kernel call of compile_default()."""
    out = []
    for result in results:
        if result.get("warm_error"):
            out.append((result["recipe"], f"warm launch failed: {result['warm_error'][:70]}",
                        None, None, None, ""))
        for row in result.get("warm", ()):
            out.append((result["recipe"], row["name"], row["first"], row["launch"],
                        row["first"] - row["launch"], row["from"]))
    return out


def format_warm(rows: list[tuple], markdown: bool) -> str:
    header = ("recipe", "kernel call", "first launch ms", "launch ms", "above ms", "from")
    cells = [header] + [(r[0], r[1], *(_ms(x) for x in r[2:5]), r[5]) for r in rows]
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
                         ["| " + " | ".join(c) + " |" for c in cells[1:]])
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i in (0, 1, 5) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                     for row in cells)


def table_rows(results: list[dict]) -> list[tuple]:
    """(recipe, specialization, ms per COLUMNS...) rows, a total row per recipe."""
    out = []
    for result in results:
        if "error" in result:
            out.append((result["recipe"], f"did not compile: {result['error'][:70]}")
                       + (None,) * len(COLUMNS))
            continue
        fresh = [row for row in result["rows"] if row["fresh"]]
        for row in fresh:
            python = sum(row[p] for p in PHASES[:-1])
            out.append((result["recipe"], row["name"], *(row[p] for p in PHASES), None,
                        python, python + row["ptxas"]))
        sums = {p: sum(row[p] for row in fresh) for p in PHASES}
        python = sum(sums[p] for p in PHASES[:-1])
        sympy_ms = result.get("sympy_import")
        of_sympy = "" if sympy_ms is None else f", of it sympy {sympy_ms * 1e3:.0f} ms"
        out.append((result["recipe"], f"all {len(fresh)} (import {result['import'] * 1e3:.0f} "
                    f"ms{of_sympy}; on a CPU {result['on_cpu']:.0%} of the time)",
                    *(sums[p] for p in PHASES), result["host"], python,
                    python + sums["ptxas"] + result["host"]))
    return out


def _ms(value) -> str:
    if value is None:
        return ""
    if abs(value) < 0.001:
        return f"{value * 1e3:.3f}"
    return f"{value * 1e3:.1f}" if abs(value) < 0.01 else f"{value * 1e3:.0f}"


def format_text(rows: list[tuple]) -> str:
    header = ("recipe", "specialization") + tuple(f"{c} ms" for c in COLUMNS)
    cells = [header] + [(r[0], r[1], *map(_ms, r[2:])) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                     for row in cells)


def format_markdown(rows: list[tuple]) -> str:
    header = ("recipe", "specialization") + tuple(f"{c} ms" for c in COLUMNS)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        bold = r[1].startswith("all ")
        cells = [r[0], r[1], *map(_ms, r[2:])]
        if bold:
            cells = [f"**{c}**" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (f"{model}, {os.cpu_count()} cores (load average {load} at the start), Python "
            f"{platform.python_version()}, no GPU needed")


def commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes in the tree)"
                                                  if dirty else "")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="*", help="recipes (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per recipe")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--no-warm", action="store_true",
                        help="skip the warm-cache first-launch table")
    parser.add_argument("--gpu", action="store_true",
                        help="the warm-cache launches on the real GPU (a Hopper machine)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="trace, verify, check and lower in the process's CPU time (ptxas "
                        "stays wall time): steadier than wall time on a shared machine")
    parser.add_argument("--sympy-first", action="store_true",
                        help="import sympy before the compile and report it beside the import, "
                        "not in the first specialization's trace")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--warm-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.cpu_time, args.sympy_first)
    if args.warm_child:
        return warm_child(args.warm_child, args.gpu)
    from layoutkit.tools.recipe_runner import recipe_names
    recipes = args.recipes or recipe_names()
    command = " ".join(["python", "benchmarks/bench_compile.py", *sys.argv[1:]])
    header = [f"- Date: {time.strftime('%a %b %d %H:%M UTC %Y', time.gmtime())}",
              f"- Machine: {machine()}", f"- Commit: {commit()}", f"- Command: `{command}`"]
    results = measure(recipes, args.repeats, warm=not args.no_warm, gpu=args.gpu,
                      cpu_time=args.cpu_time, sympy_first=args.sympy_first)
    rows = table_rows(results)
    print("\n".join(header) + "\n")
    print(format_markdown(rows) if args.markdown else format_text(rows))
    if not args.no_warm:
        where = "the GPU, host time of the call" if args.gpu else "fake GPU"
        print(f"\nFirst launch in a new process with a warm specialization cache ({where}; "
              "median ms; 'above' = first launch - launch):\n")
        print(format_warm(warm_rows(results), args.markdown))


if __name__ == "__main__":
    main()
