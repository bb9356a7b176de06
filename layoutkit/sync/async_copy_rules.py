"""The cp.async rule of the static protocol check (kernel_rules runs it after its own rules).

A cp.async (`AsyncWrite` of kind 'cp_async') writes its shared bytes asynchronously, in the
generic proxy (PTX ISA "cp.async"): they are complete for the issuing thread once its
cp.async.wait_group (`GroupWait`) retires the copy's commit group - a copy never committed is
retired by no wait - and for the other threads once a thread barrier follows that wait. A read
of those bytes, through any proxy, is therefore (kind "cp.async"):

- an error in the issuing class before the wait that retires the copy;
- in the issuing class after that wait but before its next barrier, when the class has more
  than one thread: an error for a warp-collective read (ldmatrix: each lane receives rows that
  other lanes address, which other threads copied), a warning for a read of each thread's own
  addresses (whether each thread reads only the bytes it copied itself is not decided);
- an error in another class that reads after the copy is issued (no block-wide barrier,
  lk.barrier() or lk.sm90.cluster_sync(), in between) and before a block-wide barrier that follows
  the retiring wait; a warning instead where either class uses named barriers, which may order
  the two in a way the block-wide count does not see.

Each is reported once per reading class and buffer. Byte ranges are spans per thread class
(layoutkit/dsl/check/extract.py, Extractor.shared_access), so overlaps are of spans.
"""
from __future__ import annotations

from dataclasses import dataclass

from .commit_groups import CommitGroups
from .kernel_model import AsyncWrite, Commit, Finding, GroupWait, SharedRead, ThreadBarrier

KIND = "cp_async"
FINDING = "cp.async"
ADVICE = ("lk.sm80.cp_async_commit(), lk.sm80.cp_async_wait(n) for that group, then lk.barrier() "
          "before reading the destination")


@dataclass
class Issued:
    """A cp.async of one class: its event, the number of block-wide barriers before it, and
    the wait that retires it (with that count), None while in flight."""

    write: AsyncWrite
    epoch: int
    wait: GroupWait | None = None
    wait_epoch: int | None = None


def _block_wide(e) -> bool:
    return isinstance(e, ThreadBarrier) and e.waits and e.ident in (0, "cluster")


def walk(rules, c) -> tuple[list, list]:
    """Apply the issuing-class rules to class `c`; return its copies (Issued) and its reads
    ((SharedRead, epoch))."""
    issued, reads = [], []
    epoch = 0
    groups = CommitGroups()     # copies in flight
    landed: list = []           # retired, but no barrier since the retiring wait
    for e in c.events:
        if isinstance(e, AsyncWrite) and e.kind == KIND:
            copy = Issued(e, epoch)
            issued.append(copy)
            groups.issue(copy)
        elif isinstance(e, Commit) and e.kind == KIND:
            groups.commit()
        elif isinstance(e, GroupWait) and e.kind == KIND:
            for copy in groups.wait(e.pending):
                copy.wait, copy.wait_epoch = e, epoch
                landed.append(copy)
        elif isinstance(e, ThreadBarrier) and e.waits:
            landed = []
            epoch += _block_wide(e)
        elif isinstance(e, SharedRead):
            reads.append((e, epoch))
            flying = [x for x in groups.in_flight() if x.write.bytes.overlaps(e.bytes)]
            if flying:
                copy = flying[0]
                why = ("its group is never committed before the read, so no lk.sm80.cp_async_wait "
                       "retires it" if copy in groups.open else
                       "no lk.sm80.cp_async_wait retires its commit group first")
                rules.add(FINDING, (c.who, e.bytes.buffer),
                          f"{c.who} reads {e.bytes.text()} at {e.site.text()} while its "
                          f"cp.async at {copy.write.site.text()} may still write them ({why}): "
                          f"{ADVICE}", e.site)
                continue
            seen = next((x for x in landed if x.write.bytes.overlaps(e.bytes)), None)
            if seen is not None and c.size > 1:
                _unpublished(rules, c, e, seen)
    return issued, reads


def _unpublished(rules, c, read: SharedRead, copy: Issued) -> None:
    head = (f"{c.who} reads {read.bytes.text()} at {read.site.text()} after its "
            f"lk.sm80.cp_async_wait at {copy.wait.site.text()} but before any lk.barrier(): the "
            "wait completes each thread's own copies only (the cp.async at "
            f"{copy.write.site.text()})")
    if read.collective:
        rules.add(FINDING, (c.who, read.bytes.buffer),
                  f"{head}, and the read is a warp's ldmatrix, whose lanes receive rows that "
                  "other threads copied; lk.barrier() after lk.sm80.cp_async_wait, then read",
                  read.site)
    else:
        warn(rules, (c.who, read.bytes.buffer),
             f"{head}; that each thread reads only bytes it copied itself was not proven: "
             "lk.barrier() after lk.sm80.cp_async_wait if threads read each other's copies",
             read.site)


def warn(rules, key, message: str, site) -> None:
    if (FINDING, key) not in rules.seen:
        rules.seen.add((FINDING, key))
        rules.findings.append(Finding(FINDING, False, message, site))


def cp_async(rules) -> None:
    """The rule of the module docstring over `rules.p` (a kernel_rules.Rules), adding its
    findings to `rules`."""
    classes = rules.p.classes
    if not any(c.select(AsyncWrite) for c in classes):
        return
    history = [walk(rules, c) for c in classes]
    named = [any(isinstance(e, ThreadBarrier) and e.ident not in (0, "cluster")
                 for e in c.events) for c in classes]
    for r, reader in enumerate(classes):
        for w, writer in enumerate(classes):
            if w == r:
                continue
            for read, read_epoch in history[r][1]:
                copy = next((x for x in history[w][0] if x.write.bytes.overlaps(read.bytes) and
                             x.epoch <= read_epoch and
                             (x.wait is None or read_epoch <= x.wait_epoch)), None)
                if copy is None:
                    continue
                retired = (f"it retires the copy at {copy.wait.site.text()}, but no lk.barrier() "
                           "after that wait comes before the read" if copy.wait is not None else
                           "it never retires the copy with lk.sm80.cp_async_wait")
                message = (f"{reader.who} reads {read.bytes.text()} at {read.site.text()} while "
                           f"{writer.who}'s cp.async at {copy.write.site.text()} may still write "
                           f"them ({retired}): the copying threads wait for their group, then "
                           "lk.barrier(), then other threads read")
                key = (reader.who, read.bytes.buffer)
                if named[r] or named[w]:
                    warn(rules, key, message + " (named barriers between the two classes were "
                         "not followed)", read.site)
                else:
                    rules.add(FINDING, key, message, read.site)
                break


__all__ = ["cp_async", "walk", "Issued"]
