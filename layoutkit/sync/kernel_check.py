"""The static protocol check of a traced kernel: simulate its thread classes against the
mbarrier and thread-barrier rules, then apply the ordering rules of kernel_rules.

Simulation (hopper-ptx.md §3, PTX ISA "mbarrier"): a phase of a barrier completes when its
pending arrivals reach 0 and its transaction count is 0; `wait(P)` passes when the last
completed phase has parity P (a fresh barrier's "phase -1" has parity 1); a TMA copy completes
its bytes when issued (the earliest it can). Thread barriers (bar.sync id, N; the cluster
barrier) complete when N threads arrived. Classes run in turn, each as far as it can, until all
finish or all left are blocked. Findings (kind: what):

- deadlock: classes blocked forever (with the barrier's phase, arrivals and bytes outstanding);
- arrive count: more arrivals in a phase than it expects, or a phase left part-arrived;
- expect-tx: copies delivering more bytes than the phase expects, or fewer (phase never ends);
- named barrier: more threads than its count arrive, or too few (a deadlock);
- stage: a barrier index outside its array;
and from kernel_rules: wrong parity, race, init, wgmma overwrite, proxy fence, TMA store,
cp.async; from wgmma_rules: warpgroup, wgmma fence, wgmma commit, wgmma wait.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .kernel_model import (Arrive, Copy, Finding, Init, KernelProtocol, SharedRead,
                           SharedWrite, ThreadBarrier, ThreadClass, Wait, describe_threads)


# the events step() decides (any other event passes at once and changes no state)
STEPPED = frozenset((Init, Arrive, Copy, Wait, ThreadBarrier))


def slot_text(slot: tuple, ctas: int) -> str:
    cta, name, stage = slot
    return f"{name}[{stage}]" + (f" of CTA {cta}" if ctas > 1 else "")


@dataclass
class SlotState:
    """One barrier during the simulation; `log` holds (who, arrivals, site) of this phase,
    `expected`/`delivered` (bytes, site) of this phase."""

    count: int
    initialised: bool = False
    completed: int = 0
    pending: int = 0
    tx: int = 0
    log: list = field(default_factory=list)
    expected: list = field(default_factory=list)
    delivered: list = field(default_factory=list)
    flagged: bool = False

    def settle(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count
            self.log, self.expected, self.delivered = [], [], []

    def passes(self, parity: int) -> bool:
        return (self.completed - 1) & 1 == parity


@dataclass
class GroupBarrier:
    """A thread barrier during the simulation: arrivals of the current generation."""

    threads: int
    arrived: int = 0
    generation: int = 0
    log: list = field(default_factory=list)
    flagged: bool = False


def _who_list(log) -> str:
    return "; ".join(f"{n} from {who} at {site.text()}" for who, n, site in log) or "none"


class Simulation:
    """Runs the classes of `protocol` (see the module docstring); `findings` collects issues,
    `passes` maps (class index, event index) of each passed wait to the phase it passed on."""

    def __init__(self, protocol: KernelProtocol):
        self.p = protocol
        self.findings: list[Finding] = []
        self.slots: dict[tuple, SlotState] = {}
        for decl in protocol.barriers.values():
            for cta in range(protocol.ctas):
                for stage in range(decl.stages):
                    self.slots[(cta, decl.name, stage)] = SlotState(decl.arrive_count,
                                                                    pending=decl.arrive_count)
        self.groups: dict[tuple, GroupBarrier] = {}
        self.parked: dict[int, tuple] = {}       # class -> (group key, generation) it waits on
        self.passes: dict[tuple[int, int], int] = {}
        self.positions = [0] * len(protocol.classes)
        self.reported: set = set()      # (kind, barrier array): one finding per array
        self.waited: dict[tuple, set] = {}    # slot -> phases a wait passed on
        self.watched = {e.slot for c in protocol.classes for _, e in c.select(Wait)}
        # the run as it happened, for happens-before (layoutkit.sync.order): the (class, event)
        # of each step taken (of the STEPPED kinds: the others order nothing), the phase each
        # arrive ((class, event)) and copy ((class, event), cta) went into, the (barrier key,
        # generation) of each thread-barrier arrival
        self.order: list[tuple[int, int]] = []
        self.phase_of: dict = {}
        self.rounds: dict[tuple[int, int], tuple] = {}
        self.current = (0, 0)

    def once(self, kind: str, barrier: str) -> bool:
        if (kind, barrier) in self.reported:
            return False
        self.reported.add((kind, barrier))
        return True

    def add(self, kind: str, message: str, site, error: bool = True) -> None:
        self.findings.append(Finding(kind, error, message, site))

    def name(self, slot: tuple) -> str:
        return slot_text(slot, self.p.ctas)

    def slot(self, key: tuple, site) -> SlotState | None:
        state = self.slots.get(key)
        if state is None:
            decl = self.p.barriers.get(key[1])
            stages = decl.stages if decl is not None else 0
            self.add("stage", f"{key[1]}[{key[2]}] at {site.text()} is outside the array "
                     f"'{key[1]}' of {stages} barrier(s); the stage must be in 0..{stages - 1}",
                     site)
            state = self.slots[key] = SlotState(1, True, pending=1, flagged=True)
        return state

    # ---- events ---------------------------------------------------------------------------
    def arrive(self, c: ThreadClass, e: Arrive) -> bool:
        s = self.slot(e.slot, e.site)
        if not s.initialised:
            return False
        if e.expect:
            s.tx += e.tx_bytes
            s.expected.append((e.tx_bytes, e.site))
        if e.arrivals > s.pending and not s.flagged and self.once("arrive count", e.barrier):
            s.flagged = True
            decl = self.p.barriers[e.barrier]
            self.add("arrive count",
                     f"{c.who} arrives {e.arrivals} time(s) on {self.name(e.slot)} at "
                     f"{e.site.text()}, but its phase {s.completed} expects only {s.pending} more "
                     f"(init count {s.count} at {decl.site.text()}; arrivals so far: "
                     f"{_who_list(s.log)}): the phase completes early and the rest counts "
                     "toward the next one; elect one thread (lk.sm90.elect_one) or init the array "
                     "with the number of threads that arrive per phase", e.site)
        s.log.append((c.who, e.arrivals, e.site))
        self.phase_of[self.current] = s.completed
        left, log = e.arrivals, list(s.log)
        while left:
            take = min(left, s.pending)
            s.pending -= take
            left -= take
            before = s.completed
            s.settle()
            if s.completed == before:
                break
            self.skipped(c, e, s, log)
        s.pending -= left
        return True

    def skipped(self, c: ThreadClass, e: Arrive, s: SlotState, log) -> None:
        """A phase completing while the one before it was never waited for: one use of the
        slot brings more arrivals than the init count (the waiter then sees the wrong phase)."""
        done = s.completed - 1
        if done >= 1 and e.slot in self.watched and \
                done - 1 not in self.waited.get(e.slot, ()) and not s.flagged and \
                self.once("arrive count", e.barrier):
            s.flagged = True
            decl = self.p.barriers[e.barrier]
            self.add("arrive count",
                     f"{c.who} completes phase {done} of {self.name(e.slot)} at "
                     f"{e.site.text()} before any wait passed its phase {done - 1} (this "
                     f"phase's arrivals: {_who_list(log)}): its arrivals run ahead of its "
                     f"waiters - more arrivals per use of the slot than its init count "
                     f"{s.count} ({decl.site.text()}), or an arrive with no wait before it",
                     e.site)

    def copy(self, c: ThreadClass, e: Copy) -> bool:
        states = [self.slot(e.slot(cta), e.site) for cta in e.ctas]
        if not all(s.initialised for s in states):
            return False
        for cta, s in zip(e.ctas, states):
            self.phase_of[(self.current, cta)] = s.completed
            s.tx -= e.nbytes
            s.delivered.append((e.nbytes, e.site))
            if s.tx < 0 and s.pending == 0 and not s.flagged and \
                    self.once("expect-tx", e.barrier):
                s.flagged = True
                want = sum(n for n, _ in s.expected)
                got = sum(n for n, _ in s.delivered)
                self.add("expect-tx",
                         f"the copies completing on {self.name(e.slot(cta))} in its phase "
                         f"{s.completed} deliver {got} bytes (last: {e.what} by {c.who} at "
                         f"{e.site.text()}) but the phase's arrive.expect_tx expects {want} "
                         f"({', '.join(st.text() for _, st in s.expected) or 'no expect_tx'}): "
                         "the phase completes while bytes still land", e.site)
                s.tx = 0
            s.settle()
        return True

    def wait(self, index: int, position: int, e: Wait) -> bool:
        s = self.slot(e.slot, e.site)
        if not s.initialised or not s.passes(e.parity):
            return False
        self.passes[(index, position)] = s.completed - 1
        self.waited.setdefault(e.slot, set()).add(s.completed - 1)
        return True

    def group(self, index: int, c: ThreadClass, e: ThreadBarrier) -> bool:
        key = ("cluster",) if e.ident == "cluster" else (c.cta, e.ident)
        g = self.groups.setdefault(key, GroupBarrier(e.threads))
        parked = self.parked.get(index)
        if parked is not None:
            if g.generation > parked[1]:
                del self.parked[index]
                return True
            return False
        g.arrived += e.arrivals
        g.log.append((c.who, e.arrivals, e.site))
        if g.arrived > g.threads and not g.flagged:
            g.flagged = True
            self.add("named barrier", f"{self.barrier_name(e)} counts {g.threads} threads but "
                     f"{g.arrived} arrive in one use ({_who_list(g.log)}): it completes before "
                     "all of them arrive, and the rest start its next use; give the count of "
                     "every thread that reaches it", e.site)
        generation = g.generation
        self.rounds[self.current] = (key, generation)
        if g.arrived >= g.threads:
            g.generation += 1
            g.arrived, g.log = 0, []
        if e.waits and g.generation == generation:
            self.parked[index] = (key, generation)
            return False
        return True

    @staticmethod
    def barrier_name(e: ThreadBarrier) -> str:
        if e.ident == "cluster":
            return "lk.sm90.cluster_sync()"
        if e.ident == 0:
            return "lk.barrier() (bar.sync 0)"
        return f"named barrier {e.ident}"

    def step(self, index: int, c: ThreadClass, position: int) -> bool:
        e = c.events[position]
        self.current = (index, position)
        kind = type(e)
        if kind is Init:
            for key, s in self.slots.items():
                if key[0] == e.cta and key[1] == e.barrier:
                    s.initialised = True
            return True
        if kind is Arrive:
            return self.arrive(c, e)
        if kind is Copy:
            return self.copy(c, e)
        if kind is Wait:
            return self.wait(index, position, e)
        if kind is ThreadBarrier:
            return self.group(index, c, e)
        return True

    def run(self) -> None:
        classes, order = self.p.classes, self.order
        # per class: the positions of its events step() decides (the others pass at once)
        stepped = [[at for at, _ in c.select(*STEPPED)] for c in classes]
        done = [0] * len(classes)                # per class: how many of those passed
        progress = True
        while progress:
            progress = False
            for i, c in enumerate(classes):
                positions, k = stepped[i], done[i]
                start = k
                while k < len(positions) and self.step(i, c, positions[k]):
                    order.append((i, positions[k]))
                    k += 1
                done[i] = k
                self.positions[i] = positions[k] if k < len(positions) else len(c.events)
                progress = progress or k > start
        blocked = [(i, c) for i, c in enumerate(classes) if self.positions[i] < len(c.events)]
        if blocked:
            self.deadlock(blocked)
        self.leftovers(blocked)

    # ---- reports --------------------------------------------------------------------------
    def deadlock(self, blocked) -> None:
        merged: dict = {}          # the threads blocked at one event, whatever their class
        for i, c in blocked:
            e = c.events[self.positions[i]]
            key = (c.role, c.cta, replace(e, arrivals=0) if hasattr(e, "arrivals") else e)
            if key in merged:
                merged[key] = (merged[key][0], merged[key][1] + c.tids)
            else:
                merged[key] = ((i, c), c.tids)
        lines = []
        for (i, c), tids in merged.values():
            who = describe_threads(c.role, c.cta if c.in_cluster else None, tids)
            lines.append(self.blocked_text(i, c, c.events[self.positions[i]], who))
        first = blocked[0][1].events[self.positions[blocked[0][0]]]
        self.add("deadlock", "every thread class left is blocked forever:\n      "
                 + "\n      ".join(lines), first.site)

    def blocked_text(self, index: int, c: ThreadClass, e, who: str) -> str:
        if isinstance(e, ThreadBarrier):
            key = ("cluster",) if e.ident == "cluster" else (c.cta, e.ident)
            g = self.groups[key]
            return (f"{who} at {self.barrier_name(e)} ({e.threads} threads) at "
                    f"{e.site.text()}: {g.arrived} of {e.threads} threads arrived "
                    f"({_who_list(g.log)})")
        if isinstance(e, Copy):
            return (f"{who} issues {e.what} at {e.site.text()} on "
                    f"{self.name(e.slot(e.ctas[0]))}, never initialised")
        s = self.slots[e.slot]
        if not s.initialised:
            return f"{who} uses {self.name(e.slot)} at {e.site.text()}, never initialised"
        if isinstance(e, Arrive):
            return f"{who} arrives on {self.name(e.slot)} at {e.site.text()}"
        want = sum(n for n, _ in s.expected)
        got = sum(n for n, _ in s.delivered)
        text = (f"{who} waits on {self.name(e.slot)} for parity {e.parity} at "
                f"{e.site.text()}: it completed {s.completed} phase(s); phase {s.completed} "
                f"has {s.count - s.pending} of {s.count} arrivals ({_who_list(s.log)}) and "
                f"{s.tx} transaction bytes outstanding")
        if s.expected and s.tx > 0:
            text += (f" (expect-tx: {want} bytes expected, the copies delivered {got}; the "
                     "bytes expected must equal the bytes the copies of the phase land)")
        if self.first_wait(index, e) and e.parity == 0 and s.completed == 0 and \
                self.writes_after(c, self.positions[index]):
            text += ("; this is the role's first wait on a free slot it then fills: a fresh "
                     "barrier passes parity 1 (its phase -1), so the producer starts at phase "
                     "1 (lk.sm90.producer_state)")
        return text

    def first_wait(self, index: int, e: Wait) -> bool:
        c = self.p.classes[index]
        return not any(isinstance(x, Wait) and x.slot == e.slot
                       for x in c.events[:self.positions[index]])

    @staticmethod
    def writes_after(c: ThreadClass, position: int) -> bool:
        for e in c.events[position + 1:]:
            if isinstance(e, Wait):
                return False
            if isinstance(e, (Copy, SharedWrite)) or (isinstance(e, Arrive) and e.expect):
                return True
            if isinstance(e, SharedRead):
                return False
        return False

    def leftovers(self, blocked) -> None:
        waiting = {c.events[self.positions[i]].slot for i, c in blocked
                   if isinstance(c.events[self.positions[i]], Wait)}
        for key, s in self.slots.items():
            if s.flagged or key in waiting or not s.initialised or \
                    ("arrive count", key[1]) in self.reported or \
                    ("expect-tx", key[1]) in self.reported:
                continue
            decl = self.p.barriers[key[1]]
            if s.log and s.pending > 0 and self.once("arrive count", key[1]):
                self.add("arrive count",
                         f"phase {s.completed} of {self.name(key)} ends with "
                         f"{s.count - s.pending} of its {s.count} arrivals ({_who_list(s.log)}; "
                         f"init count {s.count} at {decl.site.text()}): the threads that arrive "
                         "per phase must number its arrive count", s.log[0][2])
            elif s.pending == 0 and s.tx > 0 and self.once("expect-tx", key[1]):
                site = s.expected[0][1] if s.expected else decl.site
                self.add("expect-tx",
                         f"phase {s.completed} of {self.name(key)} expects "
                         f"{sum(n for n, _ in s.expected)} bytes "
                         f"({', '.join(st.text() for _, st in s.expected)}) but its copies "
                         f"deliver {sum(n for n, _ in s.delivered)}: the phase never completes",
                         site)


def check_kernel(protocol: KernelProtocol) -> list[Finding]:
    """Every finding of the static check on `protocol` (errors and warnings), in a fixed
    order: kernel_rules' (causes), the simulation's, its deadlock (often a consequence of the
    others), then what could not be decided (see both module docstrings)."""
    from .kernel_rules import ordering_findings
    from .wgmma_rules import wgmma_findings
    sim = Simulation(protocol)
    sim.run()
    deadlocks = [f for f in sim.findings if f.kind == "deadlock"]
    findings = ordering_findings(protocol, sim.passes, sim)
    findings += wgmma_findings(protocol)
    findings += [f for f in sim.findings if f.kind != "deadlock"] + deadlocks
    findings += [Finding("undecided", False, u.message, u.site) for u in protocol.undecided]
    return findings


__all__ = ["Simulation", "check_kernel", "slot_text"]
