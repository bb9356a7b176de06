"""Specialization keys in words: what `kernel.specializations()` lists and the on-disk cache
records. One cell per parameter:

    Tensor    (extents):(strides) facts, e.g. (16,+):(+,1) — '16' a multiple of 16 (elements for an
              extent, bytes for a stride), '+' any other positive value, '1' / '0' the constant —
              then 'unaligned' when the address is not 16-byte aligned and '64-bit' when an
              extent, stride or offset does not fit 32 bits
    Pointer   'aligned' (16 bytes) or 'unaligned'
    integer   '=1', '%16' (a positive multiple of 16), '>0' (positive) or 'any'
    float     '-' (never specialized)
    constexpr its value

and the options: target, ' debug', ' cluster XxYxZ'. A parameter named in do_not_specialize is
marked '(nospec)' in the header: its cells show the facts that still specialize it (an integer's
sign; a tensor's strides and alignment).
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["fact_text", "options_text", "describe_key", "SpecializationRow",
           "SpecializationTable"]

_INT = {"1": "=1", "16": "%16", "+": ">0", "": "any"}


def fact_text(p, entry) -> str:
    """The words of parameter `p`'s key entry (see the module docstring)."""
    if p.kind == "constexpr":
        return repr(entry[1])
    if p.kind == "pointer":
        return "aligned" if entry else "unaligned"
    if p.kind == "tensor":
        rank = p.annotation.rank
        aligned, narrow = entry[0], entry[1]
        text = f"({','.join(entry[2:2 + rank])}):({','.join(entry[2 + rank:])})"
        return text + ("" if aligned else " unaligned") + ("" if narrow else " 64-bit")
    if p.annotation.is_int:
        return _INT[entry]
    return "-"


def options_text(options) -> str:
    """The KernelOptions in words: 'sm_90a', 'sm_90a debug cluster 2x1x1'."""
    text = options.target + (" debug" if options.debug else "")
    if options.cluster is not None:
        text += " cluster " + "x".join(map(str, options.cluster))
    return text


def describe_key(params, key: tuple) -> str:
    """One line: `name=facts` per parameter, then the options.

    >>> from layoutkit.dsl.core.arguments import parameter
    >>> from layoutkit.dsl.core.types import Tensor, constexpr, f32, i32
    >>> from layoutkit.dsl.core.kernel import KernelOptions
    >>> ps = [parameter("x", Tensor[f32, 1]), parameter("n", i32), parameter("B", constexpr)]
    >>> describe_key(ps, ((True, True, '16', '1'), '+', ('int', 512), KernelOptions(None, False)))
    'x=(16):(1) n=>0 B=512; sm_90a'
    """
    cells = " ".join(f"{p.name}={fact_text(p, e)}" for p, e in zip(params, key))
    return f"{cells}; {options_text(key[-1])}"


class SpecializationRow(NamedTuple):
    """One specialization: its `key`, `facts` {parameter name: words}, `options` in words and
    `source`: 'traced' in this process or 'disk' (the on-disk cache; not traced here)."""

    key: tuple
    facts: dict
    options: str
    source: str


class SpecializationTable(list):
    """The rows of `kernel.specializations()`; prints as a table, one row per specialization."""

    def __init__(self, kernel_name: str, headers: list[str], rows):
        super().__init__(rows)
        self.kernel_name, self.headers = kernel_name, headers

    def __str__(self) -> str:
        names = [h.split(" ")[0] for h in self.headers]
        cells = [["#", *self.headers, "options", "from"]]
        cells += [[str(i), *(row.facts[n] for n in names), row.options, row.source]
                  for i, row in enumerate(self)]
        widths = [max(len(r[c]) for r in cells) for c in range(len(cells[0]))]
        lines = [f"{self.kernel_name}: {len(self)} specialization{'s' if len(self) != 1 else ''}"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)
