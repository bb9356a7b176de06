"""Time layoutkit.algebra against pycute on the same inputs, in the same run, interleaved.

Integer path: composition, complement, logical_divide, logical_product and right_inverse on
five realistic inputs each (rank 2-4, depth <= 2: shared-memory tiles, TV layouts, tilers),
median microseconds per call over interleaved rounds, and the ratio layoutkit/pycute (lower is
better; the target is <= 1 on every op). Each result is checked against pycute's.
Symbolic path: the same ops on a rank-2 layout with symbolic extents, milliseconds per call,
"cold" (sympy's cache cleared before the call) and "warm" (the call repeated); the target is
< 50 ms each.

    python benchmarks/bench_algebra.py [--rounds 15] [--min-time 0.02]

Prints markdown tables (for docs/PERFORMANCE.md).
"""
from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import layoutkit.algebra as la  # noqa: E402
from sympy.core.cache import clear_cache  # noqa: E402

try:
    import pycute
except ImportError:  # pycute comes with the nvidia-cutlass wheel (the [test] extra)
    pycute = None

L = la.Layout
TV_128x64 = L(((32, 4), (4, 16)), ((4, 2048), (1, 128)))  # make_layout_tv((32,4):(1,32), (4,16))

# (op name, input description, args): the integer inputs.
INTEGER_CASES = [
    ("composition", "CuTe doc: (6,2):(8,2) o (4,3):(3,1)", (L((6, 2), (8, 2)), L((4, 3), (3, 1)))),
    ("composition", "smem (128,64) row-major o TV 128x64", (L((128, 64), (64, 1)), TV_128x64)),
    ("composition", "(12,(4,8)) o <3:4, 8:2>", (L((12, (4, 8)), (59, (13, 1))), (L(3, 4), L(8, 2)))),
    ("composition", "(64,(8,4)) o <16:1, (4,2):(1,4)>",
     (L((64, (8, 4)), (8, (1, 512))), (L(16, 1), L((4, 2), (1, 4))))),
    ("composition", "rank-3 ((2,4),(8,2),4) o (8,16):(16,1)",
     (L(((2, 4), (8, 2), 4), ((1, 256), (2, 16), 2048)), L((8, 16), (16, 1)))),
    ("complement", "CuTe doc: 4:2, 24", (L(4, 2), 24)),
    ("complement", "(2,2):(1,6), 24", (L((2, 2), (1, 6)), 24)),
    ("complement", "TV thread mode (32,4):(4,2048), 8192", (L((32, 4), (4, 2048)), 8192)),
    ("complement", "(8,(8,4)):(64,(1,4096)), 16384", (L((8, (8, 4)), (64, (1, 4096))), 16384)),
    ("complement", "((2,2),(2,4)):((1,8),(2,32)), 1024", (L(((2, 2), (2, 4)), ((1, 8), (2, 32))), 1024)),
    ("logical_divide", "CuTe doc: (4,2,3):(2,1,8) / 4:2", (L((4, 2, 3), (2, 1, 8)), L(4, 2))),
    ("logical_divide", "CuTe doc: (9,(4,8)) / <3:3, (2,4):(1,8)>",
     (L((9, (4, 8)), (59, (13, 1))), (L(3, 3), L((2, 4), (1, 8))))),
    ("logical_divide", "smem (128,64) / <64:1, 32:1>", (L((128, 64), (64, 1)), (L(64, 1), L(32, 1)))),
    ("logical_divide", "gmem (4096,4096) / <128:1, 64:1>",
     (L((4096, 4096), (4096, 1)), (L(128, 1), L(64, 1)))),
    ("logical_divide", "TV 128x64 / <8:1, 2:2>", (TV_128x64, (L(8, 1), L(2, 2)))),
    ("logical_product", "CuTe doc: (2,2):(4,1) x 6:1", (L((2, 2), (4, 1)), L(6, 1))),
    ("logical_product", "(2,5):(5,1) x (3,4):(1,3)", (L((2, 5), (5, 1)), L((3, 4), (1, 3)))),
    ("logical_product", "smem atom (8,64):(64,1) x (4,2)", (L((8, 64), (64, 1)), L((4, 2), (1, 4)))),
    ("logical_product", "threads (4,8):(8,1) x values (1,4)", (L((4, 8), (8, 1)), L((1, 4), (1, 1)))),
    ("logical_product", "rank-3 ((2,2),2,(2,2)) x (2,2)",
     (L(((2, 2), 2, (2, 2)), ((1, 2), 4, (8, 16))), L((2, 2), (1, 2)))),
    ("right_inverse", "(4,2):(2,1)", (L((4, 2), (2, 1)),)),
    ("right_inverse", "TV 128x64", (TV_128x64,)),
    ("right_inverse", "raked (4,8)x(1,4) layout_mn", (L(((1, 4), (4, 8)), ((32, 8), (32, 1))),)),
    ("right_inverse", "smem (8,64):(64,1)", (L((8, 64), (64, 1)),)),
    ("right_inverse", "((2,2),(2,4)):((1,4),(2,8))", (L(((2, 2), (2, 4)), ((1, 4), (2, 8))),)),
]


