"""``Cubin``: an assembled module, its per-entry resource report and ptxas's log; and
``elf_problem``, what makes bytes not a cubin for an arch."""
from __future__ import annotations

import re
import struct
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


ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190                      # e_machine of a CUDA ELF
_ELF64_HEADER = 64
_ARCH = re.compile(r"sm_(\d+)[a-z]?")


def elf_sm(data: bytes) -> int:
    """The SM number in a CUDA ELF header's e_flags: bits 8..15 in the ELF ABI version 8 that
    ptxas 13 writes (measured: sm_80 0x6005004, sm_90 and sm_90a 0x6005a04, sm_100 0x6006402,
    sm_120 0x6007802), the low byte in the older versions."""
    e_flags = struct.unpack_from("<I", data, 48)[0]
    return (e_flags >> 8) & 0xFF if data[8] >= 8 else e_flags & 0xFF


def elf_problem(data, arch: str) -> str | None:
    """None when ``data`` is a CUDA ELF cubin for ``arch`` (``sm_90a``), else why not.

    Checked: the ELF magic, 64-bit little-endian class, an executable or relocatable CUDA ELF
    (e_machine 190), and the SM number of e_flags against arch's. The arch-specific suffix
    (the ``a`` of sm_90a) is not in the ELF header: ptxas 13.0 writes the same e_flags for
    sm_90 and sm_90a, so the cache key, which includes the arch, keeps them apart.

    >>> print(elf_problem(b"not an elf", "sm_90a"))
    10 bytes that do not start with the ELF magic b'\\x7fELF' (they start with b'not ')
    """
    if not isinstance(data, (bytes, bytearray)):
        return f"a {type(data).__name__}, not bytes"
    if data[:4] != ELF_MAGIC:
        return (f"{len(data)} bytes that do not start with the ELF magic {ELF_MAGIC!r} (they "
                f"start with {bytes(data[:4])!r})")
    if len(data) < _ELF64_HEADER:
        return f"an ELF file of {len(data)} bytes, shorter than a 64-bit ELF header"
    if data[4] != 2 or data[5] != 1:
        return f"an ELF file of class {data[4]}, data encoding {data[5]}, not 64-bit little-endian"
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_machine != EM_CUDA or e_type not in (1, 2):
        return f"an ELF file for machine {e_machine} (type {e_type}), not a CUDA cubin ({EM_CUDA})"
    want = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if want is None:
        return f"checked against {arch!r}, which is not an SM arch such as 'sm_90a'"
    sm = elf_sm(data)
    if sm != int(want.group(1)):
        return f"a cubin for sm_{sm}, not for {arch}"
    return None
