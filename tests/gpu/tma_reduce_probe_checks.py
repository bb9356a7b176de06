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
- `load_fill`: a TMA load of the same tensor (its columns 100..111 hold 7.0 in memory) fills
  the box's columns past 100 with zeros, element by element, as the DSL documents; a failure
  means loads need the whole-chunk rule too.
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


def pitched_load_kernel():
    """CTA 0 TMA-loads the (64, 128) tile at the origin of a (M, N) bf16 tensor of row pitch
    LD into a 128B-swizzled shared tile; its threads copy the tile to `out` (64 x 128)."""
    import layoutkit.dsl as lk
    from layoutkit.algebra import Layout
    from tests.dsl.tma_reduce_kernels import copy_tv, shared_layout

    @lk.kernel(num_warps=4)
    def pitched_load(a: lk.Pointer[lk.bf16], out: lk.Pointer[lk.bf16], M: lk.i32, N: lk.i32,
                     LD: lk.i32):
        A = lk.global_tensor(a, Layout((M, N), (LD, 1)))
        Out = lk.global_tensor(out, Layout((64, 128), (128, 1)))
        s = lk.shared_tensor(shared_layout(lk.bf16, "128B"), lk.bf16, name="s", align=1024)
        full = lk.sm90.mbarrier_array(1, arrive_count=1, name="full")
        with lk.if_(lk.thread_id() < 1):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        with lk.if_(lk.thread_id() < 1):
            with lk.sm90.expect_tx(full[0]):
                lk.sm90.tma_load(s, A.tile((64, 128), (0, 0)), full[0])
        lk.sm90.mbarrier_wait(full[0], 0)
        tv, sub = copy_tv(lk.bf16, 64)
        for i in range(64 // sub[0]):
            for j in range(128 // sub[1]):
                lk.store(Out.tile(sub, (i, j)).partition(tv),
                         lk.load(s.tile(sub, (i, j)).partition(tv)))
    return pitched_load


def check_load_fill() -> None:
    import torch
    m, n, ld = 64, 100, 112
    a = torch.full((m, ld), 7.0, device="cuda", dtype=torch.bfloat16)
    a[:, :n] = 1.0
    out = torch.full((64, 128), -1.0, device="cuda", dtype=torch.bfloat16)
    pitched_load_kernel()[1](a, out, m, n, ld)
    torch.cuda.synchronize()
    assert (out[:, :n] == 1).all(), "the in-bounds elements"
    past = out[:, n:].float().cpu()
    assert (past == 0).all(), f"columns {n}..127 hold {past[0].tolist()} (row 0), not zeros"
    print(f"ok columns {n}..127 zero-filled", flush=True)


CHECKS = {"pairs": check_pairs, "chunks": check_chunks, "load_fill": check_load_fill}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"PASS {name}")
