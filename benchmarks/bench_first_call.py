"""What an author waits for in a new process: the first call of each recipe's entry point on the
GPU, with an empty on-disk cache (cold) and again in a second fresh process with the cache the
first one filled (warm), beside the same call repeated (what every call costs).

Each case runs in fresh Python processes sharing one LAYOUTKIT_CACHE_DIR: process 1 finds the
directory empty (every specialization traced, checked, lowered and assembled by ptxas), process 2
finds process 1's entries (layoutkit.dsl.core.spec_cache: loaded, validated, launched without
tracing). In each process torch and CUDA are initialised and the random inputs made before the
clock starts; then "import" = importing the recipe (and layoutkit), "first" = the first call up
to the synchronize after it, "again" = the median of 5 more identical calls, each to its
synchronize, "above" = first - again. Cases that change a shape after the first call
("then ...") time that call too: whether a new size costs a new specialization.

Issue 14's figures: the first GEMM call took 11.9 s cold and 11.3 s warm (the cache then only
saved ptxas); a warm first launch is to cost <= 50 ms above the launch itself.

Each case's rows are printed when it is done (a run cut short keeps the cases before it);
--warm N runs N warm processes after each cold one (warm medians over all of them).

With --breakdown the warm process also times what the first call spends its time in (each
named part once, outermost calls only, wall ms; the parts overlap where one calls another:
"driver: import" is inside whichever part first needs the driver), printed as a second table of
medians: the driver's import and its calls (module load, tensor-map encode, launch), the
specialization cache (fingerprints, environment, entry load), the tuners' tables, the generated
code (compile() of any source, the code cache), kernel[grid] and the launcher's configuration.

    PYTHONPATH=. python3 benchmarks/bench_first_call.py [--repeats 3] [--warm 1] [--markdown] [--breakdown] [CASE ...]
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gemm(torch, m, n, k):
    from recipes import gemm_hopper
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    return lambda: gemm_hopper.gemm(a, b)


def _attention(torch, batch, seqlen, heads, head_dim, causal):
    from recipes import flash_attention
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda").to(torch.bfloat16)
               for _ in range(3))
    return lambda: flash_attention.flash_attention(q, k, v, causal=causal)


def _softmax(torch, m, n):
    from recipes import softmax
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    return lambda: softmax.softmax(x)


def _layernorm(torch, m, n):
    from recipes import layernorm
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    w, b = (torch.randn(n, device="cuda").to(torch.bfloat16) for _ in range(2))
    return lambda: layernorm.layernorm(x, w, b)


def _rmsnorm(torch, m, n):
    from recipes import rmsnorm
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, device="cuda").to(torch.bfloat16)
    return lambda: rmsnorm.rmsnorm(x, w)


# name -> (the recipe module, the first call's maker and arguments, then the later calls'
# (label, maker, arguments))
CASES = {
    "gemm": ("recipes.gemm_hopper", (_gemm, (4096, 4096, 4096)),
             (("then M = 3000", _gemm, (3000, 4096, 4096)),
              ("then M = 16", _gemm, (16, 4096, 4096)))),
    "flash_attention": ("recipes.flash_attention", (_attention, (4, 2048, 16, 128, False)),
                        (("then causal", _attention, (4, 2048, 16, 128, True)),
                         ("then seqlen 1000", _attention, (4, 1000, 16, 128, False)))),
    "softmax": ("recipes.softmax", (_softmax, (4096, 4096)), (("then 1000 x 3000", _softmax, (1000, 3000)),)),
    "layernorm": ("recipes.layernorm", (_layernorm, (4096, 4096)), (("then 1000 x 3000", _layernorm, (1000, 3000)),)),
    "rmsnorm": ("recipes.rmsnorm", (_rmsnorm, (4096, 4096)), (("then 1000 x 3000", _rmsnorm, (1000, 3000)),)),
}


def _timed(torch, call) -> float:
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    return time.perf_counter() - start


class Breakdown:
    """Wall seconds and calls per named part of the first call: `wrap(owner, name, label)`
    replaces a function (a module's, in every module that imported it by name, or a class's
    method) by one that times its outermost calls."""

    def __init__(self):
        self.parts: dict[str, list] = {}
        self.on = True

    def wrap(self, owner, name: str, label: str) -> None:
        import functools
        original = getattr(owner, name)
        depth = [0]
        parts = self.parts.setdefault(label, [0, 0.0])

        @functools.wraps(original)
        def timed(*args, **kwargs):
            if depth[0] or not self.on:
                return original(*args, **kwargs)
            depth[0] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                depth[0] -= 1
                parts[0] += 1
                parts[1] += time.perf_counter() - start
        if isinstance(owner, type):
            setattr(owner, name, timed)
            return
        setattr(owner, name, timed)
        for module in list(sys.modules.values()):
            if str(getattr(module, "__name__", "")).startswith(("layoutkit", "recipes")) \
                    and getattr(module, name, None) is original:
                setattr(module, name, timed)

    def install(self) -> None:
        """The parts (module docstring); the driver's calls once its bindings are imported."""
        import builtins

        from layoutkit.dsl.core import autotune, fingerprint, spec_cache
        from layoutkit.dsl.core.kernel import Kernel
        from layoutkit.dsl.core.specialization import Specialization
        from layoutkit.ptx import code_cache, driver
        self.wrap(fingerprint, "function_fingerprint", "fingerprint: function_fingerprint")
        self.wrap(fingerprint, "environment", "fingerprint: environment")
        self.wrap(spec_cache.KernelCache, "load", "spec cache: KernelCache.load (key, read, check)")
        self.wrap(autotune.WinnerTable, "_load", "tuners: WinnerTable._load (path, JSON)")
        self.wrap(code_cache, "compiled", "code: code_cache.compiled")
        self.wrap(builtins, "compile", "code: compile() of any source")
        self.wrap(Kernel, "__getitem__", "kernel[grid] (the fast path made)")
        self.wrap(Specialization, "launcher", "Specialization.launcher (configure)")
        bindings = driver.bindings
        calls = ("cuModuleLoadData", "cuModuleGetFunction", "cuFuncGetAttribute",
                 "cuFuncSetAttribute", "cuTensorMapEncodeTiled", "cuOccupancyMaxActiveClusters",
                 "cuLaunchKernel", "cuLaunchKernelEx", "cuDeviceGetName", "cuCtxGetCurrent")

        def imported():
            fresh = "cuda.bindings.driver" not in sys.modules
            cu = bindings()
            if fresh:
                for name in calls:
                    if hasattr(cu, name):
                        self.wrap(cu, name, f"driver: {name}")
            return cu
        driver.bindings = imported
        self.wrap(driver, "bindings", "driver: import (the first bindings())")

    def result(self) -> dict:
        return {label: ms for label, ms in self.parts.items() if ms[0]}


