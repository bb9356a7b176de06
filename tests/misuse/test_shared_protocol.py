"""Shared memory misused around TMA loads: overlapping asynchronous writes in one phase, a read
of a TMA destination without the wait on the phase it completes, a ring stage released before
its plain read, a read of bytes nothing writes. Each is a ProtocolError of the static check
(layoutkit.sync.shared_rules, on the happens-before of the simulated run) with its exact
text; what it cannot decide is a ProtocolWarning saying so."""
import warnings

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

from ..dsl.source_lines import line_of
from .harness import I32, check, diagnose

BF16 = lk.Pointer[lk.bf16]
SW128 = Swizzle(3, 3, 3)
STAGES = 2
TILE = 64
# 128 threads over a 64 x 64 tile, 32 values each (8-element runs)
TV = lk.TVLayout((TILE, TILE), Layout(((8, 16), (8, 4)), ((TILE * 8, 1), (TILE, 16))))


def L(marker: str) -> int:
    return line_of(__file__, marker)


def ring_tile(stages=STAGES):
    """A ring of 64 x 64 bf16 tiles, K contiguous, 128-byte swizzle (TMA box {64, 64})."""
    return ComposedLayout(SW128, 0, Layout((TILE, TILE, stages), (TILE, 1, TILE * TILE)))


def first_thread():
    return lk.if_(lk.eq(lk.thread_id(), 0))


def barriers(full_count=1, empty_count=128):
    full = lk.sm90.mbarrier_array(STAGES, full_count, name="full")
    empty = lk.sm90.mbarrier_array(STAGES, empty_count, name="empty")
    with first_thread():
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return full, empty


def global_tiles(a, tiles):
    return lk.global_tensor(a, Layout((TILE, TILE * tiles), (TILE * tiles, 1)))


def protocol_error(fn, num_warps=4):
    return diagnose(fn, BF16, BF16, 8, error=lk.ProtocolError, num_warps=num_warps)


# ---- overlapping asynchronous writes ------------------------------------------------------
def two_loads(second_stage):
    """Thread 0 loads two tiles in one phase of full[0], into stages 0 and `second_stage`."""
    def k(a: BF16, out: BF16, n: lk.i32):
        A, Out = global_tiles(a, 2), global_tiles(out, 1)
        sA = lk.shared_tensor(ring_tile(), lk.bf16, name="sA")
        full, empty = barriers()
        with first_thread(), lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(sA[:, :, 0], A.tile((TILE, TILE), (0, 0)), full[0])        # LOAD 1
            lk.sm90.tma_load(sA[:, :, second_stage], A.tile((TILE, TILE), (0, 1)),      # LOAD 2
                             full[0])
        lk.sm90.mbarrier_wait(full[0], 0)
        lk.store(Out.tile((TILE, TILE), (0, 0)).partition(TV),
                 lk.load(sA[:, :, 0].partition(TV)))
        lk.store(Out.tile((TILE, TILE), (0, 0)).partition(TV),
                 lk.load(sA[:, :, 1].partition(TV)))                              # STAGE 1 READ
    return k


def test_two_loads_into_their_own_stages_pass():
    lk.Kernel(two_loads(1), 4).ir(BF16, BF16, 8)


def test_two_tma_loads_into_the_same_bytes_in_one_phase():
    check(protocol_error(two_loads(0)), __file__, "# LOAD 2",
          "kernel k: the static protocol check found 2 errors:\n  - async overlap: thread 0 "
          f"writes sA bytes 0..8191 with a TMA load at line {L('# LOAD 2')} while its own TMA load "
          f"at line {L('# LOAD 1')} may still write them: that load completes on full[0] (its "
          "phase 0), which thread 0 has not waited for, so the two writes land in either order; "
          "give each copy its own bytes (the stage's slice of the buffer) or write after a wait "
          "that sees full[0] complete\n  - unwritten: thread 0 reads sA bytes 8192..10239 with a "
          f"load at line {L('# STAGE 1 READ')}, which no write of the kernel covers (the writes of "
          "sA cover its bytes 0..8191): shared memory starts undefined, so the read sees garbage; "
          "write the bytes first (lk.store, lk.sm90.tma_load, lk.sm80.cp_async) and synchronise, "
          "or read only bytes that were written")


