"""Broken mbarrier rings (one producer warpgroup storing into a 2-slot ring, one consumer
warpgroup reading it): each is a ProtocolError of the static check, with its exact text."""
import math

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout

from ..dsl.source_lines import line_of
from .harness import I32, check, diagnose

STAGES = 2
SLOT = lk.TVLayout((128,), Layout(((128, 2), 1), ((1, 0), 0)))   # 256 threads, element t % 128


def L(marker: str) -> int:
    return line_of(__file__, marker)


def ring(full_count=128, empty_count=128, stages=STAGES):
    full = lk.sm90.mbarrier_array(stages, full_count, name="full")
    empty = lk.sm90.mbarrier_array(stages, empty_count, name="empty")
    slots = lk.shared_tensor(Layout((128, stages)), lk.i32, name="slots")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full, empty)                                 # INIT
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return full, empty, slots


def fill(slots, stage, k):
    mine = slots.tile((128,), (0, stage)).partition(SLOT)
    lk.store(mine, lk.full(SLOT, 0, lk.i32) + lk.cast(k, lk.i32))     # FILL


def read(slots, stage):
    return lk.load(slots.tile((128,), (0, stage)).partition(SLOT))    # READ


def protocol_error(fn):
    return diagnose(fn, I32, 8, error=lk.ProtocolError, num_warps=8)


def test_producer_starting_at_phase_0_deadlocks():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            for i in lk.range(0, n):                                  # P0 LOOP
                p = lk.sm90.consumer_state(i, STAGES)                    # the bug: consumer's start
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)             # P0 WAIT
                fill(slots, p.stage, i)
                lk.sm90.mbarrier_arrive(full[p.stage])
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for i in lk.range(0, n):                                  # P0 LOOP 2
                c = lk.sm90.consumer_state(i, STAGES)
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)              # P0 CONSUMER
                read(slots, c.stage)
                lk.sm90.mbarrier_arrive(empty[c.stage])
    check(protocol_error(k), __file__, "# P0 WAIT",
          "kernel k: the static protocol check found 1 error (runtime loops checked with n=5):\n"
          "  - deadlock: every thread class left is blocked forever:\n"
          f"      role 'producer' (threads 0-127) waits on empty[0] for parity 0 at line "
          f"{L('# P0 WAIT')} (iteration 0 of the lk.range at line {L('# P0 LOOP')}): "
          "it completed 0 phase(s); phase 0 has 0 of 128 arrivals (none) and 0 transaction "
          "bytes outstanding; this is the role's first wait on a free slot it then fills: a "
          "fresh barrier passes parity 1 (its phase -1), so the producer starts at phase 1 "
          "(lk.sm90.producer_state)\n"
          f"      role 'consumer' (threads 128-255) waits on full[0] for parity 0 at line "
          f"{L('# P0 CONSUMER')} (iteration 0 of the lk.range at line {L('# P0 LOOP 2')}): "
          "it completed 0 phase(s); phase 0 has 0 of 128 arrivals (none) and 0 transaction bytes "
          "outstanding")


def producer(full, empty, slots, n, state=lk.sm90.producer_state, trips=None):
    for i in lk.range(0, n if trips is None else trips):              # PRODUCER LOOP
        p = state(i, STAGES)
        lk.sm90.mbarrier_wait(empty[p.stage], p.phase)                     # PRODUCER WAIT
        fill(slots, p.stage, i)
        lk.sm90.mbarrier_arrive(full[p.stage])                             # PRODUCER ARRIVE


def consumer(full, empty, slots, n, release=True):
    for i in lk.range(0, n):                                          # CONSUMER LOOP
        c = lk.sm90.consumer_state(i, STAGES)
        lk.sm90.mbarrier_wait(full[c.stage], c.phase)                      # CONSUMER WAIT
        read(slots, c.stage)
        if release:
            lk.sm90.mbarrier_arrive(empty[c.stage])                        # CONSUMER RELEASE


