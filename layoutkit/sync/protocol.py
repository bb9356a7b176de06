"""The barrier protocol as data, and a checker for the classic mbarrier mistakes.

A `Protocol` is the barriers' `Init`s plus one `RolePath` per group of threads that moves in
lockstep (an elected producer thread, a consumer warpgroup): its barrier events in program
order, loops unrolled. The DSL records these from the real kernel; tests write them by hand.

`check_protocol(protocol)` runs the mbarrier rules of hopper-ptx.md §3 on it - phases complete
when the pending arrivals reach 0 and the transaction bytes reach 0; `wait(P)` passes when the
phase before the current one had parity P (a fresh barrier's "phase -1" has parity 1) -
scheduling the paths round-robin until all finish or all are blocked, and reports:

- wrong parity (static, whatever the schedule): a role's wait #n on one barrier is for phase n,
  or n-1 when the barrier starts signalled (a free `empty` slot), so its parity is fixed;
- deadlock: paths blocked at waits that nothing will satisfy (e.g. the producer's first wait
  on a fresh `empty` slot with parity 0: it must be 1, `PipelineState.producer_start`);
- race: a wait that passes at once on the fresh phase -1 of a barrier that does not start
  signalled (a consumer waiting on `full` with parity 1 first reads an unfilled slot);
- arrive count != init count: one event with more arrivals than the phase still expects, a
  phase left part-arrived, or a barrier completing more phases than anyone waits for;
- expect-tx != attached bytes: the copies attached to a slot after an expect-tx deliver a
  different number of bytes (too many: hang; too few: the phase completes while bytes land).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from layoutkit.ptx.builder import SourceLocation

from .errors import ProtocolError


@dataclass(frozen=True)
class Init:
    """`stages` barriers named `barrier`, `count` arrivals per phase. `starts_signalled`: the
    slot is usable before any phase completes (an `empty` slot starts free), so a first wait
    with parity 1 passing on the fresh barrier is intended, not a race."""

    barrier: str
    stages: int
    count: int
    starts_signalled: bool = False


@dataclass(frozen=True)
class Arrive:
    """`arrivals` arrivals (threads x count) on barrier[stage]."""

    barrier: str
    stage: int
    arrivals: int = 1
    location: SourceLocation | None = None


@dataclass(frozen=True)
class ArriveExpectTx:
    """Add `tx_bytes` to the phase's expected bytes, then arrive (`arrivals` times)."""

    barrier: str
    stage: int
    tx_bytes: int
    arrivals: int = 1
    location: SourceLocation | None = None


@dataclass(frozen=True)
class ExpectTx:
    """Add `tx_bytes` to the phase's expected bytes without arriving."""

    barrier: str
    stage: int
    tx_bytes: int
    location: SourceLocation | None = None


@dataclass(frozen=True)
class Copy:
    """An async copy (TMA) that completes `nbytes` of transactions on barrier[stage]."""

    barrier: str
    stage: int
    nbytes: int
    location: SourceLocation | None = None


@dataclass(frozen=True)
class Wait:
    """Wait on barrier[stage] for the phase with parity `parity`."""

    barrier: str
    stage: int
    parity: int
    location: SourceLocation | None = None


Event = "Arrive | ArriveExpectTx | ExpectTx | Copy | Wait"


@dataclass(frozen=True)
class RolePath:
    """One lockstep group's events in program order (loops unrolled)."""

    role: str
    events: tuple


@dataclass(frozen=True)
class Protocol:
    inits: tuple
    paths: tuple


