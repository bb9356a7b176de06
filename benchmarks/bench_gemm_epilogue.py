"""The cost of gemm_hopper's fused epilogue (bias + activation) over its plain store, and the
same work in torch (cuBLAS matmul, then the bias add and the activation), same run.

    PYTHONPATH=. python3 benchmarks/bench_gemm_epilogue.py [--reps 30]

bf16 A (M x K) and B (K x N, K-major: x @ w.t()), bf16 bias (N,); each fused case checked
against float64 first, then layoutkit plain, layoutkit fused and torch timed interleaved with
the L2 flushed before each call (layoutkit.tools.benchmarking). Prints a markdown table:
fused / plain time (issue 15's budget: <= 1.03 at 4096^3) and torch / fused.
"""
from __future__ import annotations

import argparse
import sys

import torch

from layoutkit.tools.benchmarking import interleaved
from layoutkit.tools.recipe_runner import load_recipe

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096))
TORCH = {"relu": torch.relu, "silu": torch.nn.functional.silu,
         "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args(argv)
    recipe = load_recipe("gemm_hopper")
    torch.manual_seed(0)
    print("| M x N x K | epilogue | plain ms | fused ms | fused / plain | torch ms | "
          "torch / fused |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        for activation in ("relu", "gelu", "silu"):
            got = recipe.gemm(a, w.t(), bias=bias, activation=activation).double()
            want = TORCH[activation](a.double() @ w.double().t() + bias.double())
            err = ((got - want).abs().max() / want.abs().max()).item()
            if not err < 2 ** -7:
                print(f"{m}x{n}x{k} {activation}: error {err:.3g}", file=sys.stderr)
                return 1
            times = interleaved({
                "plain": lambda: recipe.gemm(a, w.t()),
                "fused": lambda: recipe.gemm(a, w.t(), bias=bias, activation=activation),
                "torch": lambda: TORCH[activation](torch.nn.functional.linear(a, w, bias)),
            }, reps=args.reps)
            plain, fused, theirs = (times[x].median_ms for x in ("plain", "fused", "torch"))
            print(f"| {m}x{n}x{k} | bias + {activation} | {plain:.3f} | {fused:.3f} | "
                  f"{fused / plain:.3f} | {theirs:.3f} | {theirs / fused:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
