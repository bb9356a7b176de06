"""Checks of the TMA reductions that PTX lists but the DSL does not enable yet
(derive.HARDWARE_REDUCTIONS), one per process: `python tma_reduce_probe_checks.py OP:DTYPE`
enables the pair in this process only, runs the GPU test's model check on it
(tests/gpu/test_dsl_tma_reduce_gpu.check_against_model) and prints `PASS OP:DTYPE`. A pair
that passes on the H200 may be added to HARDWARE_REDUCTIONS. The 64-bit bitwise ops are left
out: i64 xor raised an illegal instruction there."""
import sys

from layoutkit.dsl.sm90.tma import derive
from layoutkit.ptx.isa.tma import REDUCE_TYPES

NAMES = {"s32": "i32", "s64": "i64", "u32": "u32", "f16": "f16", "bf16": "bf16", "f32": "f32"}
PROBES = sorted(f"{op}:{NAMES[t]}" for op, types in REDUCE_TYPES.items() for t in types
                if t in NAMES and NAMES[t] not in derive.HARDWARE_REDUCTIONS[op]
                and not (t == "s64" and op in ("and", "or", "xor")))

if __name__ == "__main__":
    probe = sys.argv[1]
    op, name = probe.split(":")
    derive.HARDWARE_REDUCTIONS[op] = derive.HARDWARE_REDUCTIONS[op] + (name,)
    from tests.gpu.test_dsl_tma_reduce_gpu import check_against_model
    check_against_model(name, op)
    print(f"PASS {probe}")