# ---- a read of a TMA destination without the wait ------------------------------------------
def load_then_read(wait_first):
    """Thread 0 loads a tile completing on full[0]; warp 1 reads it, after waiting on full[0]
    when `wait_first`, else without waiting at all (thread 0 waits at the end)."""
    def k(a: BF16, out: BF16, n: lk.i32):
        A, Out = global_tiles(a, 1), global_tiles(out, 1)
        sA = lk.shared_tensor(ring_tile(1), lk.bf16, name="sA")
        full, empty = barriers()
        with first_thread(), lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(sA[:, :, 0], A.tile((TILE, TILE), (0, 0)), full[0])        # THE LOAD
        if wait_first:
            lk.sm90.mbarrier_wait(full[0], 0)
        values = lk.load(sA[:, :, 0].partition(TV))                               # NO WAIT
        lk.store(Out.tile((TILE, TILE), (0, 0)).partition(TV), values)
        if not wait_first:
            lk.sm90.mbarrier_wait(full[0], 0)
    return k


def test_read_after_the_wait_passes():
    lk.Kernel(load_then_read(True), 4).ir(BF16, BF16, 8)


def test_read_of_a_tma_destination_without_waiting_on_its_barrier():
    check(protocol_error(load_then_read(False)), __file__, "# NO WAIT",
          "kernel k: the static protocol check found 1 error:\n"
          f"  - unwaited read: thread 0 reads sA bytes 0..2047 at line {L('# NO WAIT')}, which "
          f"its own TMA load at line {L('# THE LOAD')} writes, completing on full[0] (its phase "
          "0), without having waited on that phase (it does not wait on full[0] before the "
          "read): the read can run before the data lands; lk.sm90.mbarrier_wait(full[0], parity) "
          "for the phase the load completes, then read")


# ---- a ring stage released before its plain read ----------------------------------------
def ring(release_early=False, read_next_stage=False, second_reader=False):
    """Thread 0 fills a 2-stage ring of 64 x 64 tiles by TMA; warpgroup 1 reads each tile with
    lk.load and releases the stage (arrives on empty) after the read, or before it; with
    `second_reader`, warpgroup 2 reads each tile too but never releases it."""
    def k(a: BF16, out: BF16, k_tiles: lk.i32):
        A, Out = global_tiles(a, k_tiles), global_tiles(out, 1)
        sA = lk.shared_tensor(ring_tile(), lk.bf16, name="sA")
        full, empty = barriers()
        with lk.sm90.warp_role("producer", warpgroups=0):
            with first_thread():
                for i in lk.range(0, k_tiles):                                    # PRODUCER LOOP
                    p = lk.sm90.producer_state(i, STAGES)
                    lk.sm90.mbarrier_wait(empty[p.stage], p.phase)                     # FREE WAIT
                    with lk.sm90.expect_tx(full[p.stage]):
                        lk.sm90.tma_load(sA[:, :, p.stage], A.tile((TILE, TILE), (0, i)),  # REFILL
                                         full[p.stage])
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for i in lk.range(0, k_tiles):                                        # READ LOOP
                c = lk.sm90.consumer_state(i, STAGES)
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)
                if release_early:
                    lk.sm90.mbarrier_arrive(empty[c.stage])                            # RELEASE
                stage = c.stage
                if read_next_stage:
                    stage = lk.sm90.consumer_state(i + 1, STAGES).stage
                values = lk.load(sA[:, :, stage].partition(TV))                   # STAGE READ
                lk.store(Out.tile((TILE, TILE), (0, 0)).partition(TV), values)
                if not release_early:
                    lk.sm90.mbarrier_arrive(empty[c.stage])
        if second_reader:
            with lk.sm90.warp_role("reader", warpgroups=2):
                for i in lk.range(0, k_tiles):                                    # READER LOOP
                    c = lk.sm90.consumer_state(i, STAGES)
                    lk.sm90.mbarrier_wait(full[c.stage], c.phase)
                    values = lk.load(sA[:, :, c.stage].partition(TV))             # UNRELEASED
                    lk.store(Out.tile((TILE, TILE), (0, 0)).partition(TV), values)
    return k


