"""The ``ptxas -v`` resource report, parsed per entry, and the warnings it warrants.

ptxas 13 prints, per entry function (on stderr)::

    ptxas info    : Compiling entry function 'k' for 'sm_90a'
    ptxas info    : Function properties for k
        8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 24 registers, used 1 barriers, 8 bytes cumulative stack size, 8 bytes smem

Each field of the ``Used`` line is matched on its own: the smem and cumulative stack
parts appear only when nonzero, and older releases print ``N bytes cmem[K]`` banks.
``(C7508) ... 'setmaxnreg' ignored`` is printed once per affected entry, before any
entry's block, so it is attributed by reading the PTX (see ``_entries_ignoring_setmaxnreg``).
Other ``(C75xx)`` infos (wgmma serialized, ``warpgroup.wait``/``arrive`` injected: the
pipeline the author wrote is not the one that runs) name their function and are kept as the
entry's ``performance_notes``. ``entry_directives`` reads each entry's performance directives
(``.reqntid``, ``.minnctapersm``, ``.maxnreg``, ...) from the PTX, for a report beside them.
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CUMULATIVE = re.compile(r"(\d+) bytes cumulative stack size")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_C7508 = "(C7508)"
_PERFORMANCE_NOTE = re.compile(r"ptxas info\s*: (\(C75\d\d\)[^\n]*?) in function '([^']+)'")


class PtxasWarning(UserWarning):
    """Base class of the warnings layoutkit raises from a ptxas report."""


class RegisterSpillWarning(PtxasWarning):
    """ptxas spilled registers of an entry to local memory (slow, usually unintended)."""


class SetmaxnregIgnoredWarning(PtxasWarning):
    """ptxas dropped ``setmaxnreg`` (C7508): the entry has no register cap at entry."""


class PtxasPerformanceWarning(PtxasWarning):
    """ptxas changed the author's wgmma pipeline (C75xx: wgmmas serialized, waits or fences
    injected), usually because other instructions touch accumulator registers in flight."""


class PtxasReportError(RuntimeError):
    """ptxas succeeded but its ``-v`` report lacks a field layoutkit needs."""


@dataclass(frozen=True)
class ResourceUsage:
    """One entry's resources, as ptxas reports them. Sizes in bytes, registers per thread.

    ``shared_bytes`` is static shared memory only (dynamic shared memory is a launch
    argument). ``constant_bytes`` maps a constant bank to its size, when ptxas reports it
    (ptxas 13 does not for sm_90). ``setmaxnreg_ignored`` is ptxas's C7508.
    """

    name: str
    registers: int
    barriers: int = 0
    shared_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    cumulative_stack_bytes: int = 0
    constant_bytes: Mapping[int, int] = field(default_factory=dict, hash=False)
    setmaxnreg_ignored: bool = False
    performance_notes: tuple[str, ...] = ()

    @property
    def spills(self) -> bool:
        """True when ptxas spilled registers to local memory."""
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    def to_json(self) -> dict:
        """A JSON-ready dict; ``ResourceUsage.from_json`` inverts it."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["constant_bytes"] = {str(bank): size for bank, size in self.constant_bytes.items()}
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> ResourceUsage:
        fields = dict(data)
        fields["constant_bytes"] = {int(b): int(s) for b, s in fields["constant_bytes"].items()}
        fields["performance_notes"] = tuple(fields.get("performance_notes", ()))
        return cls(**fields)


def parse_ptxas_report(log: str, ptx: str = "") -> dict[str, ResourceUsage]:
    """Parse a ``ptxas -v`` log into ``{entry name: ResourceUsage}``, in ptxas's order.

    ``ptx`` (the assembled text) lets a C7508 line be attributed to its entry.

    >>> log = '''ptxas info    : Compiling entry function 'k' for 'sm_90a'
    ... ptxas info    : Function properties for k
    ...     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ... ptxas info    : Used 24 registers, used 1 barriers, 8 bytes cumulative stack size, 8 bytes smem'''
    >>> usage = parse_ptxas_report(log)["k"]
    >>> usage.registers, usage.barriers, usage.shared_bytes, usage.cumulative_stack_bytes
    (24, 1, 8, 8)
    """
    found: dict[str, dict] = {}
    entry = None          # the entry whose block we are in
    properties_of = None  # the function the next stack-frame line describes
    for line in log.splitlines():
        if match := _COMPILING.search(line):
            entry = match.group(1)
            found[entry] = {"name": entry}
            properties_of = None
        elif match := _PROPERTIES.search(line):
            properties_of = match.group(1)
        elif match := _FRAME.search(line):
            if entry is not None and properties_of == entry:
                found[entry].update(stack_frame_bytes=int(match.group(1)),
                                    spill_store_bytes=int(match.group(2)),
                                    spill_load_bytes=int(match.group(3)))
            properties_of = None
        elif (match := _USED.search(line)) and entry is not None:
            fields = found[entry]
            fields["registers"] = int(match.group(1))
            for key, pattern in (("barriers", _BARRIERS), ("shared_bytes", _SMEM),
                                 ("cumulative_stack_bytes", _CUMULATIVE)):
                if sub := pattern.search(line):
                    fields[key] = int(sub.group(1))
            fields["constant_bytes"] = {int(b): int(s) for s, b in _CMEM.findall(line)}
    for name, fields in found.items():
        if "registers" not in fields:
            raise PtxasReportError(
                f"ptxas's -v report has no 'Used N registers' line for entry '{name}'; "
                f"layoutkit cannot read this ptxas's output format. The report:\n{log}")
    ignoring = _entries_ignoring_setmaxnreg(log.count(_C7508), ptx, list(found))
    notes: dict[str, list[str]] = {}
    for note, function in _PERFORMANCE_NOTE.findall(log):
        notes.setdefault(function, []).append(note)
    return {name: ResourceUsage(**fields, setmaxnreg_ignored=name in ignoring,
                                performance_notes=tuple(notes.get(name, ())))
            for name, fields in found.items()}


