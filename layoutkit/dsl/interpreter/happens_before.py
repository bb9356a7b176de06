"""Happens-before race detection on shared memory, with vector clocks (per CTA).

Each thread has a vector clock; so does each asynchronous agent (the TMA copies completing on
one mbarrier: one agent per mbarrier of the kernel, named in `agents`). A completed barrier
phase joins its participants' clocks; an mbarrier arrive publishes the arriving thread's clock
into the barrier's phase and a wait that sees the phase complete takes it in (the families call
`release` / `acquire`). wgmma operand reads, TMA store source reads and cp.async writes are
recorded as the issuing thread's, at the wait that retires them. Each shared byte
remembers its last writer and last reader (thread or agent, and that one's clock at the
access). An access by thread t conflicts with an earlier one by u != t (write/any, any/write)
when t's clock has not yet seen u's clock at that access: nothing orders them, so the result
depends on timing, and that is a `RaceError` at the second access.

Only the last reader of a byte is kept, so some write-after-read races between concurrent
readers can go unseen; a reported race is always real (no false positives).
"""
from __future__ import annotations

import numpy as np

from ..core.ir import Op
from .errors import RaceError
from .machine import location_text

# A clock component every clock has seen: the last column of every clock row, which a byte's
# accessor -1 (nobody) indexes, so `clock[me][accessor] >= stamp` holds for unaccessed bytes.
_SEEN_BY_ALL = np.iinfo(np.int64).max


class CtaClocks:
    """The clocks of one CTA's threads and agents (a row each, one component per thread and
    agent, then the _SEEN_BY_ALL column), and its shared bytes' last accesses."""

    def __init__(self, threads: int, shared_bytes: int, agents: int = 0):
        size = threads + agents
        self.threads = threads
        self.clock = np.zeros((size, size + 1), dtype=np.int64)
        self.clock[np.arange(size), np.arange(size)] = 1
        self.clock[:, size] = _SEEN_BY_ALL
        self.rows = list(self.clock)        # views of the rows (the clock changes in place)
        # the accessors are intp: a row indexed by a slice of them gathers fastest
        self.writer = np.full(shared_bytes, -1, dtype=np.intp)
        self.write_clock = np.zeros(shared_bytes, dtype=np.int64)
        self.write_op = np.zeros(shared_bytes, dtype=np.int32)
        self.reader = np.full(shared_bytes, -1, dtype=np.intp)
        self.read_clock = np.zeros(shared_bytes, dtype=np.int64)
        self.read_op = np.zeros(shared_bytes, dtype=np.int32)

    def agent(self, index: int) -> int:
        return self.threads + index


