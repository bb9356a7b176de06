"""PTX targets and ISA versions: what each `.target` needs and what an instruction requires.

Facts (hopper-ptx.md §0): ptxas 13.0 accepts `.version` up to 9.0; sm_90a needs 8.0 (plain
sm_90 from 7.8); layoutkit emits 8.0 unless a used instruction needs more.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

DEFAULT_VERSION = (8, 0)
MAX_VERSION = (9, 0)
DEFAULT_TARGET = "sm_90a"

# Lowest PTX ISA version that accepts each `.target` (PTX ISA, "Release notes" table).
TARGET_MIN_VERSION = {
    "sm_80": (7, 0), "sm_86": (7, 1), "sm_87": (7, 4), "sm_89": (7, 8),
    "sm_90": (7, 8), "sm_90a": (8, 0),
    "sm_100": (8, 6), "sm_100a": (8, 6), "sm_120": (8, 7), "sm_120a": (8, 7),
}


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: "str | tuple[int, int]") -> tuple[int, int]:
    """'8.3' -> (8, 3); tuples pass through.

    >>> parse_version("8.6")
    (8, 6)
    """
    if isinstance(text, tuple):
        return text
    match = re.fullmatch(r"(\d+)\.(\d+)", str(text))
    if not match:
        from .errors import PTXTargetError
        raise PTXTargetError("a PTX ISA version is written MAJOR.MINOR, e.g. '8.0'",
                             operand=".version", value=text)
    return int(match[1]), int(match[2])


@dataclass(frozen=True)
class Target:
    """A `.target` such as sm_90a: `sm` = 90, `arch_specific` = True for the 'a' variants."""

    name: str

    @cached_property
    def sm(self) -> int:
        return int(re.fullmatch(r"sm_(\d+)a?", self.name)[1])

    @property
    def arch_specific(self) -> bool:
        return self.name.endswith("a")

    @property
    def min_version(self) -> tuple[int, int]:
        return TARGET_MIN_VERSION[self.name]

    @classmethod
    def parse(cls, name: str) -> "Target":
        if name not in TARGET_MIN_VERSION:
            from .errors import PTXTargetError
            raise PTXTargetError(f"unsupported target; layoutkit knows {', '.join(TARGET_MIN_VERSION)}",
                                 operand=".target", value=name)
        return cls(name)


@dataclass(frozen=True)
class Requirement:
    """What an instruction form needs: lowest PTX ISA `version`, lowest `sm`, and whether it
    exists only on the arch-specific target of exactly that sm (wgmma, setmaxnreg: sm_90a)."""

    version: tuple[int, int] = (7, 0)
    sm: int = 80
    arch_specific: bool = False

    def problem(self, target: Target) -> str | None:
        """Why `target` cannot run this form, or None."""
        if target.sm < self.sm:
            return f"needs sm_{self.sm} or newer, the module targets {target.name}"
        if self.arch_specific and not (target.arch_specific and target.sm == self.sm):
            return f"exists only on sm_{self.sm}a, the module targets {target.name}"
        return None


BASELINE = Requirement()