def test_ring_released_after_its_reads_passes():
    lk.Kernel(ring(), 8).ir(BF16, BF16, 8)


def test_ring_stage_released_before_its_plain_read():
    check(protocol_error(ring(release_early=True), 8), __file__, "# RELEASE",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "k_tiles=5):\n"
          "  - early release: role 'consumer' (threads 128-255) releases empty[0] at line "
          f"{L('# RELEASE')} (iteration 0 of the lk.range at line {L('# READ LOOP')}) before "
          f"its read of sA bytes 0..2047 at line {L('# STAGE READ')} (iteration 0 of the "
          f"lk.range at line {L('# READ LOOP')}): role 'producer' (thread 0)'s TMA load at line "
          f"{L('# REFILL')} (iteration 2 of the lk.range at line {L('# PRODUCER LOOP')}), "
          f"issued after its wait on empty[0] at line {L('# FREE WAIT')} (iteration 2 of the "
          f"lk.range at line {L('# PRODUCER LOOP')}), refills those bytes while the read may "
          "still run; arrive on empty[0] after the last read of the stage")


def test_ring_stage_read_by_a_warpgroup_that_never_releases_it():
    check(protocol_error(ring(second_reader=True), 12), __file__, "# UNRELEASED",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "k_tiles=5):\n"
          "  - early release: role 'reader' (threads 256-383) reads sA bytes 0..2047 at line "
          f"{L('# UNRELEASED')} (iteration 0 of the lk.range at line {L('# READER LOOP')}), but "
          f"role 'producer' (thread 0)'s TMA load at line {L('# REFILL')} (iteration 2 of the "
          f"lk.range at line {L('# PRODUCER LOOP')}), issued after its wait on empty[0] at line "
          f"{L('# FREE WAIT')} (iteration 2 of the lk.range at line {L('# PRODUCER LOOP')}), "
          "refills those bytes without waiting for the read: no arrive of role 'reader' "
          "(threads 256-383) after an earlier read of the stage tells the producer the stage "
          "is free, so the refill may land while the read runs; arrive on the barrier the "
          "producer waits on (and count these threads in its arrive count) after the last read "
          "of the stage")


def test_ring_read_of_the_stage_it_did_not_wait_for():
    check(protocol_error(ring(read_next_stage=True), 8), __file__, "# STAGE READ",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "k_tiles=5):\n"
          "  - unwaited read: role 'consumer' (threads 128-255) reads sA bytes 8192..10239 at "
          f"line {L('# STAGE READ')} (iteration 0 of the lk.range at line {L('# READ LOOP')}), "
          f"which role 'producer' (thread 0)'s TMA load at line {L('# REFILL')} (iteration 1 of "
          f"the lk.range at line {L('# PRODUCER LOOP')}) writes, completing on full[1] (its "
          "phase 0), without having waited on that phase (it does not wait on full[1] before "
          "the read): the read can run before the data lands; lk.sm90.mbarrier_wait(full[1], "
          "parity) for the phase the load completes, then read")


# ---- reads of shared memory nothing writes ------------------------------------------------
def test_wgmma_reading_a_buffer_nothing_writes():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(ComposedLayout(SW128, 0, Layout((TILE, TILE), (TILE, 1))), lk.bf16,
                             name="s")
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(TILE), s, s, accumulate=False)     # UNWRITTEN
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
    check(diagnose(k, I32, 8, error=lk.ProtocolError), __file__, "# UNWRITTEN",
          "kernel k: the static protocol check found 1 error:\n  - unwritten: threads 0-127 reads "
          f"s bytes 0..8191 with a wgmma at line {L('# UNWRITTEN')}, but nothing in the kernel "
          "writes s (no store, stmatrix, cp.async or TMA load): shared memory starts undefined, "
          "so the read sees garbage; write the bytes first (lk.store, lk.sm90.tma_load, "
          "lk.sm80.cp_async) and synchronise, or read only bytes that were written")


