"""layoutkit.sync GPU checks, one per process: ``python tests/gpu/sync_checks.py NAME``.

Exit status 0 and a last line ``PASS NAME`` when the check holds; an AssertionError otherwise.
A wrong-parity wait traps (poisoning the context), so every check runs in its own process.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from layoutkit import sync as S  # noqa: E402
from layoutkit.ptx import CompiledKernel, CudaDriverError, DeviceBuffer, Module, device  # noqa: E402
from layoutkit.ptx.isa import sm90 as I  # noqa: E402

SPLIT = S.RoleSplit([S.WarpRole("producer", 1, 24), S.WarpRole("consumer", 2, 240)])
CONSUMERS = SPLIT.role("consumer").threads


def ring_kernel(debug: bool) -> tuple[str, "S.DebugTable | None"]:
    """A 2-stage producer/consumer ring through shared memory: one producer thread writes
    3*i+1 into slot i%2 for i < n, every consumer thread adds up what it reads."""
    m = Module()
    k = m.kernel("ring", **SPLIT.directives())
    out, n_param = k.pointer_param("out"), k.param("n", "u32")
    waits = S.BoundedWaits(k, timeout_s=2.0) if debug else None
    out_g = I.cvta(k, "global", I.ld_param(k, out))
    n = I.ld_param(k, n_param)
    layout = S.MbarrierLayout()
    full = layout.add("full", 2, 1)
    empty = layout.add("empty", 2, CONSUMERS)
    region = S.declare_mbarriers(k, layout)
    data = I.mov(k, k.shared("slots", 8, align=8))
    S.init_mbarriers(k, region)

    def loop(k, body):
        i = I.mov(k, 0, dtype="u32", out=k.var("u32"))
        top, done = k.label("loop"), k.label("loop_end")
        k.place(top)
        I.bra(k, done, pred=I.setp(k, "ge", i, n, dtype="u32"))
        body(k, i)
        I.add(k, i, 1, dtype="u32", out=i)
        I.bra(k, top)
        k.place(done)

    def producer(k, ctx):
        I.exit_(k, pred=I.setp(k, "ne", ctx.tid, 0, dtype="u32"))
        ring = S.RingRegisters(k, S.PipelineState.producer_start(2))

        def step(k, i):
            S.wait(k, region.slot(k, empty, ring.index), ring.phase, debug=waits)
            slot = I.add(k, data, I.shl(k, ring.index, 2, dtype="b32"), dtype="u32")
            I.st(k, "shared", slot, I.add(k, I.mul(k, i, 3, dtype="u32", mode="lo"), 1,
                                           dtype="u32"))
            S.arrive(k, region.slot(k, full, ring.index))
            ring.advance(k)
        loop(k, step)

    def consumer(k, ctx):
        ring = S.RingRegisters(k, S.PipelineState.consumer_start(2))
        acc = I.mov(k, 0, dtype="u32", out=k.var("u32"))

        def step(k, i):
            S.wait(k, region.slot(k, full, ring.index), ring.phase, debug=waits)
            slot = I.add(k, data, I.shl(k, ring.index, 2, dtype="b32"), dtype="u32")
            I.add(k, acc, I.ld(k, "shared", slot, "u32"), dtype="u32", out=acc)
            S.arrive(k, region.slot(k, empty, ring.index))
            ring.advance(k)
        loop(k, step)
        index = I.sub(k, ctx.tid, SPLIT.thread_range("consumer").start, dtype="u32")
        I.st(k, "global", I.add(k, out_g, I.mul_wide(k, index, 4)), acc)

    S.emit_role_split(k, SPLIT, {"producer": producer, "consumer": consumer})
    I.ret(k)
    return m.text(), (waits.table if waits else None)


def run_ring(debug: bool) -> None:
    ptx, table = ring_kernel(debug)
    kernel = CompiledKernel.from_ptx(ptx)
    out = DeviceBuffer.empty(CONSUMERS, np.uint32)
    n = 1000
    errors = S.WaitErrorBuffer() if debug else None
    args = (out, n) + ((errors.device_pointer,) if debug else ())
    kernel.launch(*args, grid=3, block=SPLIT.threads)
    device(0).synchronize()
    if debug:
        errors.check(table)  # no wait timed out
    expected = sum(3 * i + 1 for i in range(n)) % 2**32
    got = out.to_numpy()
    assert (got == expected).all(), f"consumer sums {np.unique(got)[:8]} != {expected}"


def check_ring_release():
    run_ring(debug=False)


def check_ring_debug():
    run_ring(debug=True)


def check_wrong_parity_raises():
    """The producer's first wait on a fresh `empty` barrier with parity 0 (should be 1):
    the classic deadlock of hopper-ptx.md §3, item 1. It must trap and decode, not hang."""
    m = Module()
    k = m.kernel("wrong_parity", maxntid=128)
    waits = S.BoundedWaits(k, timeout_s=0.25)
    layout = S.MbarrierLayout()
    layout.add("full", 2, 1)
    empty = layout.add("empty", 2, 128)
    region = S.declare_mbarriers(k, layout)
    S.init_mbarriers(k, region)
    wrong = S.PipelineState.consumer_start(2)  # phase 0: the bug
    S.wait(k, region.slot(k, empty, wrong.index), wrong.parity, debug=waits)
    line = sys._getframe().f_lineno - 1
    I.ret(k)
    kernel = CompiledKernel.from_ptx(m.text())
    errors = S.WaitErrorBuffer()
    try:
        kernel.launch(errors.device_pointer, grid=2, block=128)
        device(0).synchronize()
    except CudaDriverError as exc:
        trapped = exc
    else:
        raise AssertionError("the wrong-parity wait returned instead of timing out")
    assert trapped.result_name in ("CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                                   "CUDA_ERROR_ASSERT"), trapped
    try:
        errors.check(waits.table)
    except S.BarrierTimeoutError as exc:
        message = str(exc)
    else:
        raise AssertionError(f"no timeout record after the trap: {errors.read().hex()}")
    pattern = (rf"mbarrier 'empty' stage 0 waited for parity 0 for more than 0\.25 s at "
               rf".*sync_checks\.py:{line} \(block [01], thread \d+\)")
    assert re.match(pattern, message), message
    assert f"sync_checks.py:{line} (block " in message, message
    print(message)


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"PASS {name}")
