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

    python benchmarks/bench_compile.py [--repeats 3] [--markdown] [RECIPE ...]
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


def child(recipe: str) -> None:
    """In the fresh process: compile the recipe's defaults, print one JSON object."""
    start = time.perf_counter()
    from layoutkit.tools.recipe_runner import default_specializations, load_recipe
    load_recipe(recipe)
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
                      "host": (compiled - imported) - python, "rows": rows}))


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (ptxas), user + system."""
    import resource
    own, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_child(recipe: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LAYOUTKIT_DEBUG"}
    with tempfile.TemporaryDirectory(prefix="layoutkit-bench-cache-") as cache:
        env["LAYOUTKIT_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, __file__, "--child", recipe], env=env,
                              capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if done.returncode != 0:      # a recipe that does not compile here: say so, go on
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"  {recipe}: did not compile:\n{done.stderr}", file=sys.stderr)
        return {"recipe": recipe, "error": last}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(recipes: list[str], repeats: int) -> list[dict]:
    """Per recipe: {"recipe", "import", "host", "rows": [{"name", phase: median s}]}."""
    results = []
    for recipe in recipes:
        runs = []
        for _ in range(repeats):
            runs.append(run_child(recipe))
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
                        "on_cpu": statistics.median(r["on_cpu"] for r in runs),
                        "host": statistics.median(r["host"] for r in runs)})
    return results


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
        out.append((result["recipe"], f"all {len(fresh)} (import {result['import'] * 1e3:.0f} "
                    f"ms; on a CPU {result['on_cpu']:.0%} of the time)",
                    *(sums[p] for p in PHASES), result["host"], python,
                    python + sums["ptxas"] + result["host"]))
    return out


def _ms(value) -> str:
    if value is None:
        return ""
    return f"{value * 1e3:.1f}" if value < 0.01 else f"{value * 1e3:.0f}"


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
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    from layoutkit.tools.recipe_runner import recipe_names
    recipes = args.recipes or recipe_names()
    command = " ".join(["python", "benchmarks/bench_compile.py", *sys.argv[1:]])
    header = [f"- Date: {time.strftime('%a %b %d %H:%M UTC %Y', time.gmtime())}",
              f"- Machine: {machine()}", f"- Commit: {commit()}", f"- Command: `{command}`"]
    rows = table_rows(measure(recipes, args.repeats))
    print("\n".join(header) + "\n")
    print(format_markdown(rows) if args.markdown else format_text(rows))


if __name__ == "__main__":
    main()