def half_written(rows_read):
    """Every thread stores rows 0..31 of a 64 x 64 f32 tile, then reads rows `rows_read`."""
    tv = lk.TVLayout((32, TILE), Layout(((8, 16), (8, 2)), ((32 * 8, 1), (32, 16))))

    def k(x: lk.Pointer[lk.f32], n: lk.i32):
        s = lk.shared_tensor(Layout((TILE, TILE), (TILE, 1)), lk.f32, name="s")
        X = lk.global_tensor(x, Layout((32, TILE), (TILE, 1)))
        lk.store(s.tile((32, TILE), (0, 0)).partition(tv), lk.full(tv, 1.0, lk.f32))  # HALF
        lk.barrier()
        got = lk.load(s.tile((32, TILE), (rows_read, 0)).partition(tv))           # OTHER HALF
        lk.store(X.partition(tv), got)
    return k


def test_read_of_the_written_half_passes():
    lk.Kernel(half_written(0), 4).ir(lk.Pointer[lk.f32], 8)


def test_read_of_bytes_no_write_covers():
    check(diagnose(half_written(1), lk.Pointer[lk.f32], 8, error=lk.ProtocolError), __file__,
          "# OTHER HALF",
          "kernel k: the static protocol check found 1 error:\n  - unwritten: threads 0-127 reads "
          f"s bytes 8192..12271 with a load at line {L('# OTHER HALF')}, which no write of the "
          "kernel covers (the writes of s cover its bytes 0..8191): shared memory starts "
          "undefined, so the read sees garbage; write the bytes first (lk.store, "
          "lk.sm90.tma_load, lk.sm80.cp_async) and synchronise, or read only bytes that were "
          "written")


# ---- what the check cannot decide is a warning ------------------------------------------
OWN = lk.TVLayout((32,), Layout((32, 1), (1, 0)))          # thread t: element t


def warning_of(fn, *args, num_warps=1) -> lk.ProtocolWarning:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        lk.Kernel(fn, num_warps).ir(*args)
    (found,) = [w for w in record if issubclass(w.category, lk.ProtocolWarning)]
    return found


def test_write_in_a_branch_no_thread_took_is_a_warning():
    def k(x: lk.Pointer[lk.f32], n: lk.i32):
        s = lk.shared_tensor(Layout(32), lk.f32, name="s")
        X = lk.global_tensor(x, Layout(32))
        with lk.if_(n > 100):
            lk.store(s.partition(OWN), lk.full(OWN, 1.0, lk.f32))                 # BRANCH
        lk.barrier()
        lk.store(X.partition(OWN), lk.load(s.partition(OWN)))                     # READ S
    found = warning_of(k, lk.Pointer[lk.f32], 8)
    assert found.lineno == L("# READ S")
    assert str(found.message) == (
        "kernel k: the static protocol check could not decide: threads 0-31 reads s bytes "
        f"0..127 with a load at line {L('# READ S')}, but nothing in the kernel writes s (no "
        "store, stmatrix, cp.async or TMA load) as far as the check followed it: it did not "
        f"follow the access of s at line {L('# BRANCH')} (an offset computed from memory, or a "
        "branch no thread took with the values checked), so that the read sees written data "
        "was not proven")


def test_writes_in_a_loop_of_an_assumed_trip_count_are_a_warning():
    def k(x: lk.Pointer[lk.f32], n: lk.i32):
        s = lk.shared_tensor(Layout(256), lk.f32, name="s")
        X = lk.global_tensor(x, Layout(32))
        for i in lk.range(0, n):                                                  # ROWS
            lk.store(s.tile((32,), (i,)).partition(OWN), lk.full(OWN, 1.0, lk.f32))
        lk.barrier()
        lk.store(X.partition(OWN), lk.load(s.tile((32,), (7,)).partition(OWN)))  # ROW 7
    found = warning_of(k, lk.Pointer[lk.f32], 8)
    assert found.lineno == L("# ROW 7")
    assert str(found.message) == (
        "kernel k: the static protocol check could not decide: threads 0-31 reads s bytes "
        f"896..1023 with a load at line {L('# ROW 7')}, which no write of the kernel covers "
        "(the writes of s cover its bytes 0..383) with the runtime loops run for n=3; that "
        "other trip counts write these bytes first was not proven")
