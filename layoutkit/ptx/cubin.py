"""``Cubin``: an assembled module, its per-entry resource report and ptxas's log."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .resources import ResourceUsage


@dataclass(frozen=True)
class Cubin:
    """ELF bytes ptxas produced for ``arch`` from ``ptx`` with ``options``.

    ``resources`` maps each entry name to its ``ResourceUsage``; ``ptxas_log`` is
    ptxas's ``-v`` output (stderr and stdout); ``ptxas_version`` its build ('V13.0.88').
    Equal cubins compare equal; the hash covers the bytes and the target.
    """

    data: bytes
    arch: str
    resources: Mapping[str, ResourceUsage] = field(hash=False)
    ptxas_log: str = field(default="", hash=False, repr=False)
    ptx: str = field(default="", hash=False, repr=False)
    options: tuple[str, ...] = ()
    ptxas_version: str = field(default="", hash=False)

    @property
    def entries(self) -> tuple[str, ...]:
        """The entry (kernel) names, in ptxas's report order."""
        return tuple(self.resources)

    def __repr__(self) -> str:
        return (f"Cubin(arch={self.arch!r}, {len(self.data)} bytes, entries={list(self.entries)}, "
                f"options={self.options}, ptxas_version={self.ptxas_version!r})")
