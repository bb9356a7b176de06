"""bf16 GEMM, layoutkit's recipes/gemm_hopper.py against cuBLAS (torch.matmul), same run.

    PYTHONPATH=. python3 benchmarks/bench_gemm.py [--reps 30] [--sweep]

For each shape (M, N, K): random bf16 A (M x K, row-major) and B (K x N, row-major, i.e.
N-major; `--kmajor` also times B given K-major), the output checked against torch in float32
first, then both GEMMs timed interleaved with the L2 flushed before each call
(layoutkit.tools.benchmarking). Prints TFLOP/s (2*M*N*K / time) and the ratio layoutkit / cuBLAS.
`--sweep` times every config of the recipe's autotuning space per shape and prints the best.
"""
from __future__ import annotations

import argparse
import sys

import torch

from layoutkit.tools.benchmarking import interleaved, tflops
from layoutkit.tools.recipe_runner import load_recipe

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024))


def _inputs(m, n, k, kmajor: bool):
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    if kmajor:
        b = b.t().contiguous().t()     # same values, K-major storage
    return a, b


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--kmajor", action="store_true", help="also time B stored K-major")
    parser.add_argument("--sweep", action="store_true", help="time every autotuning config")
    args = parser.parse_args(argv)
    recipe = load_recipe("gemm_hopper")
    torch.manual_seed(0)
    print(f"{'M':>6} {'N':>6} {'K':>6} {'B':>7} {'layoutkit':>10} {'cuBLAS':>8} {'ratio':>6}"
          "   (TFLOP/s)")
    for kmajor in (False, True) if args.kmajor else (False,):
        for m, n, k in SHAPES:
            a, b = _inputs(m, n, k, kmajor)
            c = recipe.gemm(a, b)
            ref = a.float() @ b.float()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                print(f"gemm {m}x{n}x{k}: relative error {err:.3g}", file=sys.stderr)
                return 1
            configs = recipe.autotune_space(m, n, k) if args.sweep else [None]
            flops = 2 * m * n * k
            for config in configs:
                times = interleaved({"layoutkit": lambda: recipe.gemm(a, b, config=config),
                                     "cuBLAS": lambda: torch.matmul(a, b)}, reps=args.reps)
                ours, theirs = (tflops(flops, times[x].median_ms) for x in ("layoutkit", "cuBLAS"))
                tag = "K-major" if kmajor else "N-major"
                extra = ""
                if config is not None:
                    units = recipe._resident_units(a.device, config, "K" if kmajor else "N")
                    extra = f"   {config}, {units} resident units"
                print(f"{m:6d} {n:6d} {k:6d} {tag:>7} {ours:10.1f} {theirs:8.1f} "
                      f"{ours / theirs:6.3f}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
