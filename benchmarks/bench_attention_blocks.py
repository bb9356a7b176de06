"""Head dim 256, non-causal: the default config of recipes/flash_attention.py (80-key blocks),
its ablations and 64-key blocks, timed interleaved on one problem; TFLOP/s and ratio to the
default. (96 or more keys in 2 stages exceed shared memory; 128 in 1 stage spills registers.)

    PYTHONPATH=. python3 benchmarks/bench_attention_blocks.py [--seqlen 8192] [--reps 15]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from layoutkit.benchmarking import interleaved, tflops  # noqa: E402
from layoutkit.recipe_runner import load_recipe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    fa = load_recipe("flash_attention")
    d, s = 256, args.seqlen
    batch, heads = max(1, 16384 // s), 2048 // d
    q, k, v = (torch.randn(batch, s, heads, d, device="cuda").to(torch.bfloat16) for _ in range(3))
    configs = fa.ablations(d, False)     # the default (80-key blocks) and the switches
    configs["BN=64"] = replace(configs["default"], BN=64)   # the largest BN of 2 stages beyond 80
    want, _ = fa.flash_attention(q, k, v)
    for cfg in configs.values():
        o, _ = fa.flash_attention(q, k, v, config=cfg)
        assert (o.float() - want.float()).abs().max().item() < 2e-2, cfg
    times = interleaved({name: (lambda cfg=cfg: fa.flash_attention(q, k, v, config=cfg))
                         for name, cfg in configs.items()}, reps=args.reps)
    flops = fa.attention_flops(batch, heads, s, s, d, False)
    print(f"| config (head dim 256, seqlen {s}, {batch}x{heads}) | TFLOP/s | ratio |\n|---|---:|---:|")
    base_t = times["default"].median_ms
    for name, t in times.items():
        print(f"| {name}: {configs[name]} | {tflops(flops, t.median_ms):.1f} | {base_t / t.median_ms:.3f} |")


if __name__ == "__main__":
    main()
