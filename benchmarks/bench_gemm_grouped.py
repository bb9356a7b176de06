"""recipes/gemm_grouped.py against a loop of torch.matmul over the groups (cuBLAS per group,
sizes known on the host) and torch._grouped_mm (where this torch has it), same run, on MoE
shapes: 8 experts with 8k-32k tokens, uniform and skewed, (N, K) = (14336, 4096) and
(4096, 14336), and 64 experts with small groups; both B layouts.

    PYTHONPATH=. python3 benchmarks/bench_gemm_grouped.py [--reps 20] [--quick]

Each case is checked against the torch loop first; then the candidates are timed interleaved
with the L2 flushed before each call (layoutkit.tools.benchmarking.interleaved; medians).
Prints a markdown table of TFLOP/s (2 * tokens * N * K per call) and the ratios ours / theirs
(> 1: layoutkit faster), then why torch._grouped_mm is missing from a row, if it is.
"""
from __future__ import annotations

import argparse
import sys

import torch

from layoutkit.tools.recipe_runner import load_recipe

NK = ((14336, 4096), (4096, 14336))


def cases(quick: bool):
    """(sizes, N, K, K-major B) of every row."""
    recipe = load_recipe("gemm_grouped")
    gen = torch.Generator().manual_seed(0)
    layouts = (True,) if quick else (True, False)
    for groups, totals in ((8, (8192, 16384, 32768)), (64, (8192, 32768))):
        for total in totals[:1] if quick else totals:
            for skewed in (False, True):
                sizes = recipe.random_groups(gen, groups, total) if skewed else \
                    [total // groups] * groups
                for n, k in NK:
                    for kmajor in layouts:
                        yield sizes, n, k, kmajor


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="one token count per expert count, K-major B only")
    args = parser.parse_args(argv)
    recipe = load_recipe("gemm_grouped")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| groups | N | K | B | layoutkit TFLOP/s | torch loop | ours / loop | "
          "torch._grouped_mm | ours / grouped_mm |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    notes = []
    for sizes, n, k, kmajor in cases(args.quick):
        row = recipe.bench_case(sizes, n, k, kmajor, args.reps)
        t = row["tflops"]
        ours, loop = t["layoutkit"], t["torch loop"]
        mm = t.get("torch._grouped_mm")
        mm_cells = f"{mm:.1f} | {ours / mm:.3f}" if mm else "- | -"
        print(f"| {row['groups']} | {n} | {k} | {row['B']} | {ours:.1f} | {loop:.1f} | "
              f"{ours / loop:.3f} | {mm_cells} |", flush=True)
        if row["grouped_mm_absent"]:
            notes.append(f"{row['groups']} N={n} K={k} {row['B']}: {row['grouped_mm_absent']}")
    for note in dict.fromkeys(notes):
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
