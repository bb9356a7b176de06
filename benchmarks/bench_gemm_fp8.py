"""fp8 GEMM, layoutkit's recipes/gemm_fp8.py against torch._scaled_mm (cuBLASLt), same run.

    PYTHONPATH=. python3 benchmarks/bench_gemm_fp8.py [--reps 30] [--shapes main|issue|decode|all]
                                                      [--part I/N] [--sweep] [--fast-accum]
                                                      [--promote P,Q] [--accuracy]
                                                      [--unswapped]

For each shape (M, N, K): random e4m3 A (M x K, row-major) and B (K x N, column-major), per-tensor
and per-row/per-column f32 scales, bf16 out; the output checked against float64 of the
dequantized inputs first, then layoutkit and cuBLASLt (default, and use_fast_accum=True: the
same accumulation as layoutkit's) timed interleaved with the L2 flushed before each call
(layoutkit.tools.benchmarking). Prints a markdown table of TFLOP/s (2*M*N*K / time) and ratios
(> 1: layoutkit is faster) and both errors against float64. `--sweep` times every config of
the recipe's autotuning space (CONFIGS, all promoted), `--fast-accum` adds the unpromoted
kernels (FAST_ACCUM_CONFIGS: compare them with the fast-accum column), `--promote 1,8` the
shipped config with those PROMOTE values (k-steps per promotion: speed against accuracy).
`--accuracy` times nothing: the error (f32 out, per-tensor scales, relative to max |D| of
float64) of the shipped config at each --promote value (default 0,1,2,4,8) beside cuBLASLt's
default and fast-accum, on the chosen shapes and 16 x 4096 x 14336.
Shape sets: main = 4096^3 and 8192^3; issue = the rows of issue 15's table and its small-M grid
(M in 1..16384 x (N, K) in (4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)); decode =
that grid's M in 1, 16, 64. `--unswapped` adds a row per shape of the model's choice without
the swapped kernel (recipes/_gemm_swap_kernel.py), the ablation of Config.SWAP.
`--part I/N` runs every N-th shape from the I-th (1-based), so a long set splits over runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from layoutkit.tools.recipe_runner import load_recipe


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--shapes", choices=("main", "issue", "decode", "all"), default="all")
    parser.add_argument("--unswapped", action="store_true",
                        help="also time the model's choice without the swapped kernel")
    parser.add_argument("--sweep", action="store_true", help="time every autotuning config")
    parser.add_argument("--part", default="1/1", help="I/N: every N-th shape from the I-th")
    parser.add_argument("--fast-accum", action="store_true",
                        help="also time the unpromoted configs (FAST_ACCUM_CONFIGS)")
    parser.add_argument("--accuracy", action="store_true",
                        help="errors per PROMOTE (f32 out) beside cuBLASLt's; no timing")
    parser.add_argument("--promote", default=None,
                        help="P,Q,...: also time CONFIGS[0] with PROMOTE = P, Q, ... (>= 1)")
    args = parser.parse_args(argv)
    part, parts = (int(x) for x in args.part.split("/"))
    if not 1 <= part <= parts:
        parser.error(f"--part {args.part}: I/N with 1 <= I <= N")
    recipe = load_recipe("gemm_fp8")
    torch.manual_seed(0)
    main_shapes = [(4096, 4096, 4096), (8192, 8192, 8192)]
    shapes = {"main": main_shapes, "issue": recipe.SHAPES[2:], "decode": recipe.DECODE_SHAPES,
              "all": recipe.SHAPES}[args.shapes]
    shapes = shapes[part - 1::parts]
    configs = list(recipe.CONFIGS) if args.sweep else None
    if args.fast_accum:
        configs = (configs or [None]) + list(recipe.FAST_ACCUM_CONFIGS)
    if args.unswapped:
        configs = (configs or [None]) + [
            lambda m, n, k: recipe.config_for(m, n, k, torch.cuda.get_device_properties(
                0).multi_processor_count, swap=False)]
    if args.accuracy:
        values = [int(x) for x in (args.promote or "0,1,2,4,8").split(",")]
        accuracy(recipe, [(16, 4096, 14336)] + shapes, values)
        return 0
    if args.promote:
        values = [int(x) for x in args.promote.split(",")]
        if min(values) < 1:
            parser.error(f"--promote {args.promote}: k-steps per promotion, each >= 1")
        configs = (configs or [None]) + [dataclasses.replace(recipe.CONFIGS[0], PROMOTE=p)
                                         for p in values]
    recipe.benchmark(reps=args.reps, shapes=shapes, configs=configs)
    return 0


def accuracy(recipe, shapes, promotes) -> None:
    """Print a markdown table: per shape, the f32-out error of CONFIGS[0] at each PROMOTE and of
    torch._scaled_mm default and use_fast_accum=True (random e4m3 data as benchmark())."""
    print("| M x N x K | " + " | ".join(f"PROMOTE {p}" for p in promotes) +
          " | cuBLASLt | fast-accum |")
    print("|---|" + "---:|" * (len(promotes) + 2))
    for m, n, k in shapes:
        a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        sa, sb = torch.rand((), device="cuda") + 0.5, torch.rand((), device="cuda") + 0.5
        want = recipe.reference(a, b, sa, sb)
        cells = []
        for p in promotes:
            cfg = dataclasses.replace(recipe.CONFIGS[0], PROMOTE=p)
            got = recipe.gemm_fp8(a, b, sa, sb, out_dtype=torch.float32, config=cfg)
            cells.append(recipe.relative_error(got, want))
        for fast in (False, True):
            got = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast)
            cells.append(recipe.relative_error(got, want))
        print(f"| {m}x{n}x{k} | " + " | ".join(f"{e:.2e}" for e in cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
