"""``PTXAssemblyError``: a failed ptxas run, explained with the PTX line and the Python line.

ptxas reports ``ptxas <file>, line N; error : ...`` (and C7602 says ``... at line N in
function f``). The error quotes line N of the PTX with a little context and, when
``.file K "path"`` / ``.loc K line col`` directives precede it in the same function,
the Python ``path:line`` that emitted it.
"""
from __future__ import annotations

import re

from .toolchain import ToolchainError
from .builder.source_location import SourceLocation

_LINE_REFS = (re.compile(r", line (\d+);"), re.compile(r"\bat line (\d+)\b"))
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"((?:[^"\\]|\\.)*)"')
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)(?:\s+(\d+))?")
_FUNCTION_START = re.compile(r"^\s*(?:\.(?:visible|extern|weak)\s+)?\.(?:entry|func)\b")
_CONTEXT = 2        # PTX lines shown on each side of the offending one
_MAX_EXCERPTS = 5   # offending lines quoted in one message


class PTXAssemblyError(ToolchainError):
    """ptxas rejected the PTX. Carries ptxas's ``diagnostics`` and the offending lines.

    ``ptx_lines`` are the 1-based PTX line numbers ptxas named (in its order, no repeats);
    ``source`` maps each to the ``SourceLocation`` (Python file:line) that emitted it, where known.
    """

    def __init__(self, message: str, *, diagnostics: str, command: tuple[str, ...],
                 ptx_lines: tuple[int, ...] = (), source: dict[int, SourceLocation] | None = None):
        super().__init__(message)
        self.diagnostics = diagnostics
        self.command = command
        self.ptx_lines = ptx_lines
        self.source = source or {}

    def __reduce__(self):  # keyword-only arguments: pickle (multiprocessing) needs help
        return (_rebuild_error, (str(self), self.diagnostics, self.command, self.ptx_lines,
                                 self.source))

    @property
    def source_location(self) -> SourceLocation | None:
        """The Python location of the first offending PTX line, if the PTX records it."""
        return next((self.source[n] for n in self.ptx_lines if n in self.source), None)


def _rebuild_error(message, diagnostics, command, ptx_lines, source) -> PTXAssemblyError:
    return PTXAssemblyError(message, diagnostics=diagnostics, command=command,
                            ptx_lines=ptx_lines, source=source)


def assembly_error(ptx: str, log: str, *, arch: str, returncode: int,
                   command: tuple[str, ...]) -> PTXAssemblyError:
    """Build the ``PTXAssemblyError`` for a ptxas run that exited with ``returncode``.

    >>> ptx = '.version 8.0\\n.file 1 "k.py"\\n.entry k()\\n{\\n.loc 1 7 4\\nbogus;\\n}\\n'
    >>> log = "ptxas input.ptx, line 6; error   : Not a name of any known instruction: 'bogus'"
    >>> err = assembly_error(ptx, log, arch="sm_90a", returncode=255, command=("ptxas",))
    >>> err.ptx_lines, str(err.source_location)
    ((6,), 'k.py:7')
    """
    diagnostics = "\n".join(line for line in log.splitlines()
                            if "error" in line or "fatal" in line) or log.strip()
    lines = _referenced_lines(diagnostics, ptx.count("\n") + 1)
    source = {n: loc for n in lines if (loc := ptx_loc(ptx, n)) is not None}
    parts = [f"ptxas rejected the PTX for {arch} (exit status {returncode}):",
             _indent(diagnostics)]
    text_lines = ptx.splitlines()
    for number in lines[:_MAX_EXCERPTS]:
        where = f" (emitted by {source[number]})" if number in source else ""
        parts.append(f"PTX line {number}{where}:")
        parts.append(_excerpt(text_lines, number))
    if len(lines) > _MAX_EXCERPTS:
        parts.append(f"... and {len(lines) - _MAX_EXCERPTS} more PTX lines named above")
    return PTXAssemblyError("\n".join(parts), diagnostics=log, command=command,
                            ptx_lines=tuple(lines), source=source)


def ptx_loc(ptx: str, line_number: int) -> SourceLocation | None:
    """The Python location of PTX line ``line_number`` (1-based): the last ``.loc`` before it
    inside the same function, resolved through the module's ``.file`` table."""
    files: dict[int, str] = {}
    loc = None
    for number, line in enumerate(ptx.splitlines(), start=1):
        if number > line_number:
            break
        if match := _FILE.match(line):
            files[int(match.group(1))] = match.group(2).replace('\\"', '"')
        elif match := _LOC.match(line):
            column = int(match.group(3)) if match.group(3) else 0
            loc = (int(match.group(1)), int(match.group(2)), column)
        elif _FUNCTION_START.match(line):
            loc = None
    if loc is None or loc[0] not in files:
        return None
    return SourceLocation(files[loc[0]], loc[1], loc[2])


def _referenced_lines(diagnostics: str, line_count: int) -> list[int]:
    seen: list[int] = []
    for text in diagnostics.splitlines():
        for pattern in _LINE_REFS:
            for match in pattern.finditer(text):
                number = int(match.group(1))
                if 1 <= number <= line_count and number not in seen:
                    seen.append(number)
    return seen


def _excerpt(lines: list[str], number: int) -> str:
    first, last = max(1, number - _CONTEXT), min(len(lines), number + _CONTEXT)
    width = len(str(last))
    return "\n".join(f"  {'>' if n == number else ' '} {n:>{width}} | {lines[n - 1]}"
                     for n in range(first, last + 1))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