def child(case: str, breakdown: bool = False) -> None:
    """In the fresh process: torch, CUDA and inputs first, then the clocked import and calls;
    prints one JSON object (seconds)."""
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    sys.path.insert(0, str(ROOT))
    module, (maker, arguments), later = CASES[case]
    start = time.perf_counter()
    importlib.import_module(module)
    result = {"import": time.perf_counter() - start}
    call = maker(torch, *arguments)
    parts = None
    if breakdown:
        parts = Breakdown()
        parts.install()
    result["first"] = _timed(torch, call)
    if parts is not None:
        parts.on = False
        result["breakdown"] = parts.result()
    result["again"] = statistics.median(_timed(torch, call) for _ in range(5))
    for label, maker_then, arguments_then in later:
        then = maker_then(torch, *arguments_then)
        result[label] = _timed(torch, then)
        result[label + " again"] = statistics.median(_timed(torch, then) for _ in range(5))
    print(json.dumps(result))


def run(case: str, cache: str, breakdown: bool = False) -> dict:
    env = dict(os.environ, LAYOUTKIT_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    env.pop("LAYOUTKIT_SPEC_CACHE", None)
    env.pop("LAYOUTKIT_DEBUG", None)
    done = subprocess.run([sys.executable, __file__, "--child", case] +
                          (["--breakdown"] if breakdown else []), env=env, text=True,
                          capture_output=True, timeout=600)
    if done.returncode:
        raise SystemExit(f"{case}: the child process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(case: str, repeats: int, warm_runs: int = 1, breakdown: bool = False):
    """(rows, parts) of one case: rows (case, call, cold ms, warm ms) of medians over `repeats`
    cold processes, each followed by `warm_runs` warm ones on its cache (the warm column: the
    median of all warm processes); with `breakdown` the warm processes time their parts and
    parts is {part: (median calls, median ms)} (else {})."""
    results: dict[str, tuple[list, list]] = {}
    parts: dict[str, list] = {}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="lk_first_call_") as cache:
            cold = run(case, cache)
            warms = [run(case, cache, breakdown) for _ in range(warm_runs)]
        for warm in warms:
            for label, (calls, seconds) in warm.pop("breakdown", {}).items():
                parts.setdefault(label, []).append((calls, seconds))
        for key in cold:
            colds, warm_values = results.setdefault(key, ([], []))
            colds.append(cold[key])
            warm_values.extend(w[key] for w in warms)
    rows = [(case, key, statistics.median(c) * 1e3, statistics.median(w) * 1e3)
            for key, (c, w) in results.items()]
    first = {r[1]: r for r in rows}
    rows.append((case, "above (first - again)", first["first"][2] - first["again"][2],
                 first["first"][3] - first["again"][3]))
    return rows, {label: (statistics.median(c for c, _ in v), statistics.median(t for _, t in v) * 1e3)
                  for label, v in parts.items()}


def _ms(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 else f"{x:.2f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"cases (default: all of {', '.join(CASES)})")
    parser.add_argument("--repeats", type=int, default=3, help="cold processes per case")
    parser.add_argument("--warm", type=int, default=1, help="warm processes after each cold one")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--breakdown", action="store_true",
                        help="time the parts of the warm first call (module docstring)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.breakdown)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}: the cases are {list(CASES)}")
    print(f"- Command: `python3 benchmarks/bench_first_call.py {' '.join(sys.argv[1:])}`"
          f" (ms; cold: medians of {args.repeats} fresh processes with an empty cache, warm: of "
          f"the {args.warm} fresh process(es) after each; each case printed when it is done)\n",
          flush=True)
    if args.markdown:
        print("| case | call | cold ms | warm ms |\n|---|---|---:|---:|", flush=True)
    parts_of = {}
    for case in args.cases or list(CASES):
        rows, parts_of[case] = measure(case, args.repeats, args.warm, args.breakdown)
        for case_, key, cold, warm in rows:
            print(f"| {case_} | {key} | {_ms(cold)} | {_ms(warm)} |" if args.markdown else
                  f"{case_:16} {key:28} {_ms(cold):>9} {_ms(warm):>9}", flush=True)
    if args.breakdown:
        print("\nThe warm first call's parts (medians; outermost calls of each part, which overlap"
              " where one calls another):\n")
        print("| case | part | calls | ms |\n|---|---|---:|---:|")
        for case, per_label in parts_of.items():
            for label, (calls, ms) in sorted(per_label.items(), key=lambda kv: -kv[1][1]):
                print(f"| {case} | {label} | {calls:g} | {_ms(ms)} |")

if __name__ == "__main__":
    main()
