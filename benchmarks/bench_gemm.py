"""bf16 GEMM, layoutkit's recipes/gemm_hopper.py against cuBLAS (torch.matmul), same run.

    PYTHONPATH=. python3 benchmarks/bench_gemm.py [--quick] [--reps 20] [--sweep]
                                                  [--no-ablation] [--no-epilogue]

Prints three markdown tables:

1. shapes: M in MS x (N, K) in NK, both B majors (N-major: B (K, N) row-major against
   torch.matmul(a, b); K-major: w (N, K) row-major, gemm(a, w.t()) against a @ w.t()), then the
   square rows; the config config_for chose, TFLOP/s of both, the ratio cuBLAS time / layoutkit
   time (> 1: layoutkit faster), for M <= 64 the bandwidth at which B was streamed
   (N * K * 2 bytes / time; the target is >= 3 TB/s), and for small problems the ratio of the
   bare launches (gemm_hopper.launches prepared once, no argument checks) to cuBLAS, which
   tells host cost from kernel time.
2. ablation: on a few small-M / few-tile shapes, every tile candidate of recipes/_gemm_choice.py
   with the split the model gives it, the measured 128 x 256 cluster-2 default, and the
   heuristic's choice without its split: ratio to cuBLAS, the chosen row marked; then the
   chosen config's bare launches on the full persistent grid (every resident CTA, what gemm
   launches: one specialization for every M) and on min(units, tiles) CTAs.
3. epilogue: at 4096^3 (K-major B) and one decode shape, each fused epilogue's time against
   the plain GEMM's (the issue's target: <= 3% over the plain store at 4096^3) and against
   cuBLAS followed by the same torch operations.

Every row's output is checked against cuBLAS's first (relative Frobenius error < 1e-2). Timing:
layoutkit.tools.benchmarking.interleaved (CUDA events, warm-up, L2 flushed before every call,
medians of --reps calls, candidates interleaved call by call). `--quick` runs a subset (about a
minute); `--sweep` adds autotune_space's configs per shape to the ablation.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from layoutkit.tools.benchmarking import interleaved, tflops
from layoutkit.tools.recipe_runner import load_recipe

MS = (1, 16, 64, 128, 256, 512, 1024, 4096, 16384)
NK = ((4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096))
SQUARES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (6144, 6144, 6144),
           (8192, 8192, 8192), (8192, 8192, 1024), (256, 4096, 4096), (128, 8192, 8192))
QUICK_MS = (1, 16, 128, 1024, 4096)
QUICK_NK = ((4096, 4096), (4096, 14336))
QUICK_SQUARES = ((1024, 1024, 1024), (4096, 4096, 4096))
ABLATION = ((1, 4096, 4096), (16, 14336, 4096), (64, 4096, 14336), (256, 4096, 4096),
            (128, 8192, 8192), (1024, 1024, 1024))
QUICK_ABLATION = ((1, 4096, 4096), (1024, 1024, 1024))
BARE_FLOPS = 2 * 2 ** 33          # problems up to this many flops also time the bare launches


def short(cfg) -> str:
    if cfg.SWAP:
        parts = f" k{cfg.SPLIT_K}" if cfg.SPLIT_K > 1 else ""
        return f"swap {cfg.BM}x{cfg.BN} s{cfg.STAGES}{parts}"
    return f"{cfg.BM}x{cfg.BN} s{cfg.STAGES} c{cfg.CLUSTER} k{cfg.SPLIT_K}"


def operands(m: int, n: int, k: int, kmajor: bool):
    """(a, b, cuBLAS's call): a (M, K); b (K, N) N-major, or w.t() of a row-major (N, K) w."""
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    if kmajor:
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        return a, w.t(), lambda: a @ w.t()
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    return a, b, lambda: torch.matmul(a, b)


def checked(recipe, a, b, reference, config=None) -> None:
    got, want = recipe.gemm(a, b, config=config).float(), reference().float()
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    if not err < 1e-2:
        raise SystemExit(f"gemm {tuple(a.shape)} x {tuple(b.shape)} ({config}): relative "
                         f"error {err:.3g} against cuBLAS")


def bare(recipe, a, b, config, full_grid: bool = True):
    """The launches of gemm(a, b) prepared once: a function that runs them (no checks, no
    planning; the output buffer reused); full_grid False: at most one CTA per tile."""
    out = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)
    from recipes._epilogues import Epilogue
    device = a.device
    steps, _ = recipe.launches(a, b, out, config, Epilogue(), None, None, 1.0, 0.0,
                               recipe._sm_count(device),
                               lambda cfg, major: recipe._resident_units(device, cfg, major),
                               full_grid)
    launchers = [(kernel[grid], args, constexprs) for kernel, grid, args, constexprs in steps]

    def run():
        for launch, args, constexprs in launchers:
            launch(*args, **constexprs)
    return run


