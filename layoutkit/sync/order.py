"""Happens-before between the events of a checked kernel's thread classes, from the run that
kernel_check's Simulation found (its steps in order, the phase each arrive and copy went into,
the generation of each thread-barrier arrival).

A class's knowledge at an event is a vector clock: for every class, the last of its events
that happened before (its own: the event itself), and for every barrier slot, the last phase
known complete (-1 for all: a fresh barrier's phase -1). It grows where the class synchronizes:

- a wait that passes on phase q of a slot joins the knowledge of every arrive into that slot's
  phases 0..q and of the issue of every copy completing there (PTX ISA "mbarrier": the phase
  completes after them, the wait observes the completion), and knows phases 0..q complete;
- a thread barrier (bar.sync, lk.barrier(), lk.sm90.cluster_sync(), a named barrier) joins the
  knowledge of every thread that arrived in that generation; bar.arrive gives without taking;
  a relaxed cluster barrier (lk.sm90.cluster_sync(relaxed=True)) neither gives nor takes.

So "X happened before event e of class c" is one comparison, and, since knowledge only grows
along a class's events, "the first event of class c that knows X" one bisection.

>>> from layoutkit.sync import kernel_model as km
>>> from layoutkit.sync.kernel_check import Simulation
>>> site = km.Site(None)
>>> producer = km.ThreadClass("producer", 0, (0,), [km.Init("full", 0, site),
...     km.Arrive("full", 0, 0, 1, site, expect=True, tx_bytes=16),
...     km.Copy("full", 0, (0,), 16, None, site)])
>>> consumer = km.ThreadClass("consumer", 0, (1,), [km.SharedRead(None, "generic", site),
...     km.Wait("full", 0, 0, 0, site), km.SharedRead(None, "generic", site)])
>>> sim = Simulation(km.KernelProtocol("k", {"full": km.BarrierDecl("full", 1, 1, site)},
...                                    [producer, consumer]))
>>> sim.run()
>>> hb = Order(sim.p, sim)
>>> hb.seen(1, 2, 0), hb.knows(1, 2, (0, "full", 0), 0), hb.knows(1, 0, (0, "full", 0), 0)
(2, True, False)
>>> hb.first_knowing(1, (0, "full", 0), 0), hb.first_seeing(0, 1, 0)
(2, 3)
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from .kernel_model import Arrive, Copy, ThreadBarrier, Wait


def _join(a: list, b: list) -> list:
    return [x if x >= y else y for x, y in zip(a, b)]


class Order:
    """Happens-before over `protocol`'s classes given the run of `sim` (module docstring).

    Positions are event indices in a class's `events`; a class that never learns something
    "learns" it at len(events) (after its end)."""

    def __init__(self, protocol, sim):
        classes = protocol.classes
        self.n = n = len(classes)
        self.lengths = [len(c.events) for c in classes]
        self.columns: dict[tuple, list] = {}      # (class, entry) -> that entry of its clocks
        self.slot_index = {key: n + k for k, key in enumerate(sim.slots)}
        width = n + len(self.slot_index)
        start = [-1] * width
        current = [start] * n
        # per class: positions where its knowledge changed (from that event on) and the clocks
        self.starts: list[list[int]] = [[0] for _ in range(n)]
        self.clocks: list[list[list]] = [[start] for _ in range(n)]
        # per slot index: ([phase, ...], [knowledge of every arrive/copy into phases <= it],
        # [{class: the knowledge of it last joined there}]: a class's next arrive or copy into
        # the same phase with no new knowledge in between only raises its own entry)
        published: dict[int, tuple] = {}
        gathered: dict[tuple, list] = {}      # thread-barrier generation -> joined knowledge
        members: dict[tuple, list] = {}       # generation -> [(class, event)] that arrived
        for where, round_ in sim.rounds.items():
            members.setdefault(round_, []).append(where)
        given: dict[tuple, list] = {}         # bar.arrive (class, event) -> its knowledge

        def publish(slot_key, phase: int, i: int, position: int) -> None:
            k = self.slot_index.get(slot_key)
            if k is None or phase is None:
                return
            phases, known, sources = published.setdefault(k, ([], [], []))
            if phases and phases[-1] == phase:
                if sources[-1].get(i) is current[i]:
                    if known[-1][i] < position:
                        known[-1][i] = position
                    return
                joined = _join(known[-1], current[i])     # own(i, position), one copy less
                if joined[i] < position:                  # (a class's own entry stays -1)
                    joined[i] = position
                known[-1] = joined
                sources[-1][i] = current[i]
            elif phases and phases[-1] > phase:          # an arrival into an older phase
                clock = own(i, position)
                for at, p in enumerate(phases):
                    if p >= phase:
                        known[at] = _join(known[at], clock)
                        sources[at] = {}
            else:
                clock = own(i, position)
                phases.append(phase)
                known.append(_join(known[-1], clock) if known else clock)
                sources.append({i: current[i]})

        def learn(i: int, position: int, clock: list) -> None:
            current[i] = clock
            self.starts[i].append(position)
            self.clocks[i].append(clock)

        def own(i: int, position: int) -> list:
            clock = list(current[i])
            clock[i] = position
            return clock

        phase_of, passes = sim.phase_of, sim.passes
        events = [c.events for c in classes]
        for i, position in sim.order:
            e = events[i][position]
            kind = type(e)
            if kind is Arrive:
                publish(e.slot, phase_of.get((i, position)), i, position)
            elif kind is Copy:
                for cta in e.ctas:
                    publish(e.slot(cta), phase_of.get(((i, position), cta)), i, position)
            elif kind is Wait:
                k = self.slot_index.get(e.slot)
                phase = passes.get((i, position))
                if k is None or phase is None:
                    continue
                phases, known, _ = published.get(k, ((), (), ()))
                at = bisect_right(phases, phase) - 1
                clock = _join(current[i], known[at]) if at >= 0 else list(current[i])
                if clock[k] < phase:
                    clock[k] = phase
                clock[i] = -1
                learn(i, position + 1, clock)
            elif kind is ThreadBarrier:
                round_ = sim.rounds.get((i, position))
                if round_ is None or not e.orders:      # a relaxed rendezvous: no knowledge
                    continue
                if not e.waits:
                    given[(i, position)] = own(i, position)
                    continue
                joined = gathered.get(round_)
                if joined is None:
                    joined = list(start)
                    for j, at in members.get(round_, ()):
                        theirs = given.get((j, at))
                        if theirs is None:
                            theirs = list(current[j])
                            theirs[j] = at
                        joined = _join(joined, theirs)
                    gathered[round_] = joined
                clock = _join(current[i], joined)
                clock[i] = -1
                learn(i, position + 1, clock)

    # ---- queries ------------------------------------------------------------------------------
    def clock(self, i: int, position: int) -> list:
        """Class i's knowledge at its event `position` (its own entry not filled in)."""
        return self.clocks[i][bisect_right(self.starts[i], position) - 1]

    def seen(self, i: int, position: int, j: int) -> int:
        """The last event of class j that happened before event `position` of class i (-1:
        none)."""
        if i == j:
            return position
        return self.clock(i, position)[j]

    def knows(self, i: int, position: int, slot, phase: int) -> bool:
        """Whether phase `phase` of barrier `slot` completed before event `position` of i."""
        k = self.slot_index.get(slot)
        return k is not None and self.clock(i, position)[k] >= phase

    def _first(self, i: int, column: int, value: int) -> int:
        values = self.columns.get((i, column))
        if values is None:            # non-decreasing along the class: bisect it
            values = self.columns[(i, column)] = [c[column] for c in self.clocks[i]]
        at = bisect_left(values, value)
        return self.starts[i][at] if at < len(values) else self.lengths[i]

    def first_knowing(self, i: int, slot, phase: int) -> int:
        """The first event of class i that knows phase `phase` of `slot` complete."""
        k = self.slot_index.get(slot)
        return self.lengths[i] if k is None else self._first(i, k, phase)

    def first_seeing(self, i: int, j: int, position: int) -> int:
        """The first event of class i that event `position` of class j happened before."""
        if i == j:
            return position + 1
        return self._first(i, j, position)


__all__ = ["Order"]
