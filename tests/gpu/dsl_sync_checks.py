"""GPU checks of the DSL's sync ops, one per process: ``python tests/gpu/dsl_sync_checks.py NAME``.

Exit status 0 and a last line ``PASS NAME`` when the check holds. A debug-build timeout traps and
poisons the CUDA context, so each check runs in its own process (tests/gpu/test_dsl_sync_gpu.py).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from layoutkit.ptx import DeviceBuffer, device  # noqa: E402
from layoutkit.sync import BarrierTimeoutError  # noqa: E402
from tests.dsl import sync_kernels as K  # noqa: E402
from tests.dsl.source_lines import line_of  # noqa: E402


def _pingpong(n: int) -> None:
    out = DeviceBuffer.empty(K.BLOCK_THREADS, np.int32)
    out.copy_from(np.full(K.BLOCK_THREADS, -1, np.int32))
    K.ring_pingpong[1](out, n)
    device(0).synchronize()
    got = out.to_numpy()
    lanes = np.arange(K.PRODUCER_THREADS, K.BLOCK_THREADS) % K.PRODUCER_THREADS
    expected = (3 * (n * (n - 1) // 2) + n + n * lanes).astype(np.int64)
    expected = ((expected + 2**31) % 2**32 - 2**31).astype(np.int32)
    assert (got[:K.PRODUCER_THREADS] == -1).all(), "the producer warpgroup wrote results"
    bad = np.nonzero(got[K.PRODUCER_THREADS:] != expected)[0]
    assert not bad.size, f"consumer threads {bad[:8] + K.PRODUCER_THREADS} got " \
                         f"{got[K.PRODUCER_THREADS:][bad[:8]]}, expected {expected[bad[:8]]}"


def check_pingpong_many_rounds():
    for n in (1, 3, 4, 5, 64, 1001, 20000):
        _pingpong(n)


def check_wrong_parity_raises_barrier_timeout():
    out = DeviceBuffer.empty(4, np.int32)
    try:
        K.wrong_parity[2](out)
    except BarrierTimeoutError as exc:
        message = str(exc)
    else:
        raise AssertionError("the wrong-parity wait returned instead of timing out")
    line = line_of(K.__file__, "# WRONG PARITY LINE")
    pattern = (rf"mbarrier 'empty' stage 0 waited for parity 0 for more than 2(\.0)? s at "
               rf".*sync_kernels\.py:{line} \(block [01], thread \d+\)")
    assert re.match(pattern, message), message
    print(message)


def check_cluster_remote_arrive_and_sync():
    blocks = 8
    out = DeviceBuffer.empty(blocks, np.int32)
    out.copy_from(np.full(blocks, -1, np.int32))
    K.cluster_ring[blocks](out, blocks)
    device(0).synchronize()
    got = out.to_numpy()
    assert (got == np.arange(blocks) % 2).all(), got


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"PASS {name}")
