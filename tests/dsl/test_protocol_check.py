"""The static protocol check passes the correct kernels of the project cleanly (no error, no
warning): the ring, cluster and TMA example kernels, the wgmma kernels and the Hopper GEMM
recipe; and what it extracts from a kernel (thread classes, events, assumed trip counts)."""
import sys
import warnings
from pathlib import Path

import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.check.extract import extract
from layoutkit.sync import kernel_model as km

from . import sync_kernels as S
from .test_tma_kernels import BF16, tma_multicast, tma_round_trip
from .wgmma_kernels import attention_tile, consumer_mainloop, ss_gemm

P = lk.Pointer
GEMM = (P[lk.bf16], P[lk.bf16], P[lk.f32], 256)


def clean(kernel, *args, **kwargs):
    """Trace `kernel` with warnings as errors; return its IR."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", lk.ProtocolWarning)
        return kernel.ir(*args, **kwargs)


@pytest.mark.parametrize("case", [
    (S.ring_pingpong, (P[lk.i32], 10), {}),
    (S.cluster_ring, (P[lk.i32], 8), {}),
    (tma_round_trip, (BF16, BF16, BF16, BF16, 200, 136, 256, 256, "128B"), {}),
    (tma_multicast, (BF16, BF16, 300, 136, 3), {}),
    (ss_gemm, GEMM, {"M": 64, "N": 64, "B_MAJOR": "K"}),
    (attention_tile, (P[lk.bf16],) * 3 + (P[lk.f32],) * 2, {"N": 128}),
], ids=lambda case: case[0].name)
def test_correct_kernels_pass_cleanly(case):
    kernel, args, kwargs = case
    clean(kernel, *args, **kwargs)


def test_a_kernel_whose_wgmma_reads_shared_memory_nothing_writes_is_refused():
    # consumer_mainloop checks code generation only: its producer fills nothing
    with pytest.raises(lk.ProtocolError) as info:
        consumer_mainloop.ir(*GEMM)
    assert [f.kind for f in info.value.findings] == ["unwritten", "unwritten"]


@pytest.mark.parametrize("cluster", [1, 2])
def test_hopper_gemm_recipe_passes_cleanly(cluster):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes"))
    try:
        import gemm_hopper as G
    finally:
        sys.path.pop(0)
    t = lk.TensorSpec(lk.bf16, (4096, 4096))
    for major in ("K", "N"):
        clean(G.KERNELS[cluster], t, t, t,
              GRID=132, B_MAJOR=major, BN=256, STAGES=3, GROUP_M=8, CLUSTER=cluster)


def test_ring_classes_and_events():
    protocol = extract(S.ring_pingpong.ir(P[lk.i32], 10))
    assert protocol.assumed == "n=9"                      # 2 * STAGES + 1 iterations
    assert [c.who for c in protocol.classes] == ["role 'producer' (threads 0-127)",
                                                 "role 'consumer' (threads 128-383)"]
    producer, consumer = protocol.classes
    assert isinstance(producer.events[0], km.Init) and producer.events[0].partial
    waits = [(e.barrier, e.stage, e.parity) for e in producer.events if isinstance(e, km.Wait)]
    assert waits == [("empty", k % 4, 1 - (k // 4) % 2) for k in range(9)]
    arrives = [(e.barrier, e.stage, e.arrivals) for e in consumer.events
               if isinstance(e, km.Arrive)]
    assert arrives == [("empty", k % 4, 256) for k in range(9)]
    reads = [e for e in consumer.events if isinstance(e, km.SharedRead)]
    assert reads[0].bytes == km.ByteRange(0, "slots", 0, 512) and reads[0].proxy == "generic"


def test_cluster_kernel_is_checked_per_cta():
    protocol = extract(S.cluster_ring.ir(P[lk.i32], 8))
    assert protocol.ctas == 2
    remote = [e for c in protocol.classes for e in c.events
              if isinstance(e, km.Arrive) and e.remote]
    assert sorted((e.cta, e.arrivals) for e in remote) == [(0, 1), (1, 1)]


def test_skipped_context_leaves_a_broken_kernel_unchecked():
    def k(x: P[lk.i32], n: lk.i32):
        full = lk.sm90.mbarrier_array(1, 1, name="full")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
        lk.barrier()
        lk.sm90.mbarrier_wait(full[0], 0)                  # nothing ever arrives
    with pytest.raises(lk.ProtocolError) as info:
        lk.Kernel(k).ir(P[lk.i32], 8)
    assert info.value.ir is not None and [f.kind for f in info.value.findings] == ["deadlock"]
    with lk.protocol_check_skipped():
        lk.Kernel(k).ir(P[lk.i32], 8)
    with pytest.warns(lk.ProtocolWarning, match="debug build, run anyway"):
        lk.Kernel(k, debug=True).ir(P[lk.i32], 8)


def test_a_kernel_too_long_to_walk_is_a_warning_not_a_check():
    def k(x: P[lk.i32], n: lk.i32):
        full = lk.sm90.mbarrier_array(1, 128, name="full")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
        lk.barrier()
        for i in lk.range(0, 5000):
            lk.sm90.mbarrier_arrive(full[0])
            lk.sm90.mbarrier_wait(full[0], i % 2)
    with pytest.warns(lk.ProtocolWarning, match="the lk.range at line .* runs 5000 iterations"):
        lk.Kernel(k).ir(P[lk.i32], 8)
