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

WARPGROUP = 128


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
        for e in c.events:
            if not isinstance(e, PartialWarpgroup) or (e.what, e.site.location) in seen:
                continue
            seen.add((e.what, e.site.location))
            parts = []
            for cta, group, tids in e.groups:
                first = group * WARPGROUP
                where = f" of CTA {cta}" if report.p.ctas > 1 else ""
                parts.append(f"warpgroup {group} (threads {first}-{first + WARPGROUP - 1}"
                             f"{where}) has {len(tids)} of its {WARPGROUP} threads executing it "
                             f"({describe_threads(None, None, tids)})")
            text = (f"{e.what} at {e.site.text()} runs on part of a warpgroup: "
                    f"{'; '.join(parts)}. wgmma ops are warpgroup-collective (PTX "
                    f".sync.aligned): all {WARPGROUP} threads of the warpgroup execute each one "
                    "together, or the behaviour is undefined; issue it where whole warpgroups "
                    "run (a warp role), not under an lk.if_ on the thread index or "
                    "lk.sm90.elect_one()")
            report.add("warpgroup", e.site, c, text, e.what)


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
    for position, e in enumerate(c.events):
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
        report.add("wgmma commit", issue.site, c, lambda who: (
            f"{who} reaches the end of the kernel with the wgmma at {issue.site.text()} never "
            "committed: no lk.sm90.wgmma_commit() follows it, and lk.sm90.wgmma_wait retires "
            "committed groups only, so it may still read its shared operands and write its "
            "accumulator when the threads exit; lk.sm90.wgmma_commit() and lk.sm90.wgmma_wait(0) "
            "after it"))
    left = next(((pos, commit, issues) for pos, commit, issues in groups if issues), None)
    if left is None:
        return
    pos, commit, issues = left
    after = [w for p, w in waits if p > pos]
    waited = (f"the last lk.sm90.wgmma_wait after it, at {after[-1].site.text()}, leaves "
              f"{after[-1].pending} group(s) in flight") if after else \
        "no lk.sm90.wgmma_wait follows that commit"
    report.add("wgmma wait", issues[0].site, c, lambda who: (
        f"{who} reaches the end of the kernel with the wgmma at {issues[0].site.text()} still "
        f"in flight: it was committed at {commit.site.text()}, but {waited}, so it may still "
        "read its shared operands and write its accumulator when the threads exit; "
        "lk.sm90.wgmma_wait(0) before the end"))


def wgmma_findings(protocol: KernelProtocol) -> list[Finding]:
    """The findings of the rules in the module docstring, in the order listed there."""
    report = _Report(protocol)
    _warpgroups(report)
    for c in protocol.classes:
        _fence(report, c)
    for c in protocol.classes:
        _at_exit(report, c)
    return report.findings()


__all__ = ["PartialWarpgroup", "WgmmaFence", "WgmmaIssue", "wgmma_findings"]
