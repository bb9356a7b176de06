"""Host µs per call of recipes.gemm_hopper.gemm beside torch.matmul, and back-to-back GPU time
per call (CUDA events over a batch of calls): says which GEMM shapes are bound by the Python
that launches them. Shapes: 2048^3 with B N-major and K-major, 16x4096x4096, 128x8192x8192
(the small-M ones launch split-K's two kernels), out given.

Candidates per shape, interleaved batch by batch after a warm-up: `gemm(a, b, out=out)` (its
plan: recipes/_gemm_plans.py, and the tensor-map fast path of kernel[grid]), the same call's
host path without the plans (check_inputs, launches, kernel[grid]) and without the tensor-map
fast path too (Kernel.launch: every call before 15523cc), and torch.matmul(a, b, out=out).
"host µs": the batch's wall time before the synchronize that ends it, per call; "event µs":
the events around the batch, per call (back to back: when host µs >= event µs, the GPU waited
for the host). Medians over batches. Each shape is first checked: a second call (through the
plan) on new random inputs matches torch in float64 (relative Frobenius error printed).

    PYTHONPATH=. python3 benchmarks/bench_gemm_host.py [--batch 100] [--batches 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from recipes import gemm_hopper as gh  # noqa: E402

SHAPES = ((2048, 2048, 2048, "N"), (2048, 2048, 2048, "K"), (16, 4096, 4096, "N"),
          (128, 8192, 8192, "N"))


def operands(m: int, n: int, k: int, major: str):
    """Random bf16 a (m x k), b (k x n; K-major: the transpose of a row-major n x k), out."""
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16) if major == "N" else \
        torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
    return a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)


def host_path(a, b, out, checked: bool) -> None:
    """gemm's host path without its plans: check_inputs, launches, then kernel[grid] (or, with
    `checked`, Kernel.launch: the checked path of every launch)."""
    gh.check_inputs(a, b, out, None)
    epilogue = gh.epilogue_of(out, None, None, None, 1.0, 0.0)
    steps, _ = gh.launches(a, b, out, None, epilogue, None, None, 1.0, 0.0,
                           gh._sm_count(a.device),
                           lambda cfg, major: gh._resident_units(a.device, cfg, major))
    for kernel, grid, args, constexprs in steps:
        if checked:
            kernel.launch(grid, *args, **constexprs)
        else:
            kernel[grid](*args, **constexprs)


def plan_error(m: int, n: int, k: int, major: str) -> float:
    """Relative error vs float64 of a second gemm call (the plan's) on new random inputs."""
    first = operands(m, n, k, major)
    gh.gemm(first[0], first[1], out=first[2])
    a, b, out = operands(m, n, k, major)
    got = gh.gemm(a, b, out=out).double()
    want = a.double() @ b.double()
    return ((got - want).norm() / want.norm()).item()


def measure(candidates: dict, batch: int, batches: int) -> dict[str, tuple[float, float]]:
    """{name: (median host µs per call, median event µs per call)}."""
    for run in candidates.values():           # warm-up: specializations, plans, cuBLAS
        for _ in range(20):
            run()
    torch.cuda.synchronize()
    host, event = ({name: [] for name in candidates} for _ in range(2))
    start_event, end_event = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    for _ in range(batches):
        for name, run in candidates.items():
            start_event.record()
            start = time.perf_counter()
            for _ in range(batch):
                run()
            queued = time.perf_counter()
            end_event.record()
            torch.cuda.synchronize()
            host[name].append((queued - start) / batch * 1e6)
            event[name].append(start_event.elapsed_time(end_event) / batch * 1e3)
    return {name: (statistics.median(host[name]), statistics.median(event[name]))
            for name in candidates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batches", type=int, default=15)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; µs per call, medians over "
          f"{args.batches} batches of {args.batch} back-to-back calls\n")
    print("| shape | call | host µs | event µs | event / torch |\n|---|---|---:|---:|---:|")
    for m, n, k, major in SHAPES:
        shape = f"{m}x{n}x{k} {major}-major"
        error = plan_error(m, n, k, major)
        assert error < 1e-2, f"{shape}: the plan's result is off by {error:.3g}"
        a, b, out = operands(m, n, k, major)
        torch_out = torch.empty_like(out)
        times = measure({
            "gemm(a, b, out=out)": lambda: gh.gemm(a, b, out=out),
            "  without its plan (check_inputs, launches, kernel[grid])":
                lambda: host_path(a, b, out, False),
            "  and without the tensor-map fast path (Kernel.launch)":
                lambda: host_path(a, b, out, True),
            "torch.matmul(a, b, out=out)": lambda: torch.matmul(a, b, out=torch_out),
        }, args.batch, args.batches)
        reference = times["torch.matmul(a, b, out=out)"][1]
        for name, (host, event) in times.items():
            print(f"| {shape} | {name} | {host:.1f} | {event:.1f} | {event / reference:.2f} |",
                  flush=True)
        print(f"| {shape} | (plan's result vs float64: relative error {error:.2e}) | | | |")


if __name__ == "__main__":
    main()
