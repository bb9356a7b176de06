"""Small-M bf16 GEMM: which tile and split-K the shapes of decode want, measured, against the
choice of recipes/_gemm_choice.py's model and cuBLAS, same run.

    PYTHONPATH=. python3 benchmarks/bench_gemm_small_m.py [--reps 20] [--shapes 1x4096x4096 ...]
        [--majors K N] [--swap-only]

Per shape and B major (`--majors`; K: x @ w.t(), N: x @ b of a row-major b), one interleaved
group (layoutkit.tools.benchmarking: CUDA events, L2 flushed before each call, medians):
gemm(a, b, config=...) for every cluster-1 tile of the 64-row candidates (64 x 64, 64 x 128,
64 x 256, the ring as deep as shared memory allows) at SPLIT_K in SPLITS (those the k-steps
allow), the swapped kernel's tiles (recipes/_gemm_choice.swap_candidates: 64 or 128 weight
rows by the tokens, one launch; and 64 rows with two consumer warpgroups sharing the k-steps,
SPLIT_K = 2, which the model does not weigh yet; and the 64-row tile at the deepest ring shared
memory holds, past recipes/_gemm_choice.MAX_SWAP_STAGES; and narrower token tiles, M / 2 and
M / 4 rounded up to 8, that put two or four CTAs on each weight tile) and the config
config_for chooses, each config's bare launches (prepared once: kernel time plus the
launches' own host cost) and cuBLAS. Each config's output is checked against cuBLAS first.
Prints a markdown table: ratio = cuBLAS time / layoutkit time, B stream = N * K * 2 bytes /
time (the target at M <= 16: ~3 TB/s), launches (1 or 2: split-K adds the reduction kernel),
the bare launches' ratio and time (cuBLAS's time in its row); the chosen row marked.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from layoutkit.tools.benchmarking import interleaved
from layoutkit.tools.recipe_runner import load_recipe

SHAPES = ("1x4096x4096", "16x4096x4096", "1x4096x14336", "16x4096x14336")
SPLITS = (1, 2, 4, 8)
TILES = ((64, 64), (64, 128), (64, 256))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--majors", nargs="+", choices=("K", "N"), default=["K"])
    parser.add_argument("--swap-only", action="store_true",
                        help="time the chosen config, the swapped tiles and cuBLAS only")
    args = parser.parse_args(argv)
    recipe = load_recipe("gemm_hopper")
    import layoutkit as lk
    from recipes import _gemm_choice as choice
    from recipes._gemm_host import round_up
    from recipes._gemm_kernel import row_elements
    from benchmarks.bench_gemm import bare, checked, short
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print("| M | N | K | B | config | launches | ratio | B stream TB/s | bare ratio | bare us | |")
    print("|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---|")
    for shape, major in ((s, j) for s in args.shapes for j in args.majors):
        m, n, k = map(int, shape.split("x"))
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        b = w.t() if major == "K" else w.t().contiguous()

        def reference():
            return a @ b
        chosen = recipe.config_for(m, n, k, sms)
        configs = [chosen]
        for bm, bn in () if args.swap_only else TILES:
            tile = choice.Config(BM=bm, BN=bn, CLUSTER=1, STAGES=choice.max_stages(bm, bn))
            for split in SPLITS:
                if split == 1 or -(-k // row_elements(lk.bf16)) >= \
                        choice.MIN_SPLIT_STEPS * split:
                    configs.append(dataclasses.replace(tile, SPLIT_K=split))
        split_swap = [dataclasses.replace(c, BM=64, SPLIT_K=2,
                                          STAGES=choice.max_swap_stages(64, c.BN, 2))
                      for c in choice.swap_candidates(m)[:1]]     # not modelled yet
        deep_ring = [dataclasses.replace(c, STAGES=max(
            s for s in range(2, 64) if dataclasses.replace(c, STAGES=s).smem_bytes() <=
            choice.SMEM_BYTES)) for c in choice.swap_candidates(m)[:1]]   # past MAX_SWAP_STAGES
        token_split = [dataclasses.replace(c, BN=bn, STAGES=choice.max_swap_stages(64, bn))
                       for c in choice.swap_candidates(m)[:1]
                       for bn in sorted({round_up(-(-m // t), 8) for t in (2, 4)})
                       if bn < c.BN]       # more token tiles: more CTAs on few weight tiles
        configs = list(dict.fromkeys(configs + choice.swap_candidates(m) + split_swap +
                                     deep_ring + token_split))
        runs = {}
        for i, cfg in enumerate(configs):
            checked(recipe, a, b, reference, cfg)
            runs[str(i)] = (lambda cfg: lambda: recipe.gemm(a, b, config=cfg))(cfg)
            runs[f"bare{i}"] = bare(recipe, a, b, cfg)
        runs["cuBLAS"] = reference
        times = interleaved(runs, reps=args.reps, warmup=3)
        theirs = times["cuBLAS"].median_ms
        for i, cfg in enumerate(configs):
            t, t_bare = times[str(i)].median_ms, times[f"bare{i}"].median_ms
            print(f"| {m} | {n} | {k} | {major} | {short(cfg)} | {2 if cfg.SPLIT_K > 1 and not cfg.SWAP else 1} | "
                  f"{theirs / t:.3f} | {n * k * 2 / (t * 1e-3) / 1e12:.2f} | "
                  f"{theirs / t_bare:.3f} | {t_bare * 1e3:.1f} | "
                  f"{'chosen' if i == 0 else ''} |", flush=True)
        print(f"| {m} | {n} | {k} | {major} | cuBLAS | 1 | 1.000 | "
              f"{n * k * 2 / (theirs * 1e-3) / 1e12:.2f} | | {theirs * 1e3:.1f} | |", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