def test_consumer_starting_at_phase_1_reads_before_the_fill():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for i in lk.range(0, n):  # M1
                c = lk.sm90.producer_state(i, STAGES)                    # the bug: producer's start
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)              # RACE WAIT
                read(slots, c.stage)
                lk.sm90.mbarrier_arrive(empty[c.stage])
    check(protocol_error(k), __file__, "# RACE WAIT",
          "kernel k: the static protocol check found 2 errors (runtime loops checked with "
          "n=5):\n "
          " - race: role 'consumer' (threads 128-255) waits on full[0] for parity 1 at line "
          f"{L('# RACE WAIT')} (iteration 0 of the lk.range at line {L('# M1')}), which passes "
          "at once on the fresh barrier (its phase -1 has parity 1), so its read of slots "
          f"bytes 0..511 at line {L('# READ')} (iteration 0 of the lk.range at line "
          f"{L('# M1')}) can run before role 'producer' (threads 0-127) writes them (line "
          f"{L('# FILL')} (iteration 0 of the lk.range at line {L('# PRODUCER LOOP')}), "
          "completing on full[0]); a first wait for data uses parity 0 (lk.sm90.consumer_state)\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[0] for parity 1 at line "
          f"{L('# PRODUCER WAIT')} (iteration 0 of the lk.range at line "
          f"{L('# PRODUCER LOOP')}): it completed 1 phase(s); phase 1 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 0 at line "
          f"{L('# RACE WAIT')} (iteration 2 of the lk.range at line {L('# M1')}): it completed "
          "0 phase(s); phase 0 has 0 of 128 arrivals (none) and 0 transaction bytes outstanding")


def test_phase_that_flips_every_slot_instead_of_every_lap():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for i in lk.range(0, n):  # M2
                lk.sm90.mbarrier_wait(full[i % STAGES], i % 2)             # FLIP WAIT
                read(slots, i % STAGES)
                lk.sm90.mbarrier_arrive(empty[i % STAGES])
    check(protocol_error(k), __file__, "# FLIP WAIT",
          "kernel k: the static protocol check found 2 errors (runtime loops checked with "
          "n=5):\n "
          " - wrong parity: role 'consumer' (threads 128-255) waits on full[0] for parity 0 at "
          f"line {L('# FLIP WAIT')} (iteration 2 of the lk.range at line {L('# M2')}), the "
          f"parity of its previous wait on it at line {L('# FLIP WAIT')} (iteration 0 of the "
          f"lk.range at line {L('# M2')}), with arrivals of its own in between: each wait on a "
          "barrier is for its next phase, so the parities alternate; take stage and phase from "
          "one ring state over a counter that advances once per slot use (lk.sm90.producer_state / "
          "lk.sm90.consumer_state(counter, STAGES))\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[1] for parity 0 at line "
          f"{L('# PRODUCER WAIT')} (iteration 3 of the lk.range at line "
          f"{L('# PRODUCER LOOP')}): it completed 0 phase(s); phase 0 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[1] for parity 1 at line "
          f"{L('# FLIP WAIT')} (iteration 1 of the lk.range at line {L('# M2')}): it completed "
          "1 phase(s); phase 1 has 0 of 128 arrivals (none) and 0 transaction bytes outstanding")


def test_empty_count_smaller_than_the_consumers():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring(empty_count=64)
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            consumer(full, empty, slots, n)
    check(protocol_error(k), __file__, "# CONSUMER RELEASE",
          "kernel k: the static protocol check found 2 errors (runtime loops checked with "
          "n=5):\n "
          " - arrive count: role 'consumer' (threads 128-255) arrives 128 time(s) on empty[0] "
          f"at line {L('# CONSUMER RELEASE')} (iteration 0 of the lk.range at line "
          f"{L('# CONSUMER LOOP')}), but its phase 0 expects only 64 more (init count 64 at "
          f"line {L('# INIT')}; arrivals so far: none): the phase completes early and the rest "
          "counts toward the next one; elect one thread (lk.sm90.elect_one) or init the array with "
          "the number of threads that arrive per phase\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[0] for parity 0 at line "
          f"{L('# PRODUCER WAIT')} (iteration 2 of the lk.range at line "
          f"{L('# PRODUCER LOOP')}): it completed 2 phase(s); phase 2 has 0 of 64 arrivals "
          "(none) and 0 transaction bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 1 at line "
          f"{L('# CONSUMER WAIT')} (iteration 2 of the lk.range at line "
          f"{L('# CONSUMER LOOP')}): it completed 1 phase(s); phase 1 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding")


