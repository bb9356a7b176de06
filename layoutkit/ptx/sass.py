"""``disassemble``: the SASS of a cubin, for reading, through nvdisasm (or cuobjdump).

>>> ptx = ".version 8.0\\n.target sm_90a\\n.address_size 64\\n.visible .entry k()\\n{\\nret;\\n}\\n"
>>> from layoutkit.ptx.assembler import assemble
>>> "EXIT" in disassemble(assemble(ptx, cache=False))
True
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from .cubin import Cubin
from .settings import get_settings
from .toolchain import ToolchainError, ToolNotFoundError, find_cuobjdump, find_nvdisasm

_TIMEOUT_S = 120


class DisassemblyError(ToolchainError):
    """nvdisasm or cuobjdump could not disassemble the bytes it was given."""


def disassemble(cubin: Cubin | bytes, *, line_info: bool = True) -> str:
    """SASS text of every function in ``cubin``.

    Uses ``nvdisasm -c`` (code sections only; ``-g`` adds the Python/PTX source lines
    that ``.loc`` recorded when the cubin was assembled with ``-lineinfo``). Falls back
    to ``cuobjdump --dump-sass`` when nvdisasm is missing; raises ``ToolNotFoundError``
    when both are.
    """
    data = cubin.data if isinstance(cubin, Cubin) else cubin
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"disassemble() takes a Cubin or its bytes, got {type(cubin).__name__}")
    if data[:4] != b"\x7fELF":
        raise DisassemblyError(f"disassemble() was given {len(data)} bytes that are not an ELF "
                               f"cubin (they start with {bytes(data[:4])!r}, not b'\\x7fELF')")
    settings = get_settings()
    try:
        tool = find_nvdisasm(settings)
        flags = ["-c", "-g"] if line_info else ["-c"]
    except ToolNotFoundError as nvdisasm_missing:
        try:
            tool = find_cuobjdump(settings)
        except ToolNotFoundError as cuobjdump_missing:
            raise ToolNotFoundError(
                "disassemble() needs nvdisasm or cuobjdump and found neither.\n"
                f"{nvdisasm_missing}\n{cuobjdump_missing}") from None
        flags = ["--dump-sass"]
    return _run(tool, flags, bytes(data))


def _run(tool: Path, flags: list[str], data: bytes) -> str:
    with tempfile.TemporaryDirectory(prefix="layoutkit-sass-") as scratch:
        path = Path(scratch, "module.cubin")
        path.write_bytes(data)
        command = [str(tool), *flags, str(path)]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DisassemblyError(f"{' '.join(command)} could not run: {exc}") from exc
    if done.returncode != 0:
        raise DisassemblyError(f"{tool.name} exited with status {done.returncode} on a "
                               f"{len(data)}-byte cubin:\n{(done.stderr or done.stdout).strip()}")
    return done.stdout
