"""The shared-memory rules of the static protocol check (kernel_rules runs them after its own),
decided on the happens-before of the simulated run (layoutkit.sync.order):

- async overlap: two writes of the same shared bytes in flight at once, one of them a TMA load
  (the other a TMA load, a cp.async or a generic store): the second is issued after the load
  but before its issuer knows the barrier phase that completes the load (the copies land in
  either order, a store may be overwritten by the copy);
- unwaited read: a class reads bytes that a TMA load writes - the latest such load that did not
  come after the read - without having waited on the barrier phase that the load completes (a
  wait on another stage, parity or barrier, or none): the read can run before the data lands;
- early release: a class releases a ring stage (arrives on the barrier its producer waits on
  before refilling the stage) and then reads the stage: the refill, issued after that wait,
  may land while the read runs. A release before the wgmma reading the stage retires is the
  "wgmma overwrite" rule of kernel_rules;
- unwritten: a read of shared bytes that no event of the kernel writes (no store, stmatrix,
  cp.async or TMA load): an error where the check followed every access of the buffer, a
  warning saying why not otherwise (an access it skipped or a branch it never entered, or
  writes inside runtime loops whose trip counts it assumed).

The first three compare a read or write with the TMA loads of the same buffer; byte ranges are
spans per thread class (layoutkit/dsl/check), so overlaps are of spans. Each kind is reported
once per class and buffer. Events a class never reached (it deadlocked before) are left out.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from .kernel_model import (Arrive, AsyncWrite, ByteRange, Commit, Copy, Finding, GroupWait,
                           SharedRead, SharedWrite, Wait)
from .async_copy_rules import KIND as CP_ASYNC
from .cluster_memory_rules import cluster_memory_rules
from .commit_groups import CommitGroups
from .order import Order



@dataclass(frozen=True)
class Load:
    """A TMA load as it landed in one CTA: class, event index, event, bytes, slot, phase."""

    cls: int
    pos: int
    event: Copy
    dst: ByteRange
    slot: tuple
    phase: int


@dataclass(frozen=True)
class Write:
    """A write of shared bytes other than a TMA load: `end` is the event from which it is
    complete for its class (the cp.async's retiring wait; a store's own index)."""

    cls: int
    pos: int
    event: object
    bytes: ByteRange
    end: int
    what: str


def _copy_name(copy: Copy) -> str:
    """What a finding calls an asynchronous copy: "TMA load", or the copy's own name (an
    asynchronous peer store, lk.sm90.dsmem_store_async)."""
    return "TMA load" if copy.what.startswith("TMA load") else copy.what


def _overlap(a: ByteRange, b: ByteRange) -> ByteRange:
    return ByteRange(a.cta, a.buffer, max(a.start, b.start), min(a.stop, b.stop))


def _retired(events) -> dict:
    """Event index of each cp.async -> the index of the lk.sm80.cp_async_wait that retires it (the
    end of the class when none does)."""
    out, groups = {}, CommitGroups()
    for position, e in enumerate(events):
        if isinstance(e, AsyncWrite) and e.kind == CP_ASYNC:
            groups.issue(position)
        elif isinstance(e, Commit) and e.kind == CP_ASYNC:
            groups.commit()
        elif isinstance(e, GroupWait) and e.kind == CP_ASYNC:
            for issued in groups.wait(e.pending):
                out[issued] = position
    for issued in groups.in_flight():
        out.setdefault(issued, len(events))
    return out


class SharedRules:
    """The rules of the module docstring over `rules.p` (a kernel_rules.Rules), run with the
    simulation `sim`; findings go to `rules`."""

    def __init__(self, rules, sim):
        self.rules, self.p, self.sim = rules, rules.p, sim
        self.order = Order(self.p, sim)
        self.loads: dict[tuple, list[Load]] = {}          # (cta, buffer) -> loads
        self.writes: dict[tuple, list[Write]] = {}        # (cta, buffer) -> other writes
        self.reads: dict[tuple, list] = {}                # (cta, buffer) -> (cls, pos, read)
        self.arrives: list[list[int]] = []                # per class: indices of its arrives
        self.instances: dict | None = None                # a read -> its (class, event)s
        self.groups: dict = {}                            # _group's answers by (class, event)
        self.overlapping: dict = {}       # _read's loads of class j overlapping a read's bytes
        self.warps = [frozenset(t // 32 for t in c.tids) for c in self.p.classes]
        written: dict[tuple, list] = {}   # (cta, buffer) -> Write's fields, made where loaded
        copied = {(cta, e.dst.buffer) for c in self.p.classes for _, e in c.select(Copy)
                  if e.dst is not None for cta in e.ctas}     # where loads can be
        for i, c in enumerate(self.p.classes):
            reached = sim.positions[i]
            retired = None
            arrives = []
            for position, e in c.select(SharedRead, Copy, SharedWrite, AsyncWrite, Arrive):
                if position >= reached:
                    break
                kind = type(e)
                if kind is SharedRead:
                    self.reads.setdefault((e.bytes.cta, e.bytes.buffer), []).append(
                        (i, position, e))
                elif kind is Copy:
                    if e.dst is None:
                        continue
                    for cta in e.ctas:
                        phase = sim.phase_of.get(((i, position), cta))
                        if phase is None:
                            continue
                        dst = e.dst if e.dst.cta == cta else \
                            ByteRange(cta, e.dst.buffer, e.dst.start, e.dst.stop)
                        self.loads.setdefault((cta, dst.buffer), []).append(
                            Load(i, position, e, dst, e.slot(cta), phase))
                elif kind is SharedWrite:
                    if (e.bytes.cta, e.bytes.buffer) in copied:
                        written.setdefault((e.bytes.cta, e.bytes.buffer), []).append(
                            (i, position, e, e.bytes, position, "store"))
                elif kind is AsyncWrite:
                    if (e.bytes.cta, e.bytes.buffer) not in copied:
                        continue
                    if retired is None:
                        retired = _retired(c.events)
                    written.setdefault((e.bytes.cta, e.bytes.buffer), []).append(
                        (i, position, e, e.bytes, retired.get(position, len(c.events)),
                         "cp.async"))
                else:
                    arrives.append(position)
            self.arrives.append(arrives)
        self.writes = {key: [Write(*fields) for fields in writes]      # overlap reads them
                       for key, writes in written.items() if key in self.loads}

    def name(self, slot) -> str:
        return self.rules.name(slot)

    def who(self, i: int) -> str:
        return self.p.classes[i].who

    # ---- async overlap ------------------------------------------------------------------------
    def overlap(self) -> None:
        for key, loads in self.loads.items():
            by_class: dict[int, list] = {}        # class -> [Load | Write] in program order
            for x in loads + self.writes.get(key, []):
                by_class.setdefault(x.cls, []).append(x)
            for entries in by_class.values():
                entries.sort(key=lambda x: x.pos)
            positions = {j: [x.pos for x in entries] for j, entries in by_class.items()}
            copying = {j: [x for x in entries if isinstance(x, Write) and x.end > x.pos]
                       for j, entries in by_class.items()}       # cp.async: in flight a while
            spans = {j: union_of([(self._bytes(x).start, self._bytes(x).stop) for x in entries])
                     for j, entries in by_class.items()}          # to pass a class at once
            for first in loads:
                for j, entries in by_class.items():
                    if not covers_any(spans[j], first.dst):   # none of its bytes overlap
                        continue
                    lo = self.order.seen(first.cls, first.pos, j)
                    hi = self.order.first_knowing(j, first.slot, first.phase)
                    hit = None
                    for at in range(bisect_right(positions[j], lo), len(entries)):
                        x = entries[at]
                        if x.pos >= hi:
                            break
                        if x is not first and self._bytes(x).overlaps(first.dst):
                            hit = x
                            break
                    if hit is None:      # a cp.async issued before the load, still in flight
                        hit = next((x for x in copying[j] if x.pos <= lo < x.end and
                                    x.bytes.overlaps(first.dst)), None)
                    if hit is not None:
                        self._report_overlap(first, hit)

    @staticmethod
    def _bytes(x) -> ByteRange:
        return x.dst if isinstance(x, Load) else x.bytes

    def _report_overlap(self, first: Load, second) -> None:
        what = "TMA load" if isinstance(second, Load) else second.what
        both = _overlap(first.dst, self._bytes(second))
        issuer = "its own" if first.cls == second.cls else f"{self.who(first.cls)}'s"
        self.rules.add(
            "async overlap", both.buffer,
            f"{self.who(second.cls)} writes {both.text()} with a {what} at "
            f"{second.event.site.text()} while {issuer} {_copy_name(first.event)} at "
            f"{first.event.site.text()} "
            f"may still write them: that load completes on {self.name(first.slot)} (its phase "
            f"{first.phase}), which {self.who(second.cls)} has not waited for, so the two "
            "writes land in either order; give each copy its own bytes (the stage's slice of "
            f"the buffer) or write after a wait that sees {self.name(first.slot)} complete",
            second.event.site)

    # ---- unwaited read, early release ---------------------------------------------------------
    def reads_of_loads(self) -> None:
        for key, reads in self.reads.items():
            loads = self.loads.get(key)
            if not loads:
                continue
            # class -> dst (start, stop) -> ([positions], [Load]) in program order
            index: dict[int, dict] = {}
            for x in loads:
                positions, found = index.setdefault(x.cls, {}).setdefault(
                    (x.dst.start, x.dst.stop), ([], []))
                positions.append(x.pos)
                found.append(x)
            self.overlapping = {}                 # (class j, read's bytes) -> of this buffer
            for i, position, read in reads:
                for j, ranges in index.items():
                    self._read(i, position, read, j, ranges)

    def _read(self, i: int, position: int, read: SharedRead, j: int, ranges: dict) -> None:
        key = (j, read.bytes.start, read.bytes.stop)
        overlapping = self.overlapping.get(key)
        if overlapping is None:
            overlapping = self.overlapping[key] = [
                (positions, found) for (start, stop), (positions, found) in ranges.items()
                if start < read.bytes.stop and read.bytes.start < stop]
        if not overlapping:
            return
        order = self.order
        hi = order.first_seeing(j, i, position)     # _after / _knows of the class alone
        latest = self._latest(overlapping, hi)
        if latest is None or order.knows(i, position, latest.slot, latest.phase):
            return
        group = self._group(i, position, read)      # the warps' threads read together
        if len(group) > 1:
            hi = self._after(j, i, group)
            latest = self._latest(overlapping, hi)
            if latest is None or self._knows(i, group, latest):
                return
        # name the first load of those bytes, before hi, that the read is not ordered after
        first = [next(x for x in found[:bisect_left(positions, hi)]
                      if not self._knows(i, group, x))
                 for positions, found in overlapping
                 if positions[0] < hi and not self._knows(
                     i, group, found[bisect_left(positions, hi) - 1])]
        latest = min(first, key=lambda x: x.pos)
        who = self.who(i)
        if ("race", (who, latest.slot[1])) in self.rules.seen:
            return                       # kernel_rules' race said it (a wait on phase -1)
        # whether the class waited for an earlier load of the bytes (phases of a slot complete
        # in order: if it knows any, it knows the first)
        fed = any(found[0].pos < latest.pos and
                  self.order.knows(i, position, found[0].slot, found[0].phase)
                  for positions, found in overlapping)
        arrives = self.arrives[i]
        at = bisect_right(arrives, self.order.seen(j, latest.pos, i)) - 1
        if not fed or (at >= 0 and not _same_iteration(
                self.p.classes[i].events[arrives[at]].site, read.site)):
            self._report_unwaited(i, position, read, latest)
        else:            # it read an earlier load: the refill is not ordered after the read
            self._report_release(i, position, read, latest, arrives[at] if at >= 0 else None)

    @staticmethod
    def _latest(overlapping: list, hi: int):
        """The last of the overlapping loads (lists per destination) issued before `hi`."""
        latest = None
        for positions, found in overlapping:
            at = bisect_left(positions, hi) - 1
            if at >= 0 and (latest is None or positions[at] > latest.pos):
                latest = found[at]
        return latest

    def _group(self, i: int, position: int, read: SharedRead) -> list:
        """The (class, event) of this read in every class sharing a warp with class i: one
        instruction of a warp (a warpgroup's wgmma), ordered by any lane's synchronization."""
        if self.instances is None:          # built on first use: a read's instances
            self.instances = {}
            for reads in self.reads.values():
                for x, p, e in reads:
                    self.instances.setdefault(e, []).append((x, p))
        found = self.groups.get((i, position))
        if found is None:
            mine = self.warps[i]
            found = self.groups[(i, position)] = [(i, position)] + [
                (x, p) for x, p in self.instances.get(read, ()) if x != i and self.warps[x] & mine]
        return found

    def _after(self, j: int, i: int, group: list) -> int:
        """The first event of class j that every warp of class i's read (`group`) happened
        before (a warp's read: through the first of its lanes' classes that j hears from)."""
        if len(group) == 1:
            return self.order.first_seeing(j, *group[0])
        seeing = [(self.warps[x], self.order.first_seeing(j, x, p)) for x, p in group]
        return max(min(f for warps, f in seeing if w in warps) for w in self.warps[i])

    def _knows(self, i: int, group: list, load: Load) -> bool:
        """Whether every warp of class i's read (`group`) knows `load` complete."""
        if len(group) == 1:
            return self.order.knows(*group[0], load.slot, load.phase)
        knowing = [self.warps[x] for x, p in group if self.order.knows(x, p, load.slot,
                                                                        load.phase)]
        return all(any(w in warps for warps in knowing) for w in self.warps[i])

    def _report_unwaited(self, i: int, position: int, read: SharedRead, load: Load) -> None:
        who = self.who(i)
        waits = [e for e in self.p.classes[i].events[:position]
                 if isinstance(e, Wait) and e.slot == load.slot]
        why = (f"its last wait on {self.name(load.slot)}, at {waits[-1].site.text()}, is for "
               "an earlier phase" if waits else
               f"it does not wait on {self.name(load.slot)} before the read")
        issuer = "its own" if load.cls == i else f"{self.who(load.cls)}'s"
        self.rules.add(
            "unwaited read", read.bytes.buffer,
            f"{who} reads {_overlap(read.bytes, load.dst).text()} at {read.site.text()}, "
            f"which {issuer} {_copy_name(load.event)} at {load.event.site.text()} writes, "
            f"completing on "
            f"{self.name(load.slot)} (its phase {load.phase}), without having waited on that "
            f"phase ({why}): the read can run before the data lands; "
            f"lk.sm90.mbarrier_wait({self.name(load.slot)}, parity) for the phase the load "
            "completes, then read", read.site)

    def _report_release(self, i: int, position: int, read: SharedRead, load: Load,
                        arrive_at: int | None) -> None:
        who = self.who(i)
        refill = self.p.classes[load.cls].events[:load.pos]
        issuer = "its own" if load.cls == i else f"{self.who(load.cls)}'s"
        bytes_ = _overlap(read.bytes, load.dst).text()
        if arrive_at is None:
            wait = next((e for e in reversed(refill) if isinstance(e, Wait)), None)
            after = f", issued after its wait on {self.name(wait.slot)} at {wait.site.text()}," \
                if wait is not None else ""
            self.rules.add(
                "early release", read.bytes.buffer,
                f"{who} reads {bytes_} at {read.site.text()}, but {issuer} TMA load at "
                f"{load.event.site.text()}{after} refills those bytes without waiting for "
                f"the read: no arrive of {who} after an earlier read of the stage tells the "
                "producer the stage is free, so the refill may land while the read runs; "
                "arrive on the barrier the producer waits on (and count these threads in its "
                "arrive count) after the last read of the stage", read.site)
            return
        arrive = self.p.classes[i].events[arrive_at]
        wait = next((e for e in reversed(refill) if isinstance(e, Wait) and
                     e.slot == arrive.slot), None)
        after = f", issued after its wait on {self.name(arrive.slot)} at {wait.site.text()}," \
            if wait is not None else ", issued after it learned of the release,"
        self.rules.add(
            "early release", read.bytes.buffer,
            f"{who} releases {self.name(arrive.slot)} at {arrive.site.text()} before its read "
            f"of {bytes_} at {read.site.text()}: {issuer} TMA load at "
            f"{load.event.site.text()}{after} refills those bytes while the read may still "
            f"run; arrive on {self.name(arrive.slot)} after the last read of the stage",
            arrive.site)

    # ---- unwritten ----------------------------------------------------------------------------
    def unwritten(self) -> None:
        written: dict[tuple, list] = {}      # (cta, buffer) -> [(start, stop)] of every write
        looped: set = set()                  # (cta, buffer) written inside a runtime loop
        seen: set = set()                    # the events taken (classes share event objects)
        for c in self.p.classes:
            for _, e in c.select(SharedWrite, AsyncWrite, Copy):
                if id(e) in seen:
                    continue
                seen.add(id(e))
                if type(e) is not Copy:
                    spans = [e.bytes]
                elif e.dst is not None:
                    spans = [ByteRange(cta, e.dst.buffer, e.dst.start, e.dst.stop)
                             for cta in e.ctas]
                else:
                    continue
                for r in spans:
                    written.setdefault((r.cta, r.buffer), []).append((r.start, r.stop))
                    if e.site.context:
                        looped.add((r.cta, r.buffer))
        merged = {key: union_of(spans) for key, spans in written.items()}
        unfollowed = self.p.unfollowed or (lambda buffer: None)
        covered: set = set()                 # the reads found covered
        for c in self.p.classes:
            for _, e in c.select(SharedRead):
                if id(e) in covered:
                    continue
                key = (e.bytes.cta, e.bytes.buffer)
                spans = merged.get(key)
                if spans is not None and covers_any(spans, e.bytes):
                    covered.add(id(e))
                    continue
                self._report_unwritten(c, e, spans, key in looped,
                                       unfollowed(e.bytes.buffer))

    def _report_unwritten(self, c, read: SharedRead, spans, looped: bool, skipped) -> None:
        what = {"wgmma": "a wgmma", "tma_store": "a TMA store"}.get(
            read.proxy, "an ldmatrix" if read.collective else "a load")
        buffer = read.bytes.buffer
        if spans is None:
            head = (f"{c.who} reads {read.bytes.text()} with {what} at {read.site.text()}, but "
                    f"nothing in the kernel writes {buffer} (no store, stmatrix, cp.async or "
                    "TMA load)")
        else:
            starts, stops = spans
            covered = ", ".join(f"{a}..{b - 1}" for a, b in list(zip(starts, stops))[:3])
            head = (f"{c.who} reads {read.bytes.text()} with {what} at {read.site.text()}, "
                    f"which no write of the kernel covers (the writes of {buffer} cover its "
                    f"bytes {covered}{', ...' if len(starts) > 3 else ''})")
        key = buffer
        if skipped is not None:
            self._warn(key, f"{head} as far as the check followed it: it did not follow the "
                       f"access of {buffer} at {skipped.text()} (an offset computed from "
                       "memory, or a branch no thread took with the values checked), so that "
                       "the read sees written data was not proven", read.site)
        elif looped and self.p.assumed:
            self._warn(key, f"{head} with the runtime loops run for {self.p.assumed}; that "
                       "other trip counts write these bytes first was not proven", read.site)
        else:
            self.rules.add("unwritten", key, f"{head}: shared memory starts undefined, so the read "
                           "sees garbage; write the bytes first (lk.store, lk.sm90.tma_load, "
                           "lk.sm80.cp_async) and synchronise, or read only bytes that were "
                           "written",
                           read.site)

    def _warn(self, key, message: str, site) -> None:
        if ("unwritten", key) not in self.rules.seen:
            self.rules.seen.add(("unwritten", key))
            self.rules.findings.append(Finding("unwritten", False, message, site))


def _same_iteration(release, read) -> bool:
    """Whether the read runs in the loop iteration of the release (or one nested in it)."""
    return not release.context or read.context == release.context or \
        read.context.endswith(", " + release.context)


def union_of(spans: list) -> tuple[list, list]:
    """Sorted disjoint (starts, stops) covering `spans`."""
    starts, stops = [], []
    for start, stop in sorted(spans):
        if stops and start <= stops[-1]:
            stops[-1] = max(stops[-1], stop)
        else:
            starts.append(start)
            stops.append(stop)
    return starts, stops


def covers_any(spans: tuple, r: ByteRange) -> bool:
    """Whether the union `spans` overlaps bytes [r.start, r.stop)."""
    starts, stops = spans
    at = bisect_right(starts, r.stop - 1) - 1
    return at >= 0 and stops[at] > r.start


def shared_rules(rules, sim) -> None:
    """Run the rules of the module docstring (see SharedRules)."""
    if sim is None:
        return
    checker = SharedRules(rules, sim)
    if checker.loads:
        checker.overlap()
        checker.reads_of_loads()
    checker.unwritten()
    cluster_memory_rules(rules, sim, checker.order)


__all__ = ["shared_rules", "SharedRules", "covers_any", "union_of"]
