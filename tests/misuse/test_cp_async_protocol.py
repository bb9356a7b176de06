"""Broken cp.async pipelines (sm_80 copies into shared memory in commit groups): reading the
destination before the lk.sm80.cp_async_wait that retires the copy's group, or before the
lk.barrier() that shows other threads' copies, is a ProtocolError of the static check (kind
cp.async, layoutkit.sync.async_copy_rules) with its exact text."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout

from ..dsl.source_lines import line_of
from .harness import check, diagnose

BF16 = lk.Pointer[lk.bf16]
ATOMS = lk.sm80.mma_sync_layouts("m16n8k16", lk.bf16, lk.f32)
TILE = Layout((16, 16), (16, 1))
# one warp copies a (16, 16) bf16 tile: lane (c, r) copies row r, columns 8c..8c+7 (16 bytes)
COPY = lk.TVLayout((16, 16), Layout(((2, 16), 8), ((128, 1), 16)))
# the same for two warps: warp 1's lanes name the same elements as warp 0's
COPY2 = lk.TVLayout((16, 16), Layout(((2, 16, 2), 8), ((128, 1, 0), 16)))


def L(marker: str) -> int:
    return line_of(__file__, marker)


def copy_kernel(commit=True, wait_before_read=False, barrier=True, ldmatrix=False):
    """Warp 0 copies a tile into shared memory by cp.async and reads it back; the flags make
    it wrong."""
    def k(a: BF16, c: BF16):
        s = lk.shared_tensor(TILE, lk.bf16, name="s")
        A, C = lk.global_tensor(a, TILE), lk.global_tensor(c, TILE)
        lk.sm80.cp_async(s.partition(COPY), A.partition(COPY))             # COPY
        if commit:
            lk.sm80.cp_async_commit()
        if wait_before_read:
            lk.sm80.cp_async_wait(0)                                       # WAIT
            if barrier:
                lk.barrier()
        if ldmatrix:
            frag = lk.sm80.ldmatrix(s.partition(ATOMS.a))                  # LDMATRIX
            lk.store(C.partition(ATOMS.a), frag)
        else:
            lk.store(C.partition(COPY), lk.load(s.partition(COPY)))   # READ
        lk.sm80.cp_async_wait(0)
    return k


def protocol_error(fn, num_warps=1):
    return diagnose(fn, BF16, BF16, error=lk.ProtocolError, num_warps=num_warps)


def test_correct_copies_pass():
    for ldmatrix in (False, True):
        lk.Kernel(copy_kernel(wait_before_read=True, ldmatrix=ldmatrix), 1).ir(BF16, BF16)


def test_read_of_a_cp_async_destination_before_its_wait():
    check(protocol_error(copy_kernel()), __file__, "# READ",
          "kernel k: the static protocol check found 1 error:\n  - cp.async: threads 0-31 reads s "
          f"bytes 0..511 at line {L('# READ')} while its cp.async at line {L('# COPY')} may still "
          "write them (no lk.sm80.cp_async_wait retires its commit group first): "
          "lk.sm80.cp_async_commit(), lk.sm80.cp_async_wait(n) for that group, then lk.barrier() "
          "before reading the destination")


def test_copy_never_committed_is_retired_by_no_wait():
    check(protocol_error(copy_kernel(commit=False, wait_before_read=True)), __file__, "# READ",
          "kernel k: the static protocol check found 1 error:\n  - cp.async: threads 0-31 reads s "
          f"bytes 0..511 at line {L('# READ')} while its cp.async at line {L('# COPY')} may still "
          "write them (its group is never committed before the read, so no lk.sm80.cp_async_wait "
          "retires it): lk.sm80.cp_async_commit(), lk.sm80.cp_async_wait(n) for that group, then "
          "lk.barrier() before reading the destination")


def test_ldmatrix_after_the_wait_without_a_barrier():
    check(protocol_error(copy_kernel(wait_before_read=True, barrier=False, ldmatrix=True)),
          __file__, "# LDMATRIX",
          "kernel k: the static protocol check found 1 error:\n"
          f"  - cp.async: threads 0-31 reads s bytes 0..511 at line {L('# LDMATRIX')} after its "
          f"lk.sm80.cp_async_wait at line {L('# WAIT')} but before any lk.barrier(): the wait "
          f"completes each thread's own copies only (the cp.async at line {L('# COPY')}), and "
          "the read is a warp's ldmatrix, whose lanes receive rows that other threads copied; "
          "lk.barrier() after lk.sm80.cp_async_wait, then read")


def test_own_partition_read_after_the_wait_without_a_barrier_is_a_warning():
    with pytest.warns(lk.ProtocolWarning) as record:
        lk.Kernel(copy_kernel(wait_before_read=True, barrier=False), 1).ir(BF16, BF16)
    assert [str(w.message) for w in record] == [
        "kernel k: the static protocol check could not decide: threads 0-31 reads s bytes "
        f"0..511 at line {L('# READ')} after its lk.sm80.cp_async_wait at line {L('# WAIT')} but "
        "before any lk.barrier(): the wait completes each thread's own copies only (the "
        f"cp.async at line {L('# COPY')}); that each thread reads only bytes it copied itself "
        "was not proven: lk.barrier() after lk.sm80.cp_async_wait if threads read each other's "
        "copies"]
    assert record[0].lineno == L("# READ")


def two_warps(wait=True, barrier=False):
    """Warp 0 copies a tile by cp.async, warp 1 reads it; the flags make it right or wrong."""
    def k(a: BF16, c: BF16):
        s = lk.shared_tensor(TILE, lk.bf16, name="s")
        A, C = lk.global_tensor(a, TILE), lk.global_tensor(c, TILE)
        with lk.if_(lk.eq(lk.warp_id(), 0)):
            lk.sm80.cp_async(s.partition(COPY2), A.partition(COPY2))       # WARP 0 COPY
            lk.sm80.cp_async_commit()
            if wait:
                lk.sm80.cp_async_wait(0)                                   # WARP 0 WAIT
        if barrier:
            lk.barrier()
        with lk.if_(lk.eq(lk.warp_id(), 1)):
            lk.store(C.partition(COPY2), lk.load(s.partition(COPY2)))  # WARP 1 READ
        lk.barrier()
    return k


def test_other_warp_reading_after_the_copiers_wait_and_a_barrier_passes():
    lk.Kernel(two_warps(barrier=True), 2).ir(BF16, BF16)


def test_other_warp_reads_a_copy_its_issuer_never_waits_for():
    check(protocol_error(two_warps(wait=False, barrier=True), num_warps=2), __file__,
          "# WARP 1 READ",
          "kernel k: the static protocol check found 1 error:\n"
          f"  - cp.async: threads 32-63 reads s bytes 0..511 at line {L('# WARP 1 READ')} while "
          f"threads 0-31's cp.async at line {L('# WARP 0 COPY')} may still write them (it never "
          "retires the copy with lk.sm80.cp_async_wait): the copying threads wait for their group, "
          "then lk.barrier(), then other threads read")


def test_other_warp_reads_before_the_barrier_after_the_copiers_wait():
    check(protocol_error(two_warps(), num_warps=2), __file__, "# WARP 1 READ",
          "kernel k: the static protocol check found 1 error:\n"
          f"  - cp.async: threads 32-63 reads s bytes 0..511 at line {L('# WARP 1 READ')} while "
          f"threads 0-31's cp.async at line {L('# WARP 0 COPY')} may still write them (it "
          f"retires the copy at line {L('# WARP 0 WAIT')}, but no lk.barrier() after that wait "
          "comes before the read): the copying threads wait for their group, then "
          "lk.barrier(), then other threads read")
