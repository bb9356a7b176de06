"""Host time per call of the row recipes' Python entry points (softmax, layernorm, rmsnorm and
the backward kernels) beside the torch op doing the same work, in one run: says whether a
small shape's event-timed row in docs/PERFORMANCE.md measures the kernel or the Python that
launches it. rmsnorm is called as benchmarks/bench_rows.py calls it (weight, rstd returned),
and also through its checked path alone (check_forward, forward_launches, rw.launch: every
call as before its per-shape plans), to A/B the plans in one run.

For each shape, each candidate is called in batches (bench_launch.measure: candidates
interleaved batch by batch after a warm-up); "host µs" is the wall time of the batch's calls
before the synchronize that ends it, "total µs" includes that synchronize, both per call,
medians over batches. When host µs is close to total µs, the GPU waited for the host: the row
is host-bound.

    PYTHONPATH=. python3 benchmarks/bench_recipe_host.py [--batch 200] [--batches 25]
                                                     [--shapes 1000x3000,4096x4096]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench_launch import measure  # noqa: E402  (this folder is the script's sys.path[0])
from bench_rows import shape_list  # noqa: E402
from layoutkit.tools.recipe_runner import load_recipe  # noqa: E402

SHAPES = ((1000, 3000), (4096, 1024), (4096, 4096), (4096, 8192))


def candidates(softmax, layernorm, rmsnorm, softmax_backward, layernorm_backward, m: int,
               n: int) -> dict:
    """The calls on random bf16 (m, n) inputs: each recipe's entry point and its torch op."""
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    w, b = (torch.randn(n, device="cuda").to(torch.bfloat16) for _ in range(2))
    out = torch.empty_like(x)
    rstd, mean = torch.rand(m, device="cuda") + 0.5, torch.randn(m, device="cuda")
    F = torch.nn.functional
    return {"layoutkit softmax(x, out)": lambda: softmax.softmax(x, out),
            "torch.softmax(x, -1)": lambda: torch.softmax(x, -1),
            "layoutkit layernorm(x, w, b, eps, out)": lambda: layernorm.layernorm(x, w, b, 1e-5, out),
            "torch layer_norm(x, (n,), w, b, eps)": lambda: F.layer_norm(x, (n,), w, b, 1e-5),
            "layoutkit rmsnorm(x, w, return_rstd=True)":
                lambda: rmsnorm.rmsnorm(x, w, return_rstd=True),
            "  its checked path (every call as before the plans)":
                lambda: rmsnorm_checked(rmsnorm, x, w),
            "torch rms_norm(x, (n,), w, eps)": lambda: F.rms_norm(x, (n,), w, 1e-6),
            "layoutkit rmsnorm_backward(dy, x, w, rstd) (2 launches)":
                lambda: rmsnorm.rmsnorm_backward(out, x, w, rstd),
            "layoutkit layernorm_backward(dy, x, w, mean, rstd) (2 launches)":
                lambda: layernorm_backward.layernorm_backward(out, x, w, mean, rstd),
            "layoutkit softmax_backward(dy, y)": lambda: softmax_backward.softmax_backward(out, x),
            "torch _softmax_backward_data(dy, y, -1, bf16)":
                lambda: torch._softmax_backward_data(out, x, -1, torch.bfloat16)}


def rmsnorm_checked(rmsnorm, x, w):
    """rmsnorm(x, w, return_rstd=True) through check_forward, forward_launches and rw.launch."""
    from recipes import _rowwise as rw
    m, n = rmsnorm.check_forward(x, w, None, 1e-6)
    y = torch.empty_like(x)
    rstd = torch.empty(x.shape[:-1], device=x.device, dtype=torch.float32)
    rw.launch(rmsnorm.forward_launches(x, None, w, y, None, rstd, rw.cuda_floats(x.device), m, n,
                                       1e-6, rmsnorm.dtypes_of(x, w)))
    return y, rstd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--shapes", type=shape_list, default=SHAPES,
                        help="comma-separated MxN (default: " +
                             ",".join(f"{m}x{n}" for m, n in SHAPES) + ")")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; µs per call, medians over "
          f"{args.batches} batches of {args.batch}\n")
    print("| (m, n) | call | host µs | total µs |\n|---|---|---:|---:|")
    recipes = [load_recipe(r) for r in ("softmax", "layernorm", "rmsnorm", "softmax_backward",
                                        "layernorm_backward")]
    for m, n in args.shapes:
        times = measure(candidates(*recipes, m, n), args.batch * args.batches, args.batch)
        for name, (total, host) in times.items():
            print(f"| ({m}, {n}) | {name} | {host:.1f} | {total:.1f} |", flush=True)


if __name__ == "__main__":
    main()