def test_empty_count_larger_than_the_consumers():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring(empty_count=256)
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            consumer(full, empty, slots, n)
    check(protocol_error(k), __file__, "# CONSUMER RELEASE",
          "kernel k: the static protocol check found 2 errors (runtime loops checked with "
          "n=5):\n "
          " - arrive count: phase 0 of empty[1] ends with 128 of its 256 arrivals (128 from "
          f"role 'consumer' (threads 128-255) at line {L('# CONSUMER RELEASE')} (iteration 1 of "
          f"the lk.range at line {L('# CONSUMER LOOP')}); init count 256 at line "
          f"{L('# INIT')}): the threads that arrive per phase must number its arrive count\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[0] for parity 0 at line "
          f"{L('# PRODUCER WAIT')} (iteration 2 of the lk.range at line "
          f"{L('# PRODUCER LOOP')}): it completed 0 phase(s); phase 0 has 128 of 256 arrivals "
          f"(128 from role 'consumer' (threads 128-255) at line {L('# CONSUMER RELEASE')} "
          f"(iteration 0 of the lk.range at line {L('# CONSUMER LOOP')})) and 0 transaction "
          "bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 1 at line "
          f"{L('# CONSUMER WAIT')} (iteration 2 of the lk.range at line "
          f"{L('# CONSUMER LOOP')}): it completed 1 phase(s); phase 1 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding")


def test_consumer_that_never_releases_a_slot():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            consumer(full, empty, slots, n, release=False)
    check(protocol_error(k), __file__, "# PRODUCER WAIT",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "n=5):\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[0] for parity 0 at line "
          f"{L('# PRODUCER WAIT')} (iteration 2 of the lk.range at line "
          f"{L('# PRODUCER LOOP')}): it completed 0 phase(s); phase 0 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 1 at line "
          f"{L('# CONSUMER WAIT')} (iteration 2 of the lk.range at line "
          f"{L('# CONSUMER LOOP')}): it completed 1 phase(s); phase 1 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding")


def test_producer_one_round_short():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n, trips=n - 1)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            consumer(full, empty, slots, n)
    check(protocol_error(k), __file__, "# CONSUMER WAIT",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "n=6):\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'consumer' (threads 128-255) waits on full[1] for parity 0 at line "
          f"{L('# CONSUMER WAIT')} (iteration 5 of the lk.range at line "
          f"{L('# CONSUMER LOOP')}): it completed 2 phase(s); phase 2 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding")


def test_consumer_counter_one_ahead_of_the_producer():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for i in lk.range(0, n):  # M3
                c = lk.sm90.consumer_state(i + 1, STAGES)                  # AHEAD
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)              # AHEAD WAIT
                read(slots, c.stage)
                lk.sm90.mbarrier_arrive(empty[c.stage])
    check(protocol_error(k), __file__, "# PRODUCER WAIT",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "n=5):\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[0] for parity 0 at line "
          f"{L('# PRODUCER WAIT')} (iteration 2 of the lk.range at line "
          f"{L('# PRODUCER LOOP')}): it completed 0 phase(s); phase 0 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 1 at line "
          f"{L('# AHEAD WAIT')} (iteration 1 of the lk.range at line {L('# M3')}): it completed "
          "1 phase(s); phase 1 has 0 of 128 arrivals (none) and 0 transaction bytes outstanding")


