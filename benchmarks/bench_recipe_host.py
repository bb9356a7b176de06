"""Host time per call of the row recipes' Python entry points (softmax, layernorm) beside the
torch op doing the same work, in one run: says whether a small shape's event-timed row in
docs/PERFORMANCE.md measures the kernel or the Python that launches it.

For each shape, each candidate is called in batches (candidates interleaved batch by batch);
"host µs" is the wall time of the batch's calls before the synchronize that ends it, "total µs"
includes that synchronize, both per call, medians over batches. When host µs is close to total
µs, the GPU waited for the host: the row is host-bound.

    PYTHONPATH=. python3 benchmarks/bench_recipe_host.py [--batch 200] [--batches 25]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from layoutkit.recipe_runner import load_recipe  # noqa: E402

SHAPES = ((4096, 1024), (4096, 4096), (4096, 8192))


def candidates(m: int, n: int) -> dict:
    softmax, layernorm = load_recipe("softmax"), load_recipe("layernorm")
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    w, b = (torch.randn(n, device="cuda").to(torch.bfloat16) for _ in range(2))
    out = torch.empty_like(x)
    F = torch.nn.functional
    return {"layoutkit softmax(x, out)": lambda: softmax.softmax(x, out),
            "torch.softmax(x, -1)": lambda: torch.softmax(x, -1),
            "layoutkit layernorm(x, w, b, eps, out)": lambda: layernorm.layernorm(x, w, b, 1e-5, out),
            "torch layer_norm(x, (n,), w, b, eps)": lambda: F.layer_norm(x, (n,), w, b, 1e-5)}


def measure(runs: dict, batch: int, batches: int) -> dict:
    for run in runs.values():   # warm-up: compile, load, plan caches
        for _ in range(20):
            run()
    torch.cuda.synchronize()
    host, total = {k: [] for k in runs}, {k: [] for k in runs}
    for _ in range(batches):
        for name, run in runs.items():
            start = time.perf_counter()
            for _ in range(batch):
                run()
            queued = time.perf_counter()
            torch.cuda.synchronize()
            end = time.perf_counter()
            host[name].append((queued - start) / batch * 1e6)
            total[name].append((end - start) / batch * 1e6)
    return {k: (statistics.median(host[k]), statistics.median(total[k])) for k in runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--batches", type=int, default=25)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; µs per call, medians over "
          f"{args.batches} batches of {args.batch}\n")
    print("| (m, n) | call | host µs | total µs |\n|---|---|---:|---:|")
    for m, n in SHAPES:
        for name, (host, total) in measure(candidates(m, n), args.batch, args.batches).items():
            print(f"| ({m}, {n}) | {name} | {host:.1f} | {total:.1f} |", flush=True)


if __name__ == "__main__":
    main()
