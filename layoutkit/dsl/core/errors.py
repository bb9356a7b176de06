"""Trace-time errors: each names the thing, the offending value and the rule, and carries the
user's source line (file, line and the text of that line), never a path into layoutkit."""
from __future__ import annotations

import linecache

from layoutkit.ptx.builder import SourceLocation, user_location


class DSLError(Exception):
    """Base of every error the kernel DSL raises for a user mistake; `location` is the user's
    source line (a `SourceLocation`) when known."""

    def __init__(self, message: str, location: SourceLocation | None = None):
        self.message = message
        self.location = location if location is not None else user_location(2)
        super().__init__(self._text())

    def _text(self) -> str:
        if self.location is None:
            return self.message
        line = linecache.getline(self.location.file, self.location.line).strip()
        where = f"{self.location.file}:{self.location.line}"
        return f"{where}: {self.message}" + (f"\n    {line}" if line else "")

    def relocate(self, location: SourceLocation | None) -> "DSLError":
        """Point the error at `location` (used when the user's frame is found later)."""
        if location is not None:
            self.location = location
            self.args = (self._text(),)
        return self


class KernelDefinitionError(DSLError):
    """The decorated function cannot be a kernel (missing or unknown annotation, bad num_warps)."""


class KernelArgumentError(DSLError, TypeError):
    """A launch/introspection argument does not fit its parameter annotation."""


class ConstexprError(DSLError):
    """A constexpr argument is missing, unhashable, or used where a runtime value is needed."""


class LayoutMismatchError(DSLError):
    """Two operands of one op have different layouts (layoutkit never converts implicitly)."""


class TraceError(DSLError):
    """Any other mistake found while tracing a kernel (wrong operand type, bad range, ...)."""


class SharedMemoryError(DSLError):
    """The kernel's shared memory exceeds the per-block limit, or a shared layout is unusable."""


class VerifierError(DSLError):
    """The IR broke a structural rule (a bug in a DSL op, or a value used outside its region)."""


def user_frame_location(tb) -> SourceLocation | None:
    """The innermost traceback frame outside layoutkit (where the user's kernel called in)."""
    found = None
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if not (name == "layoutkit" or name.startswith("layoutkit.")):
            found = SourceLocation(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def here() -> SourceLocation | None:
    """The user's current source line (first frame outside layoutkit)."""
    return user_location(2)


__all__ = ["DSLError", "KernelDefinitionError", "KernelArgumentError", "ConstexprError",
           "LayoutMismatchError", "TraceError", "SharedMemoryError", "VerifierError",
           "user_frame_location", "here"]