class HappensBefore:
    """See the module docstring."""

    def __init__(self, agents: tuple = ()):
        self.ops: list[Op | None] = [None]
        self.op_index: dict[int, int] = {}
        self.agents = tuple(agents)          # names of the asynchronous agents, in row order

    def add_cta(self, cta) -> None:
        cta.state["hb"] = CtaClocks(len(cta.threads), cta.shared.data.size, len(self.agents))

    def agent_row(self, cta, index: int) -> int:
        """The clock row of agent `index` (of `agents`) in `cta`."""
        return cta.state["hb"].threads + index

    def _op(self, op: Op) -> int:
        index = self.op_index.get(id(op))
        if index is None:
            index = self.op_index[id(op)] = len(self.ops)
            self.ops.append(op)
        return index

    # ---- synchronization --------------------------------------------------------------------
    def synchronize(self, arrived, waiters) -> None:
        """A completed barrier phase of one CTA's threads: the waiters (bar.sync) have seen
        the past of every arriver (bar.sync or bar.arrive); every arriver's clock advances."""
        if not arrived:
            return
        clocks: CtaClocks = arrived[0].cta.state["hb"]
        rows = [t.tid for t in arrived]
        joined = clocks.clock[rows].max(axis=0)
        if waiters:
            clocks.clock[[t.tid for t in waiters]] = np.maximum(
                clocks.clock[[t.tid for t in waiters]], joined)
        clocks.clock[rows, rows] += 1

    def release(self, cta, who: int) -> np.ndarray:
        """The clock that `who` (a thread's tid or an agent's row) publishes now; its own
        component advances, so its later accesses are not covered."""
        clocks: CtaClocks = cta.state["hb"]
        published = clocks.clock[who].copy()
        clocks.clock[who, who] += 1
        return published

    def acquire(self, cta, who: int, published: np.ndarray) -> None:
        """`who` has seen everything `published` covers (a successful wait)."""
        clocks: CtaClocks = cta.state["hb"]
        np.maximum(clocks.clock[who], published, out=clocks.clock[who])

    # ---- accesses -----------------------------------------------------------------------------
    def access(self, thread, start: int, nbytes: int, writes: bool, what: str, op: Op,
               who: int | None = None, same=None) -> None:
        """Check and record an access of shared bytes [start, start + nbytes) by a thread
        (or by agent row `who`). `same` (writes): per byte, whether the write leaves the byte
        unchanged; such a write races with nobody (every order gives the same bytes) and does
        not replace an unordered earlier writer."""
        self.access_at(thread.cta, thread.tid if who is None else who, start, nbytes, writes,
                       what, op, same)

    def access_at(self, cta, me: int, start: int, nbytes: int, writes: bool, what: str, op: Op,
                  same=None, check: bool = True) -> None:
        """`access` by clock row `me` of `cta`; `check` False records without checking (a
        copy from another CTA, whose ordering this per-CTA detector cannot see)."""
        clocks: CtaClocks = cta.state["hb"]
        mine = clocks.rows[me]
        end = start + nbytes
        if not check:
            self._record(clocks, mine, me, start, end, writes, op, None)
            return
        benign = same if writes and same is not None else None
        # _check's common case first, here: every earlier accessor is in `mine`'s past
        unordered = None
        if 1 in np.less(mine[clocks.writer[start:end]], clocks.write_clock[start:end]).tobytes():
            unordered = self._check(clocks, mine, me, clocks.writer, clocks.write_clock,
                                    clocks.write_op, start, end, "wrote", what, writes, op,
                                    benign)
        index = self.op_index.get(id(op)) or self._op(op)
        if not writes:
            clocks.reader[start:end] = me
            clocks.read_clock[start:end] = mine[me]
            clocks.read_op[start:end] = index
            return
        if 1 in np.less(mine[clocks.reader[start:end]], clocks.read_clock[start:end]).tobytes():
            self._check(clocks, mine, me, clocks.reader, clocks.read_clock, clocks.read_op,
                        start, end, "read", what, writes, op, benign)
        if unordered is not None:
            self._record(clocks, mine, me, start, end, writes, op, unordered)
            return
        clocks.writer[start:end] = me           # _record's common case, here
        clocks.write_clock[start:end] = mine[me]
        clocks.write_op[start:end] = index
        clocks.reader[start:end] = -1

    def _record(self, clocks: CtaClocks, mine, me: int, start: int, end: int, writes: bool,
                op: Op, unordered) -> None:
        if not writes:
            clocks.reader[start:end] = me
            clocks.read_clock[start:end] = mine[me]
            clocks.read_op[start:end] = self._op(op)
            return
        if unordered is not None:          # unchanged bytes keep their unordered writer
            keep = np.flatnonzero(unordered) + start
            saved = clocks.writer[keep], clocks.write_clock[keep], clocks.write_op[keep]
        clocks.writer[start:end] = me
        clocks.write_clock[start:end] = mine[me]
        clocks.write_op[start:end] = self._op(op)
        clocks.reader[start:end] = -1
        if unordered is not None:
            clocks.writer[keep], clocks.write_clock[keep], clocks.write_op[keep] = saved

    def _check(self, clocks: CtaClocks, mine, me: int, owner, stamp, ops, start: int, end: int,
               done: str, what: str, writes: bool, op: Op, benign):
        """Raise on the first racing byte; returns the mask of unordered but benign bytes
        (or None when there are none)."""
        others = owner[start:end]
        # the common case first: every earlier accessor's access is in `mine`'s past (a
        # thread has seen its own accesses, and every clock has seen nobody's: -1)
        if 1 not in np.less(mine[others], stamp[start:end]).tobytes():
            return None
        seen = mine[np.maximum(others, 0)]
        racing = (others >= 0) & (others != me) & (seen < stamp[start:end])
        if not racing.any():
            return None
        if benign is not None:
            harmless = racing & benign
            racing = racing & ~benign
            if not racing.any():
                return harmless
        at = int(np.flatnonzero(racing)[0])
        other = int(others[at])
        who = f"thread {other}" if other < clocks.threads else \
            self.agents[other - clocks.threads]
        other_op = self.ops[int(ops[start + at])]
        verb = "writes" if writes else "reads"
        if me >= clocks.threads and other < clocks.threads:
            # an asynchronous copy landing on a thread's unordered access: the thread's access
            # is the mistake (the copy was issued properly), so the error points at it
            raise RaceError(
                f"thread {other} {'writes' if done == 'wrote' else 'reads'} shared byte "
                f"{start + at} "
                f"({location_text(other_op)}) that {what} ({location_text(op)}) {verb} with "
                "nothing ordering the two (no wait on the copy's mbarrier before the access): "
                "the result depends on timing; wait on the barrier first", other_op.location)
        raise RaceError(
            f"{what} {verb} shared byte {start + at}, which {who} {done} "
            f"({location_text(other_op)}) with nothing ordering the two accesses (no barrier, "
            "no mbarrier wait in between): the result depends on timing; synchronize them "
            "(lk.barrier(), or an mbarrier arrive/wait)", op.location)


__all__ = ["HappensBefore", "CtaClocks"]
