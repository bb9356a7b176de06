"""Broken TMA/wgmma pipelines, proxy fences, named barriers and cluster barriers: each is a
ProtocolError of the static check, with its exact text."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

from ..dsl.source_lines import line_of
from .harness import I32, check, diagnose

BF16 = lk.Pointer[lk.bf16]
SW128 = Swizzle(3, 3, 3)
STAGES = 2
TILE = 64


def L(marker: str) -> int:
    return line_of(__file__, marker)


def ring_tile(stages=STAGES):
    """A ring of 64 x 64 bf16 tiles, K contiguous, 128-byte swizzle (TMA box {64, 64})."""
    return ComposedLayout(SW128, 0, Layout((TILE, TILE, stages), (TILE, 1, TILE * TILE)))


def barriers(full_count=1, empty_count=128):
    full = lk.sm90.mbarrier_array(STAGES, full_count, name="full")
    empty = lk.sm90.mbarrier_array(STAGES, empty_count, name="empty")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full, empty)                                 # INIT
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return full, empty


def load_stage(sA, sB, A, B, full, stage, k):
    with lk.sm90.elect_one(), lk.sm90.expect_tx(full[stage]):                   # EXPECT
        lk.sm90.tma_load(sA[:, :, stage], A.tile((TILE, TILE), (0, k)), full[stage])   # LOAD A
        lk.sm90.tma_load(sB[:, :, stage], B.tile((TILE, TILE), (0, k)), full[stage])   # LOAD B


def gemm(release_before_wait=False, producer_warps_all=False, skip_b=False):
    """A 64x64x(64 k_tiles) wgmma over a 2-stage TMA ring; the flags make it wrong."""
    def k(a: BF16, b: BF16, k_tiles: lk.i32):
        A = lk.global_tensor(a, Layout((TILE, TILE * k_tiles), (TILE * k_tiles, 1)))
        B = lk.global_tensor(b, Layout((TILE, TILE * k_tiles), (TILE * k_tiles, 1)))
        sA = lk.shared_tensor(ring_tile(), lk.bf16, name="sA")
        sB = lk.shared_tensor(ring_tile(), lk.bf16, name="sB")
        full, empty = barriers()
        with lk.sm90.warp_role("producer", warpgroups=0, registers=40):
            with lk.if_(lk.eq(lk.warp_id(), 0)):
                for i in lk.range(0, k_tiles):                        # TMA LOOP
                    p = lk.sm90.producer_state(i, STAGES)
                    lk.sm90.mbarrier_wait(empty[p.stage], p.phase)         # TMA WAIT
                    if skip_b:
                        with lk.sm90.elect_one(), lk.sm90.expect_tx(full[p.stage]):  # M1
                            lk.sm90.tma_load(sA[:, :, p.stage], A.tile((TILE, TILE), (0, i)),
                                             full[p.stage])
                            with lk.if_(lk.eq(lk.lane_id(), 1)):      # NEVER TRUE
                                lk.sm90.tma_load(sB[:, :, p.stage], B.tile((TILE, TILE), (0, i)),
                                                 full[p.stage])
                    else:
                        load_stage(sA, sB, A, B, full, p.stage, i)
        with lk.sm90.warp_role("consumer", warpgroups=1, registers=232):
            loop = lk.range(0, k_tiles, carry=(lk.sm90.wgmma_accumulator(TILE),))
            for i, (acc,) in loop:                                    # MMA LOOP
                c = lk.sm90.consumer_state(i, STAGES)
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)              # MMA WAIT
                lk.sm90.wgmma_fence()
                acc = lk.sm90.wgmma(acc, sA[:, :, c.stage], sB[:, :, c.stage],   # WGMMA
                                    accumulate=i > 0)
                lk.sm90.wgmma_commit()
                if release_before_wait:
                    lk.sm90.mbarrier_arrive(empty[c.stage])                # EARLY RELEASE
                    lk.sm90.wgmma_wait(0)
                else:
                    lk.sm90.wgmma_wait(0)
                    lk.sm90.mbarrier_arrive(empty[c.stage])
                loop.next(acc)
    return k


def protocol_error(fn, num_warps=8):
    return diagnose(fn, BF16, BF16, 8, error=lk.ProtocolError, num_warps=num_warps)


def test_correct_pipeline_passes():
    lk.Kernel(gemm(), 8).ir(BF16, BF16, 8)


def test_release_of_a_slot_before_the_wgmma_reading_it_retires():
    check(protocol_error(gemm(release_before_wait=True)), __file__, "# EARLY RELEASE",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "k_tiles=5):\n  - wgmma overwrite: role 'consumer' (threads 128-255) releases empty[0] "
          f"at line {L('# EARLY RELEASE')} (iteration 0 of the lk.range at line {L('# MMA LOOP')}) "
          f"while the wgmma at line {L('# WGMMA')} (iteration 0 of the lk.range at line "
          f"{L('# MMA LOOP')}) reading sA bytes 0..8191 may still run (no lk.sm90.wgmma_wait "
          "retires it first), and role 'producer' (thread 0)'s TMA load into sA at line "
          f"{L('# LOAD A')} (iteration 0 of the lk.range at line {L('# TMA LOOP')}), issued after "
          "its wait on empty[0], overwrites those bytes; lk.sm90.wgmma_wait(n) for that wgmma "
          "before the arrive")


def test_copy_inside_a_branch_of_the_expect_tx_scope_never_lands():
    check(protocol_error(gemm(skip_b=True)), __file__, "# M1",
          "kernel k: the static protocol check found 2 errors (runtime loops checked with "
          "k_tiles=5):\n "
          f" - expect-tx: phase 0 of full[1] expects 16384 bytes (line {L('# M1')} (iteration 1 "
          f"of the lk.range at line {L('# TMA LOOP')})) but its copies deliver 8192: the phase "
          "never completes\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-31) waits on empty[0] for parity 0 at line "
          f"{L('# TMA WAIT')} (iteration 2 of the lk.range at line {L('# TMA LOOP')}): it "
          "completed 0 phase(s); phase 0 has 0 of 128 arrivals (none) and 0 transaction bytes "
          "outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 0 at line "
          f"{L('# MMA WAIT')} (iteration 0 of the lk.range at line {L('# MMA LOOP')}): it "
          "completed 0 phase(s); phase 0 has 1 of 1 arrivals (1 from role 'producer' (thread "
          f"0) at line {L('# M1')} (iteration 0 of the lk.range at line {L('# TMA LOOP')})) and "
          "8192 transaction bytes outstanding (expect-tx: 16384 bytes expected, the copies "
          "delivered 8192; the bytes expected must equal the bytes the copies of the phase "
          "land)")


def test_expect_tx_armed_by_every_thread():
    def k(a: BF16, b: BF16, k_tiles: lk.i32):
        A = lk.global_tensor(a, Layout((TILE, TILE * k_tiles), (TILE * k_tiles, 1)))
        sA = lk.shared_tensor(ring_tile(), lk.bf16, name="sA")
        full, empty = barriers()
        with lk.sm90.expect_tx(full[0]):                                   # ALL ARM
            lk.sm90.tma_load(sA[:, :, 0], A.tile((TILE, TILE), (0, 0)), full[0])
        lk.sm90.mbarrier_wait(full[0], 0)  # M2
    check(protocol_error(k, 4), __file__, "# ALL ARM",
          "kernel k: the static protocol check found 2 errors:\n "
          " - arrive count: threads 0-127 arrives 128 time(s) on full[0] at line "
          f"{L('# ALL ARM')}, but its phase 0 expects only 1 more (init count 1 at line "
          f"{L('# INIT')}; arrivals so far: none): the phase completes early and the rest "
          "counts toward the next one; elect one thread (lk.sm90.elect_one) or init the array with "
          "the number of threads that arrive per phase\n "
          " - deadlock: every thread class left is blocked forever:\n "
          f"     threads 0-127 waits on full[0] for parity 0 at line {L('# M2')}: it completed "
          "0 phase(s); phase 0 has 128 of 1 arrivals (128 from threads 0-127 at line "
          f"{L('# ALL ARM')}) and 0 transaction bytes outstanding")


def test_generic_stores_read_by_wgmma_without_a_proxy_fence():
    tv = lk.TVLayout((TILE, TILE), Layout(((8, 16), (8, 4)), ((TILE * 8, 1), (TILE, 16))))

    def k(a: BF16, b: BF16, k_tiles: lk.i32):
        sA = lk.shared_tensor(ComposedLayout(SW128, 0, Layout((TILE, TILE), (TILE, 1))),
                              lk.bf16, name="sA")
        lk.store(sA.partition(tv), lk.full(tv, 1.0, lk.bf16))         # GENERIC STORE
        lk.barrier()
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(TILE), sA, sA, accumulate=False)  # ASYNC READ
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
    check(protocol_error(k, 4), __file__, "# GENERIC STORE",
          "kernel k: the static protocol check found 1 error:\n "
          " - proxy fence: threads 0-127 writes sA bytes 0..2047 with generic stores at line "
          f"{L('# GENERIC STORE')}, and threads 0-127 reads them as a wgmma operand (async "
          f"proxy) at line {L('# ASYNC READ')} with no lk.sm90.fence_proxy_async() by the writing "
          "threads in between: write, lk.sm90.fence_proxy_async(), synchronise, then issue")


def tile_store_kernel(fence=True, wait=True, overwrite=False, reduce=None):
    tv = lk.TVLayout((TILE, TILE), Layout(((8, 16), (8, 4)), ((TILE * 8, 1), (TILE, 16))))

    def k(a: BF16, b: BF16, k_tiles: lk.i32):
        C = lk.global_tensor(a, Layout((TILE, TILE), (TILE, 1)))
        sC = lk.shared_tensor(ComposedLayout(SW128, 0, Layout((TILE, TILE), (TILE, 1))),
                              lk.bf16, name="sC")
        lk.store(sC.partition(tv), lk.full(tv, 1.0, lk.bf16))         # C STORE
        if fence:
            lk.sm90.fence_proxy_async()
        lk.barrier()
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.tma_store(C.tile((TILE, TILE), (0, 0)), sC, reduce=reduce)  # TMA STORE
            lk.sm90.tma_store_commit()
            if wait:
                lk.sm90.tma_store_wait(0)
        if overwrite:
            lk.store(sC.partition(tv), lk.full(tv, 2.0, lk.bf16))     # OVERWRITE
    return k


def test_generic_stores_read_by_a_tma_store_without_a_proxy_fence():
    check(protocol_error(tile_store_kernel(fence=False), 4), __file__, "# C STORE",
          "kernel k: the static protocol check found 1 error:\n "
          " - proxy fence: thread 0 writes sC bytes 0..2047 with generic stores at line "
          f"{L('# C STORE')}, and thread 0 reads them as a TMA store source (async proxy) at "
          f"line {L('# TMA STORE')} with no lk.sm90.fence_proxy_async() by the writing threads in "
          "between: write, lk.sm90.fence_proxy_async(), synchronise, then issue")


def test_tma_store_still_reading_at_the_end_of_the_kernel():
    check(protocol_error(tile_store_kernel(wait=False), 4), __file__, "# TMA STORE",
          "kernel k: the static protocol check found 1 error:\n "
          " - TMA store: thread 0 reaches the end of the kernel with the TMA store at line "
          f"{L('# TMA STORE')} still reading sC bytes 0..8191 (no lk.sm90.tma_store_commit() + "
          "lk.sm90.tma_store_wait() covers it): the CTA's shared memory may be reused while the "
          "store reads it")


@pytest.mark.parametrize("reduce", [None, "add"])     # a reduce-store reads its source alike
def test_tma_store_source_overwritten_before_the_store_wait(reduce):
    lk.Kernel(tile_store_kernel(reduce=reduce), 4).ir(BF16, BF16, 8)   # waited: no finding
    check(protocol_error(tile_store_kernel(wait=False, overwrite=True, reduce=reduce), 4),
          __file__,
          "# OVERWRITE",
          "kernel k: the static protocol check found 3 errors:\n  - TMA store: thread 0 writes sC "
          f"bytes 0..2047 at line {L('# OVERWRITE')} while the TMA store at line "
          f"{L('# TMA STORE')} may still read them: lk.sm90.tma_store_commit() and "
          "lk.sm90.tma_store_wait() before overwriting a store's source\n  - TMA store: thread 0 "
          f"reaches the end of the kernel with the TMA store at line {L('# TMA STORE')} still "
          "reading sC bytes 0..8191 (no lk.sm90.tma_store_commit() + lk.sm90.tma_store_wait() "
          "covers it): the CTA's shared memory may be reused while the store reads it\n  - proxy "
          "fence: threads 1-127 writes sC bytes 0..2047 with generic stores at line "
          f"{L('# OVERWRITE')}, and thread 0 reads them as a TMA store source (async proxy) at "
          f"line {L('# TMA STORE')} with no lk.sm90.fence_proxy_async() by the writing threads in "
          "between: write, lk.sm90.fence_proxy_async(), synchronise, then issue")


def roles_with_named_barrier(producer_count, consumer_count):
    def k(a: BF16, b: BF16, k_tiles: lk.i32):
        with lk.sm90.warp_role("producer", warpgroups=0, registers=40):
            with lk.if_(lk.eq(lk.warp_id(), 0)):
                lk.sm90.named_barrier_arrive(1, producer_count)            # NAMED ARRIVE
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=232):
            lk.sm90.named_barrier_sync(1, consumer_count)                  # NAMED SYNC
    return k


def test_named_barrier_count_smaller_than_its_threads():
    check(protocol_error(roles_with_named_barrier(256, 256), 12), __file__, "# NAMED SYNC",

          "kernel k: the static protocol check found 1 error:\n "
          " - named barrier: named barrier 1 counts 256 threads but 288 arrive in one use (32 "
          f"from role 'producer' (threads 0-31) at line {L('# NAMED ARRIVE')}; 256 from role "
          f"'consumer' (threads 128-383) at line {L('# NAMED SYNC')}): it completes before all "
          "of them arrive, and the rest start its next use; give the count of every thread "
          "that reaches it")


def test_named_barrier_count_larger_than_its_threads():
    check(protocol_error(roles_with_named_barrier(384, 384), 12), __file__, "# NAMED SYNC",

          "kernel k: the static protocol check found 1 error:\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'consumer' (threads 128-383) at named barrier 1 (384 threads) at line "
          f"{L('# NAMED SYNC')}: 288 of 384 threads arrived (32 from role 'producer' (threads "
          f"0-31) at line {L('# NAMED ARRIVE')}; 256 from role 'consumer' (threads 128-383) at "
          f"line {L('# NAMED SYNC')})")


def cluster_kernel(sync_after_init=True, fence=True):
    def k(a: BF16, b: BF16, k_tiles: lk.i32):
        ready = lk.sm90.mbarrier_array(1, 1, name="ready")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(ready)                                   # CLUSTER INIT
            if fence:
                lk.sm90.fence_mbarrier_init()
        if sync_after_init:
            lk.sm90.cluster_sync()
        rank = lk.sm90.block_rank_in_cluster()
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_arrive(ready[0], cta=(rank + 1) % 2)          # REMOTE ARRIVE
        lk.sm90.mbarrier_wait(ready[0], 0)
        lk.sm90.cluster_sync()
    return k


def test_remote_arrive_before_the_peer_initialised():
    check(diagnose(cluster_kernel(sync_after_init=False), BF16, BF16, 8,
                   error=lk.ProtocolError, cluster=(2, 1, 1)), __file__, "# REMOTE ARRIVE",

          "kernel k: the static protocol check found 1 error:\n "
          f" - init: CTA 0 thread 0 uses ready[0] of CTA 1 at line {L('# REMOTE ARRIVE')} "
          f"before the initialisation at line {L('# CLUSTER INIT')} is visible to it: after "
          "lk.sm90.mbarrier_init and lk.sm90.fence_mbarrier_init(), every thread passes "
          "lk.sm90.cluster_sync() before using the barrier")


def test_remote_arrive_without_fence_mbarrier_init():
    check(diagnose(cluster_kernel(fence=False), BF16, BF16, 8, error=lk.ProtocolError,
                   cluster=(2, 1, 1)), __file__, "# REMOTE ARRIVE",
          "kernel k: the static protocol check found 1 error:\n "
          " - init: CTA 0 thread 0 uses ready[0] across the cluster at line "
          f"{L('# REMOTE ARRIVE')}, but its initialisation at line {L('# CLUSTER INIT')} is not "
          "followed by lk.sm90.fence_mbarrier_init() before the cluster barrier, so the peer CTAs "
          "and the TMA unit may not see it")


def test_multicast_issued_by_one_cta_only():
    def k(a: BF16, b: BF16, k_tiles: lk.i32):
        A = lk.global_tensor(a, Layout((2 * TILE, TILE), (TILE, 1)))
        sA = lk.shared_tensor(ComposedLayout(SW128, 0, Layout((2 * TILE, TILE), (TILE, 1))),
                              lk.bf16, name="sA")
        full = lk.sm90.mbarrier_array(1, 1, name="full")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        lk.sm90.cluster_sync()
        with lk.if_(lk.eq(lk.thread_id() + lk.sm90.block_rank_in_cluster(), 0)):   # RANK 0 ONLY
            with lk.sm90.expect_tx(full[0]):  # M3
                lk.sm90.tma_load(sA, A.tile((2 * TILE, TILE), (0, 0)), full[0], multicast="x")
        lk.sm90.mbarrier_wait(full[0], 0)                                  # MULTICAST WAIT
        lk.sm90.cluster_sync()
    check(diagnose(k, BF16, BF16, 8, error=lk.ProtocolError, cluster=(2, 1, 1)), __file__,
          "# MULTICAST WAIT",
          "kernel k: the static protocol check found 1 error:\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     CTA 0 threads 0-127 waits on full[0] of CTA 0 for parity 0 at line "
          f"{L('# MULTICAST WAIT')}: it completed 0 phase(s); phase 0 has 1 of 1 arrivals (1 "
          f"from CTA 0 thread 0 at line {L('# M3')}) and 8192 transaction bytes outstanding "
          "(expect-tx: 16384 bytes expected, the copies delivered 8192; the bytes expected "
          "must equal the bytes the copies of the phase land)\n "
          "     CTA 1 threads 0-127 waits on full[0] of CTA 1 for parity 0 at line "
          f"{L('# MULTICAST WAIT')}: it completed 0 phase(s); phase 0 has 0 of 1 arrivals "
          "(none) and -8192 transaction bytes outstanding")