def warn_about(resources: Mapping[str, ResourceUsage], *, stacklevel: int = 2) -> None:
    """Issue a RegisterSpillWarning / PtxasPerformanceWarning / SetmaxnregIgnoredWarning for
    each entry that needs one."""
    for usage in resources.values():
        if usage.spills:
            warnings.warn(RegisterSpillWarning(
                f"ptxas spilled registers of entry '{usage.name}' to local memory: "
                f"{usage.spill_store_bytes} bytes spill stores, {usage.spill_load_bytes} bytes "
                f"spill loads ({usage.registers} registers used, {usage.stack_frame_bytes} bytes "
                "stack frame); raise the register cap (.maxnreg) or reduce live values"),
                stacklevel=stacklevel + 1)
        if usage.performance_notes:
            warnings.warn(PtxasPerformanceWarning(
                f"ptxas changed the wgmma pipeline of entry '{usage.name}': "
                + "; ".join(usage.performance_notes)
                + " (keep accumulator and A-operand registers untouched between a wgmma and "
                "the wait_group that covers it)"), stacklevel=stacklevel + 1)
        if usage.setmaxnreg_ignored:
            warnings.warn(SetmaxnregIgnoredWarning(
                f"ptxas ignored setmaxnreg in entry '{usage.name}' (C7508: unable to determine "
                "register count at entry); give the entry a register cap: .maxnreg N, or "
                ".maxntid with .minnctapersm"), stacklevel=stacklevel + 1)


# --- the entries' performance directives ---------------------------------------------------

_DIRECTIVE = re.compile(r"\.(maxntid|reqntid|minnctapersm|maxnctapersm|maxnreg|"
                        r"reqnctapercluster|maxclusterrank)\s+(\d+(?:\s*,\s*\d+)*)")


def entry_directives(ptx: str) -> dict[str, dict[str, tuple[int, ...]]]:
    """The performance-tuning directives of each entry in PTX text, as ptxas reads them:
    ``{entry: {directive without the dot: its numbers}}``, in the entries' order.

    >>> entry_directives(".visible .entry k(.param .u64 p)\\n.reqntid 384, 1, 1\\n"
    ...                  ".minnctapersm 1\\n{\\nret;\\n}\\n")
    {'k': {'reqntid': (384, 1, 1), 'minnctapersm': (1,)}}
    """
    return {entry: {name: tuple(int(n) for n in numbers.split(","))
                    for name, numbers in _DIRECTIVE.findall(head)}
            for entry, (head, _) in _entry_sources(ptx).items()}


# --- C7508 attribution -------------------------------------------------------------------

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY_HEAD = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)")


def _entries_ignoring_setmaxnreg(count: int, ptx: str, entries: list[str]) -> set[str]:
    """The ``count`` entries that ptxas's C7508 lines refer to.

    ptxas names no entry in C7508, so read the PTX: the candidates are the entries that
    execute setmaxnreg; among them, those without a cap at entry (.maxnreg, or .maxntid
    with .minnctapersm; see hopper-ptx §6) when that accounts for every C7508 line.
    Without the PTX, or if the count does not match, every candidate is flagged rather
    than none: a false alarm costs a look, a missed one costs performance silently.
    """
    if count == 0:
        return set()
    if len(entries) == 1:
        return set(entries)
    heads = _entry_sources(ptx)
    users = [e for e in entries if "setmaxnreg" in heads.get(e, ("", ""))[1]]
    uncapped = [e for e in users if not _has_entry_cap(heads[e][0])]
    if len(uncapped) == count:
        return set(uncapped)
    return set(users) if users else set(entries)


def _entry_sources(ptx: str) -> dict[str, tuple[str, str]]:
    """``{entry: (directives between its name and body, body text)}``, comments removed."""
    text = _COMMENT.sub("", ptx)
    out = {}
    for match in _ENTRY_HEAD.finditer(text):
        open_at = text.find("{", match.end())
        if open_at < 0:
            continue
        # The parameter list sits in parentheses before the directives; skip it.
        close_params = text.rfind(")", match.end(), open_at)
        head = text[close_params + 1 if close_params >= 0 else match.end():open_at]
        depth, pos = 0, open_at
        while pos < len(text):
            depth += {"{": 1, "}": -1}.get(text[pos], 0)
            if depth == 0:
                break
            pos += 1
        out[match.group(1)] = (head, text[open_at:pos + 1])
    return out


def _has_entry_cap(head: str) -> bool:
    return ".maxnreg" in head or (".maxntid" in head and ".minnctapersm" in head)
