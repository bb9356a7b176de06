"""fp8 GEMM, layoutkit's recipes/gemm_fp8.py against torch._scaled_mm (cuBLASLt), same run.

    PYTHONPATH=. python3 benchmarks/bench_gemm_fp8.py [--reps 30] [--shapes main|issue|all]
                                                      [--part I/N] [--sweep] [--fast-accum]

For each shape (M, N, K): random e4m3 A (M x K, row-major) and B (K x N, column-major), per-tensor
and per-row/per-column f32 scales, bf16 out; the output checked against float64 of the
dequantized inputs first, then layoutkit and cuBLASLt (default, and use_fast_accum=True: the
same accumulation as layoutkit's) timed interleaved with the L2 flushed before each call
(layoutkit.tools.benchmarking). Prints a markdown table of TFLOP/s (2*M*N*K / time) and ratios
(> 1: layoutkit is faster) and both errors against float64. `--sweep` times every config of
the recipe's autotuning space (CONFIGS, all promoted), `--fast-accum` adds the unpromoted
kernels (FAST_ACCUM_CONFIGS: compare them with the fast-accum column).
Shape sets: main = 4096^3 and 8192^3; issue = the rows of issue 15's table and its small-M grid
(M in 1..16384 x (N, K) in (4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)).
`--part I/N` runs every N-th shape from the I-th (1-based), so a long set splits over runs.
"""
from __future__ import annotations

import argparse
import sys

import torch

from layoutkit.tools.recipe_runner import load_recipe


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--shapes", choices=("main", "issue", "all"), default="all")
    parser.add_argument("--sweep", action="store_true", help="time every autotuning config")
    parser.add_argument("--part", default="1/1", help="I/N: every N-th shape from the I-th")
    parser.add_argument("--fast-accum", action="store_true",
                        help="also time the unpromoted configs (FAST_ACCUM_CONFIGS)")
    args = parser.parse_args(argv)
    part, parts = (int(x) for x in args.part.split("/"))
    if not 1 <= part <= parts:
        parser.error(f"--part {args.part}: I/N with 1 <= I <= N")
    recipe = load_recipe("gemm_fp8")
    torch.manual_seed(0)
    main_shapes = [(4096, 4096, 4096), (8192, 8192, 8192)]
    shapes = {"main": main_shapes, "issue": recipe.SHAPES[2:], "all": recipe.SHAPES}[args.shapes]
    shapes = shapes[part - 1::parts]
    configs = list(recipe.CONFIGS) if args.sweep else None
    if args.fast_accum:
        configs = (configs or [None]) + list(recipe.FAST_ACCUM_CONFIGS)
    recipe.benchmark(reps=args.reps, shapes=shapes, configs=configs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