def shape_row(recipe, m: int, n: int, k: int, kmajor: bool, reps: int, sms: int) -> str:
    """One row of the shapes table (its operands freed on return)."""
    a, b, reference = operands(m, n, k, kmajor)
    checked(recipe, a, b, reference)
    cfg = recipe.config_for(m, n, k, sms)
    flops = 2 * m * n * k
    candidates = {"layoutkit": lambda: recipe.gemm(a, b), "cuBLAS": reference}
    if flops <= BARE_FLOPS:
        candidates["bare"] = bare(recipe, a, b, None)
    times = interleaved(candidates, reps=reps, warmup=3)
    ours, theirs = (times[x].median_ms for x in ("layoutkit", "cuBLAS"))
    stream = f"{n * k * 2 / (ours * 1e-3) / 1e12:.2f}" if m <= 64 else ""
    bare_ratio = f"{theirs / times['bare'].median_ms:.3f}" if "bare" in times else ""
    return (f"| {m} | {n} | {k} | {'K' if kmajor else 'N'} | {short(cfg)} | "
            f"{tflops(flops, ours):.1f} | {tflops(flops, theirs):.1f} | {theirs / ours:.3f} | "
            f"{stream} | {bare_ratio} |")


def shape_rows(recipe, shapes, reps: int) -> None:
    print("| M | N | K | B | config | layoutkit TFLOP/s | cuBLAS TFLOP/s | ratio | B stream TB/s "
          "| bare launches ratio |")
    print("|---:|---:|---:|---|---|---:|---:|---:|---:|---:|")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, k, kmajor in shapes:
        print(shape_row(recipe, m, n, k, kmajor, reps, sms), flush=True)
        torch.cuda.empty_cache()


def ablation_configs(recipe, m: int, n: int, k: int, sweep: bool) -> list:
    """The configs an ablation row set compares (module docstring), the chosen one first."""
    from recipes import _gemm_choice as choice
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chosen = recipe.config_for(m, n, k, sms)
    configs = [chosen, choice.DEFAULT]
    if chosen.SPLIT_K > 1:
        configs.append(dataclasses.replace(chosen, SPLIT_K=1))
    for tile in choice.candidates(m)[1:]:
        configs.append(choice.best_split(m, n, k, tile, sms))
    if sweep:
        configs += recipe.autotune_space(m, n, k)
    return list(dict.fromkeys(configs))