def symbolic_cases():
    """(op, description, args) on rank-2 symbolic layouts."""
    M, K = la.symbol("M", 128), la.symbol("K", 64)
    return [
        ("composition", "(M,K):(K,1) o <128:1, 64:1>", (L((M, K), (K, 1)), (L(128, 1), L(64, 1)))),
        ("complement", "(64,128):(1,K), M*K", (L((64, 128), (1, K)), M * K)),
        ("logical_divide", "(M,K):(K,1) / <128:1, 64:1>", (L((M, K), (K, 1)), (L(128, 1), L(64, 1)))),
        ("logical_product", "(M,K):(1,M) x 4:1", (L((M, K), (1, M)), L(4, 1))),
        ("right_inverse", "(M,K):(K,1)", (L((M, K), (K, 1)),)),
    ]


def to_pycute(x):
    if isinstance(x, la.Layout):
        return pycute.Layout(x.shape, x.stride)
    if isinstance(x, tuple):
        return tuple(to_pycute(v) for v in x)
    return x


def same_result(ours, theirs) -> str:
    """'same' when shape and stride match; 'same fn' when they agree as functions; else 'DIFFERS'."""
    if ours.shape == theirs.shape and ours.stride == theirs.stride:
        return "same"
    n = la.size(ours)
    if n == pycute.size(theirs) and all(ours(i) == theirs(i) for i in range(n)):
        return "same fn"
    return "DIFFERS"


def per_call_us(fn, number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6


def calls_for(fn, min_time: float) -> int:
    """Calls per timing so that one timing lasts about min_time seconds."""
    n = 1
    while True:
        t = timeit.timeit(fn, number=n)
        if t >= min_time:
            return n
        n = max(n * 2, int(n * min_time / max(t, 1e-9)))


def bench_integer(rounds: int, min_time: float) -> list[dict]:
    rows = []
    for op, desc, args in INTEGER_CASES:
        ours = getattr(la, op)
        ours_call = lambda: ours(*args)  # noqa: E731
        row = {"op": op, "input": desc}
        if pycute is not None:
            theirs = getattr(pycute, op)
            pargs = to_pycute(args)
            theirs_call = lambda: theirs(*pargs)  # noqa: E731
            row["check"] = same_result(ours_call(), theirs_call())
            n = max(calls_for(ours_call, min_time), calls_for(theirs_call, min_time))
            ours_t, theirs_t = [], []
            for _ in range(rounds):  # interleaved, so machine noise hits both alike
                ours_t.append(per_call_us(ours_call, n))
                theirs_t.append(per_call_us(theirs_call, n))
            row["pycute_us"] = statistics.median(theirs_t)
        else:
            n = calls_for(ours_call, min_time)
            ours_t = [per_call_us(ours_call, n) for _ in range(rounds)]
        row["ours_us"] = statistics.median(ours_t)
        rows.append(row)
    return rows


def bench_symbolic(rounds: int) -> list[dict]:
    rows = []
    for op, desc, args in symbolic_cases():
        fn = getattr(la, op)
        cold, warm = [], []
        for _ in range(rounds):
            clear_cache()
            t0 = time.perf_counter()
            fn(*args)
            cold.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            result = fn(*args)
            warm.append((time.perf_counter() - t0) * 1e3)
        rows.append({"op": op, "input": desc, "cold_ms": statistics.median(cold),
                     "warm_ms": statistics.median(warm), "result": str(result)})
    return rows


def integer_table(rows: list[dict]) -> str:
    have_pycute = "pycute_us" in rows[0]
    head = "| op | input | layoutkit µs | pycute µs | ratio | result vs pycute |" if have_pycute \
        else "| op | input | layoutkit µs |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if have_pycute:
            out.append(f"| {r['op']} | {r['input']} | {r['ours_us']:.1f} | {r['pycute_us']:.1f} | "
                       f"{r['ours_us'] / r['pycute_us']:.2f} | {r['check']} |")
        else:
            out.append(f"| {r['op']} | {r['input']} | {r['ours_us']:.1f} |")
    if have_pycute:
        out.append("")
        out.append("| op | geometric mean ratio layoutkit/pycute | worst ratio |")
        out.append("|---|---|---|")
        for op in dict.fromkeys(r["op"] for r in rows):
            ratios = [r["ours_us"] / r["pycute_us"] for r in rows if r["op"] == op]
            gmean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            out.append(f"| {op} | {gmean:.2f} | {max(ratios):.2f} |")
    return "\n".join(out)


def symbolic_table(rows: list[dict]) -> str:
    out = ["| op (symbolic, M%128, K%64) | input | cold ms | warm ms | < 50 ms | result |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        ok = "yes" if max(r["cold_ms"], r["warm_ms"]) < 50 else "NO"
        out.append(f"| {r['op']} | {r['input']} | {r['cold_ms']:.2f} | {r['warm_ms']:.2f} | {ok} | "
                   f"`{r['result']}` |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds (median)")
    ap.add_argument("--min-time", type=float, default=0.02, help="seconds per timing")
    ap.add_argument("--symbolic-rounds", type=int, default=7)
    opts = ap.parse_args(argv)
    print(f"python {platform.python_version()}, pycute "
          f"{'present' if pycute is not None else 'absent (layoutkit only)'}\n")
    print(integer_table(bench_integer(opts.rounds, opts.min_time)))
    print()
    print(symbolic_table(bench_symbolic(opts.symbolic_rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
