"""Timing kernels beside a reference on one GPU, the way docs/PERFORMANCE.md's tables are made.

Every timed call is bracketed by CUDA events on the current stream; the median of `reps` calls
is reported. Candidates are interleaved call by call (a, b, a, b, ...) so clock drift under the
H200's 700 W power cap hits them alike, and only ratios from the same run are compared. With
`flush_l2=True` a buffer larger than the L2 cache is overwritten before every timed call
(outside the events), so a kernel never reads inputs a previous call left in L2. A process's
first `interleaved` keeps the GPU busy for RAMP_SECONDS first: an idle H200 sits at its lowest
clocks (345 MHz) and takes a few hundred milliseconds of work to reach its boost clocks, which
otherwise slows whichever table a script prints first.

    times = interleaved({"layoutkit": lambda: gemm(a, b), "cuBLAS": lambda: a @ b}, reps=50)
    times["layoutkit"].median_ms, times["cuBLAS"].median_ms

Needs torch with CUDA (imported on first use).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

L2_FLUSH_BYTES = 256 << 20   # over the H200's 50 MB L2 (and any Hopper part's)
RAMP_SECONDS = 0.5           # busy time before a process's first timed call
_ramped: set = set()         # the devices ramped in this process


@dataclass(frozen=True)
class Timing:
    """The per-call times of one candidate, in milliseconds."""

    name: str
    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def spread(self) -> float:
        """(75th - 25th percentile) / median: how noisy the candidate was in this run."""
        q = statistics.quantiles(self.times_ms, n=4) if len(self.times_ms) >= 2 else (0, 0, 0)
        return (q[2] - q[0]) / self.median_ms if self.median_ms else 0.0


class _Flusher:
    def __init__(self, torch):
        self.buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.value = 0

    def __call__(self) -> None:
        self.value = (self.value + 1) & 0x7FFFFFFF   # a new value each time: no shortcut
        self.buffer.fill_(self.value)


def interleaved(candidates: dict[str, Callable[[], object]], *, reps: int = 50,
                warmup: int = 5, flush_l2: bool = True) -> dict[str, Timing]:
    """Time each candidate `reps` times, interleaved call by call, after `warmup` untimed calls
    each (compilation, module load and autotuning stay out). Returns {name: Timing}."""
    if not candidates:
        raise ValueError("interleaved: give at least one candidate")
    if reps < 1 or warmup < 0:
        raise ValueError(f"interleaved: reps = {reps} must be >= 1 and warmup = {warmup} >= 0")
    import torch

    flush = _Flusher(torch) if flush_l2 else None
    _ramp_clocks(torch)
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    events = {name: [] for name in candidates}
    for _ in range(reps):
        for name, fn in candidates.items():
            if flush is not None:
                flush()
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            events[name].append((start, stop))
    torch.cuda.synchronize()
    return {name: Timing(name, tuple(a.elapsed_time(b) for a, b in pairs))
            for name, pairs in events.items()}


def _ramp_clocks(torch) -> None:
    """Keep the current device busy (bf16 matrix products and buffer writes) for RAMP_SECONDS,
    once per device and process, so the first timed call runs at the clocks the rest do."""
    import time
    device = torch.cuda.current_device()
    if device in _ramped:
        return
    _ramped.add(device)
    a = torch.randn(4096, 4096, device="cuda").to(torch.bfloat16)
    buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    end = time.perf_counter() + RAMP_SECONDS
    while time.perf_counter() < end:
        for i in range(4):
            a @ a
            buffer.fill_(i)
        torch.cuda.synchronize()


def host_call_times(candidates: dict[str, Callable[[], object]], calls: int,
                    repeats: int) -> dict[str, list[float]]:
    """Host seconds per call of each candidate (no GPU sync), one entry per repeat: `repeats`
    rounds, each timing `calls` back-to-back calls of every candidate in turn (perf_counter), so
    drift hits them alike. For host-side costs (launch paths, the Python around a kernel)."""
    import time
    times = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, run in candidates.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            times[name].append((time.perf_counter() - start) / calls)
    return times


def tflops(flops: float, ms: float) -> float:
    """TFLOP/s of `flops` floating-point operations done in `ms` milliseconds."""
    return flops / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float) -> float:
    """GB/s (1e9 bytes per second) of `nbytes` moved in `ms` milliseconds."""
    return nbytes / (ms * 1e-3) / 1e9


__all__ = ["Timing", "interleaved", "host_call_times", "tflops", "gbps", "L2_FLUSH_BYTES"]
