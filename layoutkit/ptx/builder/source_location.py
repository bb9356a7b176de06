"""The user's source line for an instruction: the first Python frame outside layoutkit.

The builder stamps each instruction with it and emits `.file`/`.loc` so ptxas, profilers and
compute-sanitizer map SASS back to the Python line that asked for it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

# Frames of these modules are plumbing, never the user's line.
_PLUMBING = ("contextlib", "functools")


@dataclass(frozen=True, order=True)
class SourceLocation:
    """A Python source position: file path, 1-based line, 0-based column (0 when unknown)."""

    file: str
    line: int
    column: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def _is_internal(module_name: str) -> bool:
    return (module_name == "layoutkit" or module_name.startswith("layoutkit.")
            or module_name in _PLUMBING)


def user_location(skip: int = 1) -> SourceLocation | None:
    """The first frame above the caller whose module is not layoutkit (None when there is none)."""
    frame = sys._getframe(skip)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not _is_internal(name):
            return SourceLocation(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return None
