"""The wgmma rules of the static protocol check, over each thread class's events in program
order (the class is one exact path through the kernel: its branches, warp role and loop trip
counts), with the events the DSL's wgmma ops add to the model (defined here):

- warpgroup: a warpgroup-collective op (wgmma, wgmma.fence, wgmma.commit_group,
  wgmma.wait_group: PTX `.sync.aligned`) executed by only some threads of a warpgroup (an
  lk.if_ on the thread index, lk.sm90.elect_one(), a loop whose trip count differs per thread);
- wgmma fence: a class's wgmma with no wgmma.fence before it (PTX ISA "wgmma.fence": required
  before a warpgroup's first wgmma; the fences after register writes are the DSL's accumulator
  check, on the IR);
- wgmma commit: the class ends (the kernel exits for its threads) with a wgmma issued after its
  last wgmma.commit_group, which no wgmma.wait_group can retire;
- wgmma wait: the class ends with a committed wgmma group that no wgmma.wait_group retired
  (empty groups count, as in PTX: a commit with no wgmma since the last one is a group).
A release of a ring stage while a wgmma reading it is in flight is kernel_rules' "wgmma
overwrite". Each finding names the wgmma's line; the threads of every class with the same
finding at one line are named together.

>>> from layoutkit.sync import kernel_model as km
>>> site = km.Site(None)
>>> c = km.ThreadClass("consumer", 0, tuple(range(128, 256)),
...                    [WgmmaFence(site), WgmmaIssue(site), km.Commit("wgmma", site)])
>>> print(wgmma_findings(km.KernelProtocol("k", {}, [c]))[0].text())  # doctest: +ELLIPSIS
wgmma wait: role 'consumer' (threads 128-255) reaches the end of the kernel with the wgmma at line ? still in flight: ...
"""
from __future__ import annotations

from dataclasses import dataclass

from .kernel_model import (Commit, Finding, GroupWait, KernelProtocol, Site, ThreadClass,
                           describe_threads)
from .roles import WARPGROUP_THREADS as WARPGROUP


# ---- the events (the DSL's wgmma ops emit them; see layoutkit/dsl/sm90/wgmma/ops.py) --------
@dataclass(frozen=True)
class WgmmaIssue:
    """wgmma.mma_async issued by the class (its reads of shared operands are SharedReads)."""

    site: Site


@dataclass(frozen=True)
class WgmmaFence:
    """wgmma.fence."""

    site: Site


@dataclass(frozen=True)
class PartialWarpgroup:
    """The warpgroup-collective op `what` executed, at `site`, by only some threads of the
    warpgroups in `groups`: ((cta, warpgroup index in the CTA, executing thread indices), ...)."""

    what: str
    site: Site
    groups: tuple


# ---- the texts (the CPU interpreter reports the same findings of one run in these words) ----
def warpgroup_part(group: int, tids, where: str = "") -> str:
    """How warpgroup `group` (of a CTA: `where`, e.g. " of CTA 1") ran an op: with `tids`."""
    first = group * WARPGROUP
    return (f"warpgroup {group} (threads {first}-{first + WARPGROUP - 1}{where}) has {len(tids)} "
            f"of its {WARPGROUP} threads executing it ({describe_threads(None, None, tids)})")


def partial_warpgroup_text(what: str, at: str, parts: list[str]) -> str:
    """The warpgroup rule's text: the op `what` at `at` ("line N") ran on the warpgroup_parts."""
    return (f"{what} at {at} runs on part of a warpgroup: {'; '.join(parts)}. wgmma ops are "
            f"warpgroup-collective (PTX .sync.aligned): all {WARPGROUP} threads of the warpgroup "
            "execute each one together, or the behaviour is undefined; issue it where whole "
            "warpgroups run (a warp role), not under an lk.if_ on the thread index or "
            "lk.sm90.elect_one()")


def uncommitted_text(who: str, at: str) -> str:
    """The wgmma commit rule's text: `who` exits with the wgmma at `at` never committed."""
    return (f"{who} reaches the end of the kernel with the wgmma at {at} never committed: no "
            "lk.sm90.wgmma_commit() follows it, and lk.sm90.wgmma_wait retires committed groups "
            "only, so it may still read its shared operands and write its accumulator when the "
            "threads exit; lk.sm90.wgmma_commit() and lk.sm90.wgmma_wait(0) after it")


