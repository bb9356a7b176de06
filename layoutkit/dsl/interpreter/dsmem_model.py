"""Distributed shared memory on the interpreter: which CTA's thread touched each shared byte of
a cluster's CTAs last, and whether a cluster barrier orders two accesses from different CTAs
(what lk.sm90.dsmem_load / dsmem_store check; their `interpret` facets are in
layoutkit.dsl.sm90.dsmem).

Across CTAs only `lk.sm90.cluster_sync()` (barrier.cluster arrive.release + wait.acquire)
orders memory here (the relaxed one, arrive.relaxed, only says that the peers have
started). A thread's epoch is the number of cluster barriers it has arrived at; an
access at epoch a by a thread of CTA A happened before an access at epoch b by a thread of CTA
B != A exactly when a < b (A's thread arrived at barrier a + 1 after its access, B's passed
barrier b >= a + 1 before its own). Each byte of each CTA remembers its last writer and last
reader (CTA rank, epoch, op); a conflicting pair (write/any, any/write) from two CTAs with no
barrier between is a RaceError at the second access, and a peer access before the first
cluster barrier (the peer may not have started) or after every thread of the peer exited is
an ExecutionError. Accesses within one CTA are the per-CTA detector's (happens_before.py).
Only the last reader of a byte is kept, as there: some write-after-read races between two
readers of other CTAs can go unseen; a reported race is always real.
"""
from __future__ import annotations

import numpy as np

from .errors import ExecutionError, RaceError
from .machine import location_text

EPOCH = "cluster_epoch"          # Thread.state key: ordering cluster barriers arrived at
STARTED = "cluster_started"      # Thread.state key: passed a cluster barrier (any kind)
STATE = "dsmem"                  # CTA.state key: its ClusterBytes


class ClusterBytes:
    """One CTA's shared bytes as seen from the cluster: last writer and reader (CTA rank, -1
    for none; the epoch of the access; the op)."""

    def __init__(self, nbytes: int):
        self.writer = np.full(nbytes, -1, dtype=np.int32)
        self.write_epoch = np.zeros(nbytes, dtype=np.int64)
        self.reader = np.full(nbytes, -1, dtype=np.int32)
        self.read_epoch = np.zeros(nbytes, dtype=np.int64)
        self.write_op = np.zeros(nbytes, dtype=np.int32)
        self.read_op = np.zeros(nbytes, dtype=np.int32)
        self.op_list: list = [None]
        self._index: dict = {}

    def access(self, thread, owner, start: int, nbytes: int, writes: bool, what: str,
               op) -> None:
        """Check and record an access by `thread` of bytes [start, start + nbytes) of `owner`
        (the CTA these bytes are of: the thread's own or a peer)."""
        me, epoch = rank_of(thread.cta), thread.state.get(EPOCH, 0)
        end = start + nbytes
        _check(self, self.writer, self.write_epoch, self.write_op, me, epoch, start, end,
               "wrote", what, writes, op, owner)
        if writes:
            _check(self, self.reader, self.read_epoch, self.read_op, me, epoch, start, end,
                   "read", what, writes, op, owner)
        index = self._index.setdefault(id(op), len(self.op_list))
        if index == len(self.op_list):
            self.op_list.append(op)
        if writes:
            self.writer[start:end], self.write_epoch[start:end] = me, epoch
            self.write_op[start:end] = index
            self.reader[start:end] = -1
        else:
            self.reader[start:end], self.read_epoch[start:end] = me, epoch
            self.read_op[start:end] = index


def enable(ctas) -> None:
    """Track the cluster's CTAs (a kernel that accesses a peer's shared memory)."""
    for cta in ctas:
        cta.state.setdefault(STATE, ClusterBytes(cta.shared.data.size))


def arrive(thread, orders: bool = True) -> None:
    """`thread` arrives at a cluster barrier: an ordering one (release/acquire: its later
    accesses are ordered after every access of the cluster before it) or, `orders` False, a
    relaxed one (the peers have started, nothing is ordered)."""
    thread.state[STARTED] = True
    if orders:
        thread.state[EPOCH] = thread.state.get(EPOCH, 0) + 1


def rank_of(cta) -> int:
    return cta.state["cluster_registers"]["cluster_ctarank"]


def peer(thread, rank, op, what: str):
    """The CTA of cluster rank `rank` (ExecutionError outside the cluster, before the first
    cluster barrier, or once the peer's threads have all exited)."""
    cluster = thread.cta.state.get("cluster_ctas") or [thread.cta]
    if not 0 <= rank < len(cluster):
        raise ExecutionError(f"{what} names cluster rank {rank}, outside the cluster's "
                             f"{len(cluster)} CTAs (ranks 0..{len(cluster) - 1})", op.location)
    target = cluster[rank]
    if target is not thread.cta:
        if not thread.state.get(STARTED):
            raise ExecutionError(
                f"{what} touches the shared memory of cluster rank {rank} before any "
                "lk.sm90.cluster_sync(): the peer CTA may not have started (its shared memory "
                "is not yet its own); call lk.sm90.cluster_sync() first", op.location)
        if all(t.done for t in target.threads):
            raise ExecutionError(
                f"{what} touches the shared memory of cluster rank {rank}, whose threads have "
                "all exited: end the exchange with lk.sm90.cluster_sync() so no CTA exits "
                "while a peer still accesses its shared memory", op.location)
    return target


def access(thread, owner, start: int, nbytes: int, writes: bool, what: str, op) -> None:
    """ClusterBytes.access on `owner`'s table, when the launch tracks it."""
    table = owner.state.get(STATE)
    if table is not None:
        table.access(thread, owner, start, nbytes, writes, what, op)


def _check(table, who, epochs, ops, me, epoch, start, end, done, what, writes, op,
           owner) -> None:
    others = who[start:end]
    racing = (others >= 0) & (others != me) & (epochs[start:end] >= epoch)
    if not racing.any():
        return
    at = int(np.flatnonzero(racing)[0])
    other_op = table.op_list[int(ops[start + at])]
    verb = "writes" if writes else "reads"
    raise RaceError(
        f"{what} (cluster rank {me}) {verb} shared byte {start + at} of cluster rank "
        f"{rank_of(owner)}, which a thread of cluster rank {int(others[at])} {done} "
        f"({location_text(other_op)}) with no lk.sm90.cluster_sync() between the two: across "
        "CTAs only the cluster barrier orders shared memory here; put one between the write "
        "and the read", op.location)


__all__ = ["ClusterBytes", "enable", "arrive", "peer", "access", "EPOCH"]
