"""Where the fused epilogue's cost goes at 4096^3: gemm_hopper's epilogue kernels against the
same kernels with C / the residual by registers only (no TMA staging), with every load issued
where its chunk is computed (the kernel before this change) and with the earlier gelu
(x / (1 + 2^(-2 log2 e u)): an IEEE div.rn.f32 per value), beside the plain GEMM and cuBLAS,
same run.

    PYTHONPATH=. python3 benchmarks/bench_gemm_epilogue_ablation.py [--reps 30] [--m 4096 ...]

bf16 A (M x K), B K-major (x @ w.t()), bf16 bias / residual / C, the recipe's default config
(128 x 256, 4 stages, 2-CTA clusters). Every variant's output is checked against float64
first; then all are timed interleaved call by call (layoutkit.tools.benchmarking: CUDA events,
L2 flushed before each call, medians). The variants launch gemm_hopper.launches' own steps
with only the kernel swapped, so the host path is the same. Prints one markdown table:
plain / variant time (issue 15's budget: >= 0.97).
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

import layoutkit as lk
from layoutkit.tools.benchmarking import interleaved
from layoutkit.tools.recipe_runner import load_recipe
from recipes import _epilogues
from recipes._gemm_kernel import gemm_tiles, warps


def gelu_divide(x):
    """The earlier gelu: x * sigmoid(2u) through an IEEE division."""
    u = _epilogues.GELU_C * (x + _epilogues.GELU_CUBIC * x * x * x)
    return x / (1.0 + lk.exp2(u * (-2 * math.log2(math.e))))


class Unstaged(_epilogues.FusedEpilogue):
    """The fused epilogue with its loads split from its arithmetic, but no input staged by TMA
    (every chunk's C / residual by registers)."""

    def staged(self, out_dtype):
        return None


def silu_divide(x):
    """The earlier silu: x / (1 + 2^(-x log2 e)), an IEEE division."""
    return x / (1.0 + lk.exp2(x * -math.log2(math.e)))


def variant_kernel(recipe, epilogue, act, prefetch, name: str):
    """gemm_hopper.kernel_for(128, 2, False, bf16, epilogue)'s kernel with activation `act`;
    prefetch False hides the epilogue's load / apply split (a plain function: each chunk
    loads where it is computed), "registers" keeps the split but stages nothing by TMA."""
    params = ((("a", lk.Tensor[lk.bf16, 2]), ("b", lk.Tensor[lk.bf16, 2]),
               ("c", lk.Tensor[lk.bf16, 2])) + tuple(epilogue.parameters())
              + tuple((x, lk.constexpr) for x in recipe.CONSTEXPRS))

    def body(v):
        fused = _epilogues.from_parameters(v, act)
        if prefetch == "registers":
            fused = Unstaged(fused.bias, act, fused.alpha, fused.c, fused.beta, fused.residual)
        gemm_tiles(v["a"], v["b"], v["c"], GRID=v["GRID"], B_MAJOR=v["B_MAJOR"], BN=v["BN"],
                   STAGES=v["STAGES"], GROUP_M=v["GROUP_M"], CLUSTER=v["CLUSTER"], BM=128,
                   epilogue=fused if prefetch else (lambda acc, at: fused(acc, at)))
    return lk.kernel(recipe._kernel_function(name, params, body), num_warps=warps(128),
                     cluster=(2, 1, 1))


def launcher(recipe, a, b, out, kernel=None, **epi):
    """gemm(a, b, out=out, **epi)'s launches prepared once (its kernel replaced by `kernel`)."""
    args = dict(bias=None, activation=None, residual=None, alpha=1.0, beta=0.0) | epi
    epilogue = recipe.epilogue_of(out, args["bias"], args["activation"], args["residual"],
                                  args["alpha"], args["beta"])
    device = a.device
    steps, c = recipe.launches(a, b, out, None, epilogue, args["bias"], args["residual"],
                               args["alpha"], args["beta"], recipe._sm_count(device),
                               lambda cfg, major: recipe._resident_units(device, cfg, major))
    assert len(steps) == 1 and c.data_ptr() == out.data_ptr(), "one launch into out"
    (k, grid, kargs, constexprs), = steps
    launch = (kernel or k)[grid]
    return lambda: launch(*kargs, **constexprs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--m", type=int, nargs="+", default=[4096])
    args = parser.parse_args(argv)
    recipe = load_recipe("gemm_hopper")
    from recipes._epilogues import Epilogue
    print("| M x N x K | epilogue | variant | ms | plain / variant | cuBLAS / variant |")
    print("|---|---|---|---:|---:|---:|")
    for m in args.m:
        n = k = 4096
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        b = w.t()
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        residual = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        out32 = torch.empty(m, n, device="cuda", dtype=torch.float32)
        c = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        x = a.double() @ w.double().t()
        gelu = _epilogues.ACTIVATIONS["gelu"]
        bias_gelu = Epilogue(bias=lk.bf16, activation=gelu)
        res, beta_c = Epilogue(residual=lk.bf16), Epilogue(c=lk.bf16, scaled=True)
        gelu64 = torch.nn.functional.gelu(x + bias.double(), approximate="tanh")
        silu64 = torch.nn.functional.silu(x + bias.double())
        bias_silu = Epilogue(bias=lk.bf16, activation=_epilogues.ACTIVATIONS["silu"])
        cases = [   # (epilogue, variant, kernel or None, gemm's epilogue arguments, float64)
            ("none", "plain", None, {}, x),
            ("bias + gelu", "recipe (tanh, prefetched)", None,
             dict(bias=bias, activation="gelu"), gelu64),
            ("bias + gelu", "tanh, loads at the chunk",
             variant_kernel(recipe, bias_gelu, gelu, False, "ablation_gelu_noprefetch"),
             dict(bias=bias, activation="gelu"), gelu64),
            ("bias + gelu", "exp2 + div.rn, loads at the chunk (before)",
             variant_kernel(recipe, bias_gelu, gelu_divide, False, "ablation_gelu_divide"),
             dict(bias=bias, activation="gelu"), gelu64),
            ("bias + silu", "recipe (tanh)", None, dict(bias=bias, activation="silu"), silu64),
            ("bias + silu", "exp2 + div.rn, loads at the chunk (before)",
             variant_kernel(recipe, bias_silu, silu_divide, False, "ablation_silu_divide"),
             dict(bias=bias, activation="silu"), silu64),
            ("residual", "recipe (chunk 0 by TMA in the main loop, chunk 1 one ahead)", None,
             dict(residual=residual), x + residual.double()),
            ("residual", "registers only (chunk 0 after k-step 0)",
             variant_kernel(recipe, res, None, "registers", "ablation_residual_registers"),
             dict(residual=residual), x + residual.double()),
            ("residual", "loads at the chunk (before)",
             variant_kernel(recipe, res, None, False, "ablation_residual_noprefetch"),
             dict(residual=residual), x + residual.double()),
            ("alpha, beta * C", "recipe (chunk 0 by TMA in the main loop, chunk 1 one ahead)",
             None, dict(alpha=0.5, beta=1.0), 0.5 * x + c.double()),
            ("alpha, beta * C", "registers only (chunk 0 after k-step 0)",
             variant_kernel(recipe, beta_c, None, "registers", "ablation_beta_registers"),
             dict(alpha=0.5, beta=1.0), 0.5 * x + c.double()),
            ("alpha, beta * C", "loads at the chunk (before)",
             variant_kernel(recipe, beta_c, None, False, "ablation_beta_noprefetch"),
             dict(alpha=0.5, beta=1.0), 0.5 * x + c.double()),
            ("f32 out", "recipe", None, dict(out=out32), x),
            ("all (bias, silu, residual, alpha, beta, f32 out)", "recipe", None,
             dict(out=out32, bias=bias, activation="silu", residual=residual, alpha=0.5,
                  beta=1.0),
             torch.nn.functional.silu(0.5 * x + c.double() + bias.double())
             + residual.double()),
        ]
        runs = {}
        for i, (epi_name, variant, kernel, epi, want) in enumerate(cases):
            dst = epi.pop("out", out)
            dst.copy_(c)                    # C for beta: out's contents
            run = launcher(recipe, a, b, dst, kernel, **epi)
            run()
            err = ((dst.double() - want).abs().max() / want.abs().max()).item()
            if not err < 2 ** -7:
                print(f"{m}x{n}x{k} {epi_name} ({variant}): error {err:.3g}", file=sys.stderr)
                return 1
            runs[str(i)] = run
        runs["cuBLAS"] = lambda: torch.matmul(a, b, out=out)
        times = interleaved(runs, reps=args.reps, warmup=3)
        plain = times["0"].median_ms
        for i, (epi_name, variant, *_) in enumerate(cases):
            t = times[str(i)].median_ms
            print(f"| {m}x{n}x{k} | {epi_name} | {variant} | {t:.3f} | {plain / t:.3f} | "
                  f"{times['cuBLAS'].median_ms / t:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
