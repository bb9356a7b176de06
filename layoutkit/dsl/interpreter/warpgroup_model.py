"""The interpreter's model of warpgroup-collective execution (PTX `.sync.aligned` over 128
threads: wgmma, wgmma.fence, wgmma.commit_group, wgmma.wait_group): the threads of a warpgroup
execute the same sequence of these ops.

Each thread's k-th warpgroup-collective op is its position k in its warpgroup's sequence. A
position is decided once every thread of the warpgroup has executed an op there or exited;
then every thread must have executed the same op, else one of the ops there (the first in the
source, then the one fewest threads ran: usually the op under the branch) is a DivergenceError
in the static check's words
(layoutkit.sync.wgmma_rules: "runs on part of a warpgroup"), at that op's line. So a fence
under `lk.if_(tid < 64)` is reported when the last of threads 64-127 exits or passes it,
before the wait that would deadlock.
"""
from __future__ import annotations

from layoutkit.sync.wgmma_rules import WARPGROUP, partial_warpgroup_text, warpgroup_part

from .errors import DivergenceError
from .machine import location_text


def run_at_exit(thread, hook) -> None:
    """Call `hook(exiting_thread)` for every thread of the machine that exits from now on."""
    hooks = thread.cta.machine.state.setdefault("exit_hooks", [])
    if hook not in hooks:
        hooks.append(hook)


class WarpgroupLog:
    """The warpgroup-collective ops of one warpgroup's threads (`members`) not yet decided:
    position -> {id(op): (op, what, [tids])}; `count[tid]` is the next position of a thread."""

    def __init__(self, cta, group: int):
        self.cta, self.group = cta, group
        self.members = cta.threads[group * WARPGROUP:(group + 1) * WARPGROUP]
        self.count = {t.tid: 0 for t in self.members}
        self.positions: dict[int, dict] = {}
        self.decided = 0
        self.exited = {t.tid for t in self.members if t.done}
        self._exited_cache: tuple = (None, 0)

    def execute(self, thread, op, what: str) -> None:
        n = self.count[thread.tid]
        self.count[thread.tid] = n + 1
        self.positions.setdefault(n, {}).setdefault(id(op), (op, what, []))[2].append(thread.tid)
        self.decide()

    def exit(self, thread) -> None:
        self.exited.add(thread.tid)
        self.decide()

    def decide(self) -> None:
        """Check every position all members have passed or exited before (module docstring)."""
        while self.decided in self.positions:
            n = self.decided
            ran = self.positions[n]
            arrived = sum(len(tids) for _, _, tids in ran.values())
            if arrived < len(self.members):
                if arrived + len(self.exited) < len(self.members) or \
                        arrived + self._exited_at_or_before(n) < len(self.members):
                    return
            if len(ran) > 1 or arrived < WARPGROUP:
                self._partial(ran)
            del self.positions[n]
            self.decided += 1

    def _exited_at_or_before(self, n: int) -> int:
        """How many exited threads exited without passing position n (their counts are
        final, so the number is kept until n or the exited set changes)."""
        key = (n, len(self.exited))
        if self._exited_cache[0] != key:
            self._exited_cache = (key, sum(self.count[t] <= n for t in self.exited))
        return self._exited_cache[1]

    def _partial(self, ran: dict):
        op, what, tids = min(ran.values(), key=lambda x: (
            x[0].location.line if x[0].location is not None else 0, len(x[2]), min(x[2])))
        part = warpgroup_part(self.group, tids)
        raise DivergenceError(f"CTA {self.cta.coord}: " + partial_warpgroup_text(
            what, location_text(op), [part]), op.location)


def _log(cta, group: int) -> WarpgroupLog:
    logs = cta.state.setdefault("warpgroup_collectives", {})
    log = logs.get(group)
    if log is None:
        log = logs[group] = WarpgroupLog(cta, group)
    return log


def _on_exit(thread) -> None:
    log = thread.cta.state.get("warpgroup_collectives", {}).get(thread.tid // WARPGROUP)
    if log is not None:
        log.exit(thread)


def warpgroup_collective(thread, op, what: str) -> None:
    """`thread` executes the warpgroup-collective `op` (`what`: as the user spells it, e.g.
    "lk.sm90.wgmma_fence()"); a DivergenceError when a position is decided with part of the
    warpgroup."""
    run_at_exit(thread, _on_exit)
    _log(thread.cta, thread.tid // WARPGROUP).execute(thread, op, what)


__all__ = ["WarpgroupLog", "run_at_exit", "warpgroup_collective"]
