"""One line of a kernel body: an instruction, a label, a comment or an unchecked raw string."""
from __future__ import annotations

from dataclasses import dataclass

from .operands import Label, NotPred, Reg
from .source_location import SourceLocation

INDENT = "    "


@dataclass(frozen=True)
class Instruction:
    """`opcode operands;` optionally guarded by `@pred`. `defs` are the registers it writes
    (checked for single assignment); `location` is the user's source line."""

    opcode: str
    operands: tuple = ()
    defs: tuple[Reg, ...] = ()
    guard: "Reg | NotPred | None" = None
    location: SourceLocation | None = None

    def text(self) -> str:
        guard = f"@{self.guard} " if self.guard is not None else ""
        args = " " + ", ".join(str(o) for o in self.operands) if self.operands else ""
        return f"{INDENT}{guard}{self.opcode}{args};"


@dataclass(frozen=True)
class RawInstruction:
    """Statements the builder does not check (escape hatch, see raw_text); marked in the output.
    ``source`` is the text as Kernel.raw accepted it, ended by ';' or '}'."""

    source: str
    location: SourceLocation | None = None

    def text(self) -> str:
        first, *rest = self.source.strip().split("\n")
        return "\n".join([f"{INDENT}{first}  // unchecked", *(INDENT + line for line in rest)])


@dataclass(frozen=True)
class LabelLine:
    label: Label
    location: SourceLocation | None = None

    def text(self) -> str:
        return f"{self.label}:"


@dataclass(frozen=True)
class Comment:
    text_: str
    location: SourceLocation | None = None

    def text(self) -> str:
        return f"{INDENT}// {self.text_}"


BodyLine = "Instruction | RawInstruction | LabelLine | Comment"
