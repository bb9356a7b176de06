"""How full the SMs are for the wide-row splits (a cluster per row): per kernel and shape, the
registers ptxas gave a thread, the clusters the driver can keep resident at once
(cuOccupancyMaxActiveClusters), the CTAs that makes per SM beside the CTAs an SM's 64K
registers hold (threads x registers rounded up to 8), the CTA slots that leaves idle (no whole
cluster fits in them: a cluster's CTAs run on the SMs of one GPC), and the bytes of loads in
flight per SM while every resident CTA is in its load phase (CTAs x threads x values a thread x
2 bytes: the row lives in registers, or in shared memory where it is staged: each split
both ways). Arithmetic for the split, not a timing:
benchmarks/bench_rows.py --sweep times the alternatives.

    PYTHONPATH=. python3 benchmarks/row_occupancy.py      # on the GPU machine (seconds)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = ((4096, 32768), (4096, 65536), (4096, 131072), (7, 131072))
REGISTERS, MAX_THREADS = 65536, 2048          # per SM (sm_90)
SOFTMAX_BUDGETS = {"heuristic": {}, "V<=32, 512-thread rows": {"max_values": 32,
                                                               "max_threads_per_row": 512}}


def softmax_rows(m: int, n: int, torch):
    """(label, kernel, spec, threads, values a thread, cluster) of softmax's splits."""
    from recipes import _row_split as rs
    from recipes import softmax
    x = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for label, budget in SOFTMAX_BUDGETS.items():
        cfg = rs.choose_config(m, n, **budget)
        for staged in (False, True):
            kernel, _, ints, constexprs = softmax.launch_arguments(cfg, m, n, staged)
            yield (f"softmax {label} ({cfg.threads}t C{cfg.vector} K{cfg.chunks} "
                   f"cl{cfg.cluster}{', staged' if staged else ''})",
                   kernel.specialize(x, x, *ints, **constexprs), cfg.threads, cfg.values,
                   cfg.cluster)


def rmsnorm_rows(m: int, n: int, torch):
    """The same for rmsnorm's forward (weight, rstd stored: benchmarks/bench_rows.py's call)."""
    from recipes import _rowwise as rw
    from recipes import rmsnorm
    x = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    w, rstd = torch.empty(n, device="cuda", dtype=torch.bfloat16), torch.empty(m, device="cuda")
    s = rmsnorm.forward_split(n, 2, m)
    for staged in (False, True):
        ((kernel, _, args, constexprs),) = rmsnorm.forward_launches(
            x, None, w, x, None, rstd, rw.cuda_floats(x.device), m, n, 1e-6,
            rmsnorm.dtypes_of(x, w), s, staged)
        yield (f"rmsnorm fwd ({s.P * s.ROWS}t C{s.C} K{s.K} cl{s.CLUSTER}"
               f"{', staged' if staged else ''})",
               kernel.specialize(*args, **constexprs), s.P * s.ROWS, s.C * s.K, s.CLUSTER)


def main() -> None:
    import torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()}, {sms} SMs\n")
    print("| m x n | kernel (split) | registers | CTAs / SM by registers | resident clusters | "
          "CTAs / SM | idle CTA slots | KB in flight / SM |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|")
    for m, n in SHAPES:
        for rows in (softmax_rows, rmsnorm_rows):
            for label, spec, threads, values, cluster in rows(m, n, torch):
                registers = spec.compiled.function(0).num_regs
                clusters = spec.compiled.max_active_clusters(threads, spec.ir.shared_bytes,
                                                             (cluster, 1, 1), 0)
                by_registers = min(REGISTERS // (threads * -(-registers // 8) * 8),
                                   MAX_THREADS // threads)
                ctas = clusters * cluster
                print(f"| {m} x {n} | {label} | {registers} | {by_registers} | {clusters} | "
                      f"{ctas / sms:.2f} | {by_registers * sms - ctas} | "
                      f"{ctas * threads * values * 2 / sms / 1024:.0f} |", flush=True)


if __name__ == "__main__":
    main()
