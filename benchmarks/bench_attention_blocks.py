"""Head dim 256, non-causal: the default config of recipes/flash_attention.py (80-key blocks),
its ablations and 64-key blocks, timed interleaved on one problem beside the SDPA backends
(bench_attention.case); TFLOP/s and ratio to the default. (96 or more keys in 2 stages exceed
shared memory; 128 in 1 stage spills registers.)

    PYTHONPATH=. python3 benchmarks/bench_attention_blocks.py [--seqlen 8192] [--reps 15]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_attention import case  # noqa: E402  (this folder is the script's sys.path[0])
from layoutkit.tools.recipe_runner import load_recipe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    fa = load_recipe("flash_attention")
    configs = fa.ablations(256, False)     # the default (80-key blocks) and the switches
    configs["BN=64"] = replace(configs["default"], BN=64)   # causal head dim 256's key block
    got, skipped, (batch, heads) = case(fa, 256, args.seqlen, False, args.reps, configs)
    print(f"| config (head dim 256, seqlen {args.seqlen}, {batch}x{heads}) | TFLOP/s | ratio |\n"
          "|---|---:|---:|")
    for name, value in got.items():
        print(f"| {name}{': ' + str(configs[name]) if name in configs else ' (SDPA)'} | "
              f"{value:.1f} | {value / got['default']:.3f} |")
    for note in skipped:
        print(f"skipped {note}")


if __name__ == "__main__":
    main()
