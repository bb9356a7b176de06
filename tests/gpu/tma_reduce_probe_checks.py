"""GPU checks of TMA facts the DSL relies on or may later rely on, one group per process (an
illegal instruction poisons the CUDA context): `python tma_reduce_probe_checks.py GROUP` runs
the group and prints `PASS GROUP` when every case of it held.

- `pairs`: the reductions PTX lists but the DSL does not enable yet (derive.HARDWARE_REDUCTIONS,
  bar the 64-bit bitwise ones: i64 xor raised an illegal instruction on the H200), each enabled
  in this process only and run through the GPU test's hardware-against-model check; a pass is
  the evidence for enabling it.
- `chunks`: with the DSL's rule lifted in this process, a TMA store and a reduce-add into a
  bf16 tensor of 100 columns (row pitch 112) write its columns 100..103 too: TMA writes the
  innermost dimension in whole 16-byte chunks, which is why the DSL requires whole chunks
  (derive.written_extent_error). A failure here means the hardware clips inside a chunk.
"""
import sys

from layoutkit.dsl.sm90.tma import copy as tma_copy
from layoutkit.dsl.sm90.tma import derive
from layoutkit.ptx.isa.tma import REDUCE_TYPES

NAMES = {"s32": "i32", "s64": "i64", "u32": "u32", "f16": "f16", "bf16": "bf16", "f32": "f32"}
PAIRS = sorted(f"{op}:{NAMES[t]}" for op, types in REDUCE_TYPES.items() for t in types
               if t in NAMES and NAMES[t] not in derive.HARDWARE_REDUCTIONS[op]
               and not (t == "s64" and op in ("and", "or", "xor")))


def check_pairs() -> None:
    from tests.gpu.test_dsl_tma_reduce_gpu import check_against_model
    for probe in PAIRS:
        op, name = probe.split(":")
        derive.HARDWARE_REDUCTIONS[op] = derive.HARDWARE_REDUCTIONS[op] + (name,)
        check_against_model(name, op)
        print(f"ok {probe}", flush=True)


def check_chunks() -> None:
    import torch

    import layoutkit.dsl as lk
    from tests.dsl.tma_reduce_kernels import launch_shape, reduce_tiles
    import os
    os.environ["LAYOUTKIT_SPEC_CACHE"] = "0"          # trace here, under the lifted rule
    tma_copy._check_written_extent = lambda *args: None      # this process only
    m, n, ld = 64, 100, 112
    for op in (None, "add"):
        grid, pm, pn = launch_shape(lk.bf16, "128B", m, n, 1)
        parts = torch.ones(pm, pn, device="cuda", dtype=torch.bfloat16)
        out = torch.zeros(m, ld, device="cuda", dtype=torch.bfloat16)
        reduce_tiles("bf16", op, "128B")[grid](parts, out, m, n, ld, pm, pn, 1)
        torch.cuda.synchronize()
        assert (out[:, :n] == 1).all(), f"{op}: the in-bounds elements"
        past = out[:, n:].float().cpu()
        assert (past[:, :4] == 1).all() and (past[:, 4:] == 0).all(), \
            f"reduce={op}: columns {n}..{ld - 1} hold {past[0].tolist()} (row 0)"
        print(f"ok reduce={op}: columns {n}..{n + 3} written, {n + 4}.. not", flush=True)


CHECKS = {"pairs": check_pairs, "chunks": check_chunks}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"PASS {name}")
