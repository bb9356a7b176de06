"""The text of a deadlock: per CTA, groups of threads (whole warps where possible, named by
their warp role when they have one) and what each group waits on, with source lines, the
threads that already exited, each group's last sync action and the pending asynchronous
operations.

>>> compress([0, 1, 2, 3, 5, 7, 8])
'0-3, 5, 7-8'
"""
from __future__ import annotations

from .machine import WARP_SIZE, location_text


def compress(numbers) -> str:
    """'0-3, 5, 7-8' for [0, 1, 2, 3, 5, 7, 8]."""
    numbers = sorted(numbers)
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def who(tids: list[int], role: str | None) -> str:
    """'warps 0-2 (threads 0-95)', 'threads 3, 5-7 (warp 0)' or the role's name."""
    tids = sorted(tids)
    warps = sorted({t // WARP_SIZE for t in tids})
    whole = len(tids) == len(warps) * WARP_SIZE
    if whole:
        text = (f"warp{'s' if len(warps) > 1 else ''} {compress(warps)} "
                f"(threads {compress(tids)})")
    else:
        text = (f"thread{'s' if len(tids) > 1 else ''} {compress(tids)} "
                f"(warp{'s' if len(warps) > 1 else ''} {compress(warps)})")
    return f"{role}: {text}" if role else text


def _group(threads) -> dict:
    groups: dict = {}
    for t in threads:
        notes = "; ".join(f"last {text}" for _, text in sorted(t.notes.items()))
        if t.done:
            key = (t.role, "exited (ran off the end of the kernel)", notes)
        elif t.waiting is not None:
            key = (t.role, f"{t.waiting.describe()} ({location_text(t.waiting.op)})", notes)
        else:
            continue
        groups.setdefault(key, []).append(t.tid)
    return groups


def deadlock_report(threads, pending) -> str:
    """The message of a DeadlockError for the CTAs of `threads`."""
    lines = ["deadlock: no thread can run and no asynchronous operation can complete"]
    by_cta: dict = {}
    for t in threads:
        by_cta.setdefault(t.cta.coord, []).append(t)
    for coord, members in by_cta.items():
        if all(t.done for t in members):
            continue
        lines.append(f"  CTA {coord}:")
        groups = _group(members)
        waiting = [(k, v) for k, v in groups.items() if not k[1].startswith("exited")]
        exited = [(k, v) for k, v in groups.items() if k[1].startswith("exited")]
        for (role, what, notes), tids in sorted(waiting, key=lambda kv: min(kv[1])) + \
                sorted(exited, key=lambda kv: min(kv[1])):
            line = f"    {who(tids, role)} {what}"
            if notes:
                line += f"; {notes}"
            lines.append(line)
    for operation in pending:
        lines.append(f"  pending: {operation.describe()}")
    return "\n".join(lines)


__all__ = ["deadlock_report", "compress", "who"]