def test_producer_arriving_twice_per_slot():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            for i in lk.range(0, n):  # M4
                p = lk.sm90.producer_state(i, STAGES)
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)  # M5
                fill(slots, p.stage, i)
                lk.sm90.mbarrier_arrive(full[p.stage])
                lk.sm90.mbarrier_arrive(full[p.stage])                     # TWICE
        with lk.sm90.warp_role("consumer", warpgroups=1):
            consumer(full, empty, slots, n)
    check(protocol_error(k), __file__, "# TWICE",
          "kernel k: the static protocol check found 2 errors (runtime loops checked with "
          "n=5):\n "
          " - arrive count: role 'producer' (threads 0-127) completes phase 1 of full[0] at "
          f"line {L('# TWICE')} (iteration 0 of the lk.range at line {L('# M4')}) before any "
          "wait passed its phase 0 (this phase's arrivals: 128 from role 'producer' (threads "
          f"0-127) at line {L('# TWICE')} (iteration 0 of the lk.range at line {L('# M4')})): "
          "its arrivals run ahead of its waiters - more arrivals per use of the slot than its "
          f"init count 128 (line {L('# INIT')}), or an arrive with no wait before it\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[0] for parity 0 at line "
          f"{L('# M5')} (iteration 2 of the lk.range at line {L('# M4')}): it completed 0 "
          "phase(s); phase 0 has 0 of 128 arrivals (none) and 0 transaction bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 0 at line "
          f"{L('# CONSUMER WAIT')} (iteration 0 of the lk.range at line "
          f"{L('# CONSUMER LOOP')}): it completed 2 phase(s); phase 2 has 0 of 128 arrivals "
          "(none) and 0 transaction bytes outstanding")


def test_stage_outside_the_array_at_run_time():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for i in lk.range(0, n):  # M6
                c = lk.sm90.consumer_state(i, STAGES)
                lk.sm90.mbarrier_wait(full[c.stage], c.phase)
                read(slots, c.stage)
                lk.sm90.mbarrier_arrive(empty[i % 3])                      # STAGE 3
    check(protocol_error(k), __file__, "# STAGE 3",
          "kernel k: the static protocol check found 1 error (runtime loops checked with "
          "n=5):\n "
          f" - stage: empty[2] at line {L('# STAGE 3')} (iteration 2 of the lk.range at line "
          f"{L('# M6')}) is outside the array 'empty' of 2 barrier(s); the stage must be in 0..1")


def test_barriers_used_without_a_barrier_after_their_init():
    def k(out: I32, n: lk.i32):
        full = lk.sm90.mbarrier_array(STAGES, 128, name="full")
        empty = lk.sm90.mbarrier_array(STAGES, 128, name="empty")
        slots = lk.shared_tensor(Layout((128, STAGES)), lk.i32, name="slots")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full, empty)                             # NO BARRIER
            lk.sm90.fence_mbarrier_init()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            consumer(full, empty, slots, n)
    check(protocol_error(k), __file__, "# PRODUCER WAIT",
          "kernel k: the static protocol check found 2 errors (runtime loops checked with "
          "n=5):\n  - init: role 'producer' (threads 0-127) uses empty[0] at line "
          f"{L('# PRODUCER WAIT')} (iteration 0 of the lk.range at line {L('# PRODUCER LOOP')}) "
          f"before the initialisation at line {L('# NO BARRIER')} is visible to it: after "
          "lk.sm90.mbarrier_init and lk.sm90.fence_mbarrier_init(), every thread passes "
          "lk.barrier() (or lk.sm90.cluster_sync()) before using the barrier\n  - init: role "
          f"'producer' (threads 0-127) uses full[0] at line {L('# PRODUCER ARRIVE')} (iteration 0 "
          f"of the lk.range at line {L('# PRODUCER LOOP')}) before the initialisation at line "
          f"{L('# NO BARRIER')} is visible to it: after lk.sm90.mbarrier_init and "
          "lk.sm90.fence_mbarrier_init(), every thread passes lk.barrier() (or "
          "lk.sm90.cluster_sync()) before using the barrier")


