"""Errors raised while building PTX: each names the instruction, the operand, its value and the rule.

Every error carries the user's source line (the first Python frame outside layoutkit), so a
message points at the line of the kernel that asked for the bad instruction.
"""
from __future__ import annotations

from .source_location import SourceLocation, user_location

_UNSET = object()


def describe(value: object) -> str:
    """How an offending value is shown in a message: registers with their type, others by repr."""
    reg_type = getattr(value, "type", None)
    name = getattr(value, "name", None)
    if reg_type is not None and name is not None:
        return f"{name} (.{reg_type})"
    return repr(value)


class PTXBuildError(ValueError):
    """A request the builder refuses because ptxas would reject it or it would be wrong.

    >>> str(PTXBuildError("must be 1..32", instruction="shfl.sync", operand="c", value=0,
    ...                   location=None))
    'shfl.sync: operand c = 0: must be 1..32'
    """

    def __init__(self, rule: str, *, instruction: str | None = None, operand: str | None = None,
                 value: object = _UNSET, location: SourceLocation | None | object = _UNSET):
        self.rule = rule
        self.instruction = instruction
        self.operand = operand
        self.value = None if value is _UNSET else value
        self.location = user_location() if location is _UNSET else location
        head = ""
        if instruction:
            head = f"{instruction}: "
        if operand:
            head += f"operand {operand}"
            if value is not _UNSET:
                head += f" = {describe(value)}"
            head += ": "
        elif value is not _UNSET:
            head += f"{describe(value)}: "
        message = head + rule
        if self.location is not None:
            message += f" (at {self.location})"
        super().__init__(message)


class PTXTypeError(PTXBuildError):
    """An operand whose PTX type does not fit the instruction (e.g. an .f32 register in add.u32)."""


class PTXRangeError(PTXBuildError):
    """An immediate, id, width or count outside the range the instruction allows."""


class PTXSSAError(PTXBuildError):
    """A single-assignment register written twice (loop-carried values must use KernelBuilder.var), or
    a register read but never written."""


class PTXLabelError(PTXBuildError):
    """A label branched to but never placed, or placed twice."""


class PTXDirectiveError(PTXBuildError):
    """A kernel directive, parameter or declaration that PTX forbids or ptxas would ignore."""


class PTXTargetError(PTXBuildError):
    """An instruction that the module's .target or fixed .version does not support."""