def in_flight_text(who: str, at: str, committed_at: str, last_wait: tuple | None) -> str:
    """The wgmma wait rule's text: `who` exits with the wgmma at `at`, committed at
    `committed_at`, in flight; `last_wait`: (where, pending) of the last wait after that commit."""
    waited = (f"the last lk.sm90.wgmma_wait after it, at {last_wait[0]}, leaves {last_wait[1]} "
              "group(s) in flight") if last_wait else "no lk.sm90.wgmma_wait follows that commit"
    return (f"{who} reaches the end of the kernel with the wgmma at {at} still in flight: it was "
            f"committed at {committed_at}, but {waited}, so it may still read its shared "
            "operands and write its accumulator when the threads exit; lk.sm90.wgmma_wait(0) "
            "before the end")


# ---- the rules -------------------------------------------------------------------------------
class _Report:
    """Findings keyed by (kind, line): the classes with the same finding are named together."""

    def __init__(self, protocol: KernelProtocol):
        self.p = protocol
        self.found: dict[tuple, list] = {}      # key -> [kind, site, message, classes]

    def add(self, kind: str, site: Site, c: ThreadClass, message, what: str = "") -> None:
        """`message`: the text, or a function of the threads' description giving it."""
        key = (kind, what, site.location)
        entry = self.found.get(key)
        if entry is None:
            self.found[key] = [kind, site, message, [c]]
        elif c not in entry[3]:
            entry[3].append(c)

    def who(self, classes: list) -> str:
        first = classes[0]
        if all((c.role, c.cta) == (first.role, first.cta) for c in classes):
            tids = [t for c in classes for t in c.tids]
            return describe_threads(first.role, first.cta if first.in_cluster else None, tids)
        return " and ".join(c.who for c in classes)

    def findings(self) -> list[Finding]:
        return [Finding(kind, True, message if isinstance(message, str) else
                        message(self.who(classes)), site)
                for kind, site, message, classes in self.found.values()]


def _warpgroups(report: _Report) -> None:
    seen: set = set()
    for c in report.p.classes:
        for _, e in c.select(PartialWarpgroup):
            if (e.what, e.site.location) in seen:
                continue
            seen.add((e.what, e.site.location))
            parts = [warpgroup_part(group, tids, f" of CTA {cta}" if report.p.ctas > 1 else "")
                     for cta, group, tids in e.groups]
            report.add("warpgroup", e.site, c,
                       partial_warpgroup_text(e.what, e.site.text(), parts), e.what)


def _fence(report: _Report, c: ThreadClass) -> None:
    for e in c.events:
        if isinstance(e, WgmmaFence):
            return
        if isinstance(e, WgmmaIssue):
            report.add("wgmma fence", e.site, c, lambda who, e=e: (
                f"{who} issues the wgmma at {e.site.text()} with no lk.sm90.wgmma_fence() before "
                "it: PTX requires wgmma.fence before a warpgroup's first wgmma (registers "
                "other instructions wrote are not yet visible to the tensor cores; PTX ISA "
                "'wgmma.fence'); call lk.sm90.wgmma_fence() before it"))
            return


def _at_exit(report: _Report, c: ThreadClass) -> None:
    uncommitted: list = []               # WgmmaIssues since the last commit
    groups: list = []                    # (Commit, [WgmmaIssue]) in flight, oldest first
    waits: list = []                     # (position, GroupWait) of each wgmma wait
    for position, e in c.select(WgmmaIssue, Commit, GroupWait):
        if isinstance(e, WgmmaIssue):
            uncommitted.append(e)
        elif isinstance(e, Commit) and e.kind == "wgmma":
            groups.append((position, e, uncommitted))
            uncommitted = []
        elif isinstance(e, GroupWait) and e.kind == "wgmma":
            groups = groups[len(groups) - e.pending:] if e.pending else []
            waits.append((position, e))
    if uncommitted:
        issue = uncommitted[0]
        report.add("wgmma commit", issue.site, c,
                   lambda who: uncommitted_text(who, issue.site.text()))
    left = next(((pos, commit, issues) for pos, commit, issues in groups if issues), None)
    if left is None:
        return
    pos, commit, issues = left
    after = [w for p, w in waits if p > pos]
    last = (after[-1].site.text(), after[-1].pending) if after else None
    report.add("wgmma wait", issues[0].site, c, lambda who: in_flight_text(
        who, issues[0].site.text(), commit.site.text(), last))


def wgmma_findings(protocol: KernelProtocol) -> list[Finding]:
    """The findings of the rules in the module docstring, in the order listed there."""
    report = _Report(protocol)
    _warpgroups(report)
    for c in protocol.classes:
        _fence(report, c)
    for c in protocol.classes:
        _at_exit(report, c)
    return report.findings()


__all__ = ["PartialWarpgroup", "WgmmaFence", "WgmmaIssue", "wgmma_findings", "warpgroup_part",
           "partial_warpgroup_text", "uncommitted_text", "in_flight_text"]