def test_producer_ring_restarting_every_tile():
    def k(out: I32, tiles: lk.i32, k_tiles: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            for t in lk.range(0, tiles):  # M8
                for i in lk.range(0, k_tiles):  # M7
                    p = lk.sm90.producer_state(i, STAGES)                  # RESTART
                    lk.sm90.mbarrier_wait(empty[p.stage], p.phase)         # RESTART WAIT
                    fill(slots, p.stage, i)
                    lk.sm90.mbarrier_arrive(full[p.stage])  # M9
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for t in lk.range(0, tiles):  # M12
                for i in lk.range(0, k_tiles):  # M11
                    c = lk.sm90.consumer_state(t * k_tiles + i, STAGES)
                    lk.sm90.mbarrier_wait(full[c.stage], c.phase)  # M10
                    read(slots, c.stage)
                    lk.sm90.mbarrier_arrive(empty[c.stage])
    err = diagnose(k, I32, 8, 8, error=lk.ProtocolError, num_warps=8)
    check(err, __file__, "# RESTART WAIT",
          "kernel k: the static protocol check found 3 errors (runtime loops checked with "
          "tiles=3, k_tiles=5):\n "
          " - wrong parity: role 'producer' (threads 0-127) waits on empty[0] for parity 1 at "
          f"line {L('# RESTART WAIT')} (iteration 0 of the lk.range at line {L('# M7')}, "
          f"iteration 1 of the lk.range at line {L('# M8')}), the parity of its previous wait "
          f"on it at line {L('# RESTART WAIT')} (iteration 4 of the lk.range at line "
          f"{L('# M7')}, iteration 0 of the lk.range at line {L('# M8')}), with arrivals of its "
          "own in between: each wait on a barrier is for its next phase, so the parities "
          "alternate; take stage and phase from one ring state over a counter that advances "
          "once per slot use (lk.sm90.producer_state / lk.sm90.consumer_state(counter, STAGES))\n "
          " - arrive count: role 'producer' (threads 0-127) completes phase 3 of full[0] at "
          f"line {L('# M9')} (iteration 0 of the lk.range at line {L('# M7')}, iteration 1 of "
          f"the lk.range at line {L('# M8')}) before any wait passed its phase 2 (this phase's "
          f"arrivals: 128 from role 'producer' (threads 0-127) at line {L('# M9')} (iteration 0 "
          f"of the lk.range at line {L('# M7')}, iteration 1 of the lk.range at line "
          f"{L('# M8')})): its arrivals run ahead of its waiters - more arrivals per use of the "
          f"slot than its init count 128 (line {L('# INIT')}), or an arrive with no wait before "
          "it\n "
          " - deadlock: every thread class left is blocked forever:\n "
          "     role 'producer' (threads 0-127) waits on empty[0] for parity 0 at line "
          f"{L('# RESTART WAIT')} (iteration 2 of the lk.range at line {L('# M7')}, iteration 1 "
          f"of the lk.range at line {L('# M8')}): it completed 2 phase(s); phase 2 has 0 of 128 "
          "arrivals (none) and 0 transaction bytes outstanding\n "
          "     role 'consumer' (threads 128-255) waits on full[0] for parity 0 at line "
          f"{L('# M10')} (iteration 4 of the lk.range at line {L('# M11')}, iteration 0 of the "
          f"lk.range at line {L('# M12')}): it completed 4 phase(s); phase 4 has 0 of 128 "
          "arrivals (none) and 0 transaction bytes outstanding")


def test_consumer_reading_without_waiting_on_full():
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring()
        with lk.sm90.warp_role("producer", warpgroups=0):
            producer(full, empty, slots, n)
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for i in lk.range(0, n):                                  # NO WAIT LOOP
                c = lk.sm90.consumer_state(i, STAGES)
                read(slots, c.stage)
                lk.sm90.mbarrier_arrive(empty[c.stage])                    # NO WAIT RELEASE
    check(protocol_error(k), __file__, "# READ",
          "kernel k: the static protocol check found 3 errors (runtime loops checked with "
          "n=5):\n  - race: role 'consumer' (threads 128-255) reads slots bytes 0..511 at line "
          f"{L('# READ')} (iteration 0 of the lk.range at line {L('# NO WAIT LOOP')}), which role "
          f"'producer' (threads 0-127) writes (line {L('# FILL')} (iteration 0 of the lk.range at "
          f"line {L('# PRODUCER LOOP')})) and publishes on full[0], but it never waits on 'full': "
          "the read can run before the data lands; wait on the barrier that completes when the "
          "data is ready\n  - arrive count: role 'consumer' (threads 128-255) completes phase 1 "
          f"of empty[0] at line {L('# NO WAIT RELEASE')} (iteration 2 of the lk.range at line "
          f"{L('# NO WAIT LOOP')}) before any wait passed its phase 0 (this phase's arrivals: 128 "
          f"from role 'consumer' (threads 128-255) at line {L('# NO WAIT RELEASE')} (iteration 2 "
          f"of the lk.range at line {L('# NO WAIT LOOP')})): its arrivals run ahead of its waiters "
          f"- more arrivals per use of the slot than its init count 128 (line {L('# INIT')}), or "
          "an arrive with no wait before it\n  - deadlock: every thread class left is blocked "
          "forever:\n      role 'producer' (threads 0-127) waits on empty[0] for parity 1 at line "
          f"{L('# PRODUCER WAIT')} (iteration 0 of the lk.range at line {L('# PRODUCER LOOP')}): "
          "it completed 3 phase(s); phase 3 has 0 of 128 arrivals (none) and 0 transaction bytes "
          "outstanding")


def _ring_taken(per_trip=2, stages=4, bad_counter=None):
    """A `stages`-slot ring whose consumer takes `per_trip` slots a trip (the swapped GEMM's
    shape: a trip that takes c stages repeats after 2 * STAGES / gcd(c, 2 * STAGES) trips, so
    the check walks fewer trips); with `bad_counter`, its wait at that ring counter only asks
    for the wrong parity."""
    def k(out: I32, n: lk.i32):
        full, empty, slots = ring(stages=stages)
        with lk.sm90.warp_role("producer", warpgroups=0):
            for i in lk.range(0, per_trip * n):
                p = lk.sm90.producer_state(i, stages)
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                fill(slots, p.stage, i)
                lk.sm90.mbarrier_arrive(full[p.stage])
        with lk.sm90.warp_role("consumer", warpgroups=1):
            for g in lk.range(0, n):                                  # TWO-SLOT LOOP
                for part in range(per_trip):
                    c = lk.sm90.consumer_state(per_trip * g + part, stages)
                    phase = c.phase
                    if bad_counter is not None and part == bad_counter % per_trip:
                        b = bad_counter // per_trip   # 1 at trip b, 0 elsewhere (g >= 0)
                        bad = lk.minimum(lk.maximum(g - b + 1, 0), 1) - \
                            lk.minimum(lk.maximum(g - b, 0), 1)
                        phase = (c.phase + bad) % 2
                    lk.sm90.mbarrier_wait(full[c.stage], phase)           # TWO-SLOT WAIT
                    read(slots, c.stage)
                    lk.sm90.mbarrier_arrive(empty[c.stage])
    return k


def test_a_ring_taken_two_slots_a_trip_is_walked_through_its_period():
    """Correct, it passes; a wrong parity only at ring counter 7 (stage 3's second phase, in
    the fourth trip: the last of the period the check walks) is still found."""
    lk.Kernel(_ring_taken(), 8).ptx(I32, 8)
    err = protocol_error(_ring_taken(bad_counter=7))
    assert "(runtime loops checked with n=5)" in err.message, err.message   # 4 trips + 1
    assert "full[3]" in err.message, err.message
    assert err.location.line == L("# TWO-SLOT WAIT"), (err.location, err.message)


@pytest.mark.parametrize("per_trip, stages", [(1, 2), (1, 4), (2, 3), (2, 4), (3, 5), (4, 4),
                                              (3, 3), (2, 8)])
def test_the_walk_covers_each_loops_ring_period(per_trip, stages):
    """The trips the check walks (layoutkit/dsl/check/extract.py's docstring): the consumer's
    loop wants its ring period + 1, 2S / gcd(c, 2S) + 1 trips; the producer's, one slot a trip
    over c * n, 2S + 1; both at least 3; n is the least value that gives both theirs."""
    from layoutkit.dsl.check.extract import Extractor
    period = 2 * stages // math.gcd(per_trip, 2 * stages)
    want = max(period + 1, -(-(2 * stages + 1) // per_trip), 3)
    walk = Extractor(lk.Kernel(_ring_taken(per_trip, stages), 8).ir(I32, 8))
    chosen = {walk.params[v]: walk.values.fixed[v] for v in walk.searched}
    assert chosen == {"n": want}, (chosen, want)