@dataclass
class _Slot:
    count: int
    signalled: bool
    completed: int = 0
    pending: int = 0
    tx: int = 0
    max_waits: int = 0
    passed_fresh: list = field(default_factory=list)

    def __post_init__(self):
        self.pending = self.count

    def passes(self, parity: int) -> bool:
        return (self.completed - 1) & 1 == parity

    def settle(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count


def _where(event) -> str:
    return f" at {event.location}" if getattr(event, "location", None) is not None else ""


def _name(event) -> str:
    return f"'{event.barrier}'[{event.stage}]"


class _Checker:
    def __init__(self, protocol: Protocol):
        self.issues: list[str] = []
        self.slots: dict[tuple[str, int], _Slot] = {}
        for init in protocol.inits:
            for stage in range(init.stages):
                self.slots[(init.barrier, stage)] = _Slot(init.count, init.starts_signalled)
        self.paths = protocol.paths
        self.waited: dict[tuple[int, str, int], int] = {}   # (path, barrier, stage) -> passed

    def slot(self, path: RolePath, event) -> _Slot:
        key = (event.barrier, event.stage)
        if key not in self.slots:
            raise ProtocolError("names a barrier/stage that no Init declares",
                                thing=f"role '{path.role}' event {type(event).__name__}",
                                value=key, location=None)
        return self.slots[key]

    def arrive(self, path: RolePath, event, slot: _Slot, arrivals: int) -> None:
        if arrivals > slot.pending:
            self.issues.append(
                f"arrive count != init count: role '{path.role}' arrives {arrivals} times on "
                f"{_name(event)}{_where(event)}, but phase {slot.completed} expects "
                f"{slot.pending} more of its {slot.count} (init count {slot.count}): the phase "
                "completes early and the rest counts toward the next one")
        while arrivals:
            take = min(arrivals, slot.pending)
            slot.pending -= take
            arrivals -= take
            before = slot.completed
            slot.settle()
            if slot.completed == before:
                break
        if arrivals:
            slot.pending -= arrivals

    def step(self, index: int, path: RolePath, event) -> bool:
        """Execute `event`; False when it is a wait that cannot pass yet."""
        slot = self.slot(path, event)   # events were validated by static_checks
        if isinstance(event, Wait):
            if not slot.passes(event.parity):
                return False
            key = (index, event.barrier, event.stage)
            self.waited[key] = self.waited.get(key, 0) + 1
            if slot.completed == 0 and not slot.signalled:
                self.issues.append(
                    f"race: role '{path.role}' waits on {_name(event)} for parity "
                    f"{event.parity}{_where(event)} and passes at once on the fresh barrier "
                    "(its 'phase -1' has parity 1) before any phase completed: the first wait on "
                    "a barrier that does not start signalled uses parity 0 "
                    "(PipelineState.consumer_start)")
        elif isinstance(event, Arrive):
            self.arrive(path, event, slot, event.arrivals)
        elif isinstance(event, ArriveExpectTx):
            slot.tx += event.tx_bytes
            self.arrive(path, event, slot, event.arrivals)
        elif isinstance(event, ExpectTx):
            slot.tx += event.tx_bytes
        else:
            slot.tx -= event.nbytes
            slot.settle()
        return True

    def run(self) -> None:
        positions = [0] * len(self.paths)
        progress = True
        while progress:
            progress = False
            for i, path in enumerate(self.paths):
                while positions[i] < len(path.events) and self.step(i, path,
                                                                       path.events[positions[i]]):
                    positions[i] += 1
                    progress = True
        for i, path in enumerate(self.paths):
            if positions[i] < len(path.events):
                self.blocked(i, path, positions[i], path.events[positions[i]])

    def blocked(self, path_index: int, path: RolePath, index: int, event: Wait) -> None:
        slot = self.slots[(event.barrier, event.stage)]
        waited = self.waited.get((path_index, event.barrier, event.stage), 0)
        wanted = waited - 1 if slot.signalled else waited   # the phase this wait is for
        text = (f"deadlock: role '{path.role}' blocks forever at event {index}, the wait on "
                f"{_name(event)} for parity {event.parity}{_where(event)}; the barrier completed "
                f"{slot.completed} phase(s) and its phase {slot.completed} has "
                f"{slot.count - slot.pending} of {slot.count} arrivals and {slot.tx} "
                "transaction bytes outstanding")
        if waited == 0 and slot.completed == 0 and slot.signalled and event.parity == 0:
            text += ("; a first wait on a slot that starts free uses parity 1 "
                     "(PipelineState.producer_start)")
        if slot.completed > wanted + 1:
            text += (f"; arrive count != init count: the barrier ran {slot.completed - wanted - 1} "
                     f"phase(s) past the one this role waits for (phase {wanted}), so each phase "
                     f"got more arrivals than its init count {slot.count}")
        self.issues.append(text)

    def check_parity(self, path: RolePath, event: Wait, n: int) -> None:
        """Wait #n of a role on one barrier is for phase n (n-1 when the barrier starts
        signalled), so its parity is fixed; report the first one that differs."""
        signalled = self.slots[(event.barrier, event.stage)].signalled
        expected = (n & 1) ^ 1 if signalled else n & 1
        if event.parity != expected and (path.role, event.barrier, event.stage) not in self.wrong:
            self.wrong.add((path.role, event.barrier, event.stage))
            start = ("starts signalled (a free slot), so wait #n is for phase n-1 and uses parity "
                     "(n+1) mod 2 (PipelineState.producer_start)" if signalled else
                     "does not start signalled, so wait #n is for phase n and uses parity n mod 2 "
                     "(PipelineState.consumer_start)")
            consequence = "blocks until a later phase or forever" if event.parity == 0 and \
                n == 0 else "may pass on the wrong phase (a race) or block"
            self.issues.append(
                f"wrong parity: role '{path.role}' waits on {_name(event)} for parity "
                f"{event.parity}{_where(event)} at its wait #{n} on that barrier, which {start}; "
                f"this wait {consequence}")

    def static_checks(self) -> None:
        self.wrong: set = set()
        for path in self.paths:
            for event in path.events:
                if not isinstance(event, (Arrive, ArriveExpectTx, ExpectTx, Copy, Wait)):
                    raise ProtocolError("is not a barrier event (Arrive, ArriveExpectTx, "
                                        "ExpectTx, Copy, Wait)", thing=f"role '{path.role}' event",
                                        value=event, location=None)
                self.slot(path, event)
            open_tx: dict[tuple[str, int], tuple[int, int, object]] = {}
            waits: dict[tuple[str, int], int] = {}

            def close(key):
                if key in open_tx:
                    expected, delivered, event = open_tx.pop(key)
                    if expected != delivered:
                        verdict = "the wait hangs" if expected > delivered else \
                            "the phase completes while bytes still land"
                        self.issues.append(
                            f"expect-tx != attached bytes: role '{path.role}' expects "
                            f"{expected} bytes on {_name(event)}{_where(event)} but the copies "
                            f"attached deliver {delivered} ({verdict})")
            for event in path.events:
                key = (event.barrier, event.stage)
                if isinstance(event, (ArriveExpectTx, ExpectTx)):
                    close(key)
                    open_tx[key] = (event.tx_bytes, 0, event)
                elif isinstance(event, Copy):
                    expected, delivered, first = open_tx.get(key, (0, 0, event))
                    open_tx[key] = (expected, delivered + event.nbytes, first)
                elif isinstance(event, Wait):
                    n = waits.get(key, 0)
                    waits[key] = n + 1
                    self.check_parity(path, event, n)
            for key in list(open_tx):
                close(key)
            for key, n in waits.items():
                if key in self.slots:
                    self.slots[key].max_waits = max(self.slots[key].max_waits, n)

    def final_checks(self) -> None:
        for (barrier, stage), slot in self.slots.items():
            name = f"'{barrier}'[{stage}]"
            if slot.pending != slot.count and slot.pending > 0:
                self.issues.append(
                    f"arrive count != init count: phase {slot.completed} of {name} ends with "
                    f"{slot.count - slot.pending} of its {slot.count} arrivals")
            if slot.completed > slot.max_waits + 1:
                self.issues.append(
                    f"arrive count != init count: {name} completed {slot.completed} phases but "
                    f"is waited on at most {slot.max_waits} times by one role: each phase got "
                    f"more arrivals than needed - its init count {slot.count} is too small for "
                    "the threads that arrive")


def check_protocol(protocol: Protocol) -> list[str]:
    """The protocol's issues, one message each (empty when it is sound in this model)."""
    checker = _Checker(protocol)
    checker.static_checks()
    checker.run()
    checker.final_checks()
    return checker.issues


def check_protocol_or_raise(protocol: Protocol) -> None:
    """Raise ProtocolError listing every issue."""
    issues = check_protocol(protocol)
    if issues:
        raise ProtocolError("\n  - " + "\n  - ".join(issues), thing="barrier protocol",
                            location=None)


__all__ = ["Arrive", "ArriveExpectTx", "Copy", "ExpectTx", "Init", "Protocol", "RolePath",
           "Wait", "check_protocol", "check_protocol_or_raise"]