def ablation_rows(recipe, shapes, reps: int, sweep: bool) -> None:
    print("\n| M | N | K | B | config | ratio to cuBLAS | |")
    print("|---:|---:|---:|---|---|---:|---|")
    for m, n, k in shapes:
        for kmajor in (False, True):
            a, b, reference = operands(m, n, k, kmajor)
            configs = ablation_configs(recipe, m, n, k, sweep)
            for i, config in enumerate(configs):
                checked(recipe, a, b, reference, config)
                times = interleaved({"layoutkit": lambda: recipe.gemm(a, b, config=config),
                                     "cuBLAS": reference}, reps=reps, warmup=3)
                ratio = times["cuBLAS"].median_ms / times["layoutkit"].median_ms
                print(f"| {m} | {n} | {k} | {'K' if kmajor else 'N'} | {short(config)} | "
                      f"{ratio:.3f} | {'chosen' if i == 0 else ''} |", flush=True)
            times = interleaved({"full": bare(recipe, a, b, configs[0]),
                                 "min": bare(recipe, a, b, configs[0], full_grid=False),
                                 "cuBLAS": reference}, reps=reps, warmup=3)
            for grid in ("full", "min"):          # the persistent grid's two forms, bare
                ratio = times["cuBLAS"].median_ms / times[grid].median_ms
                print(f"| {m} | {n} | {k} | {'K' if kmajor else 'N'} | {short(configs[0])}, "
                      f"bare, {grid} grid | {ratio:.3f} | |", flush=True)


def epilogue_rows(recipe, reps: int, quick: bool) -> None:
    print("\n| M x N x K | epilogue | plain / fused time | (cuBLAS + torch) / fused time |")
    print("|---|---|---:|---:|")
    shapes = ((4096, 4096, 4096),) if quick else ((4096, 4096, 4096), (16, 4096, 4096))
    gelu = torch.nn.functional.gelu
    for m, n, k in shapes:
        a, b, reference = operands(m, n, k, True)
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        residual = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        c = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        out, out32 = c.clone(), c.float()        # C for beta, overwritten by each call
        cases = {
            "bias + gelu": (lambda: recipe.gemm(a, b, bias=bias, activation="gelu"),
                            lambda: gelu(reference() + bias, approximate="tanh")),
            "residual": (lambda: recipe.gemm(a, b, residual=residual),
                         lambda: reference() + residual),
            "alpha, beta * C": (lambda: recipe.gemm(a, b, out=out, alpha=0.5, beta=1.0),
                                lambda: torch.addmm(c, a, b, beta=1.0, alpha=0.5)),
            "f32 out": (lambda: recipe.gemm(a, b, out_dtype=torch.float32),
                        lambda: reference().float()),
            "all (bias, silu, residual, alpha, beta, f32)": (
                lambda: recipe.gemm(a, b, out=out32, bias=bias, activation="silu",
                                    residual=residual, alpha=0.5, beta=1.0),
                lambda: torch.nn.functional.silu(
                    torch.addmm(c, a, b, beta=1.0, alpha=0.5) + bias).float() + residual),
        }
        for name, (fused, eager) in cases.items():
            times = interleaved({"plain": lambda: recipe.gemm(a, b), "fused": fused,
                                 "eager": eager}, reps=reps, warmup=3)
            f = times["fused"].median_ms
            print(f"| {m}x{n}x{k} | {name} | {times['plain'].median_ms / f:.3f} | "
                  f"{times['eager'].median_ms / f:.3f} |", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a subset of every table")
    parser.add_argument("--sweep", action="store_true",
                        help="add autotune_space's configs to the ablation")
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--no-epilogue", action="store_true")
    args = parser.parse_args(argv)
    recipe = load_recipe("gemm_hopper")
    torch.manual_seed(0)
    ms, nk, squares = (QUICK_MS, QUICK_NK, QUICK_SQUARES) if args.quick else (MS, NK, SQUARES)
    shapes = [(m, n, k, kmajor) for m in ms for n, k in nk for kmajor in (False, True)]
    shapes += [(m, n, k, kmajor) for m, n, k in squares for kmajor in (False, True)]
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, reps {args.reps}, "
          "L2 flushed, medians; ratio = cuBLAS time / layoutkit time\n")
    shape_rows(recipe, shapes, args.reps)
    if not args.no_ablation:
        ablation_rows(recipe, QUICK_ABLATION if args.quick else ABLATION, args.reps,
                      args.sweep)
    if not args.no_epilogue:
        epilogue_rows(recipe, args.reps, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
