"""``assemble``: PTX text -> ``Cubin`` through ptxas, with the resource report and the cache."""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from . import cache as cubin_cache
from .cubin import Cubin
from .ptxas_errors import assembly_error
from .resources import parse_ptxas_report, warn_about
from .settings import get_settings
from .toolchain import ToolchainError, find_ptxas, ptxas_version

_ARCH = re.compile(r"sm_\d+[a-z]?")
# Options assemble() sets itself; passing them again would contradict it.
_RESERVED = ("-arch", "--gpu-name", "-o", "--output-file", "-v", "--verbose")
_TIMEOUT_S = 600  # ptxas on a large kernel takes seconds; a stuck one must not hang the caller
_INPUT, _OUTPUT = "input.ptx", "output.cubin"


def assemble(ptx: str, arch: str = "sm_90a", *, options: Iterable[str] = (),
             cache: bool = True) -> Cubin:
    """Assemble PTX text with ``ptxas -arch=<arch> -v <options>`` into a ``Cubin``.

    The result comes from the cubin cache when the same PTX, arch, options and ptxas
    version were assembled before (``cache=False`` always runs ptxas and stores nothing).
    Issues ``RegisterSpillWarning`` / ``SetmaxnregIgnoredWarning`` for entries that need
    them, on cache hits too. Raises ``PTXAssemblyError`` when ptxas rejects the PTX.

    >>> ptx = ".version 8.0\\n.target sm_90a\\n.address_size 64\\n"
    >>> ptx += ".visible .entry k()\\n{\\nret;\\n}\\n"
    >>> cubin = assemble(ptx, cache=False)
    >>> cubin.entries, cubin.resources["k"].spills, cubin.data[:4]
    (('k',), False, b'\\x7fELF')
    """
    options = _check_arguments(ptx, arch, options)
    settings = get_settings()
    ptxas = find_ptxas(settings)
    version = ptxas_version(ptxas)
    key = cubin_cache.cache_key(ptx, arch, options, version.text)
    cubin = cubin_cache.lookup(key, ptx, arch) if cache else None
    if settings.debug:
        state = "hit" if cubin is not None else ("miss" if cache else "off")
        print(f"layoutkit: assemble {arch} cache {state} key={key[:16]} "
              f"ptxas={ptxas} options={list(options)}", file=sys.stderr)
    if cubin is None:
        cubin = run_ptxas(ptxas, ptx, arch, options, version.build)
        if cache:
            cubin_cache.store(key, cubin)
    warn_about(cubin.resources, stacklevel=2)
    return cubin


def run_ptxas(ptxas: Path, ptx: str, arch: str, options: tuple[str, ...],
              version_build: str = "") -> Cubin:
    """Run ptxas once in a scratch directory and wrap its output; no cache, no warnings."""
    command = (str(ptxas), f"-arch={arch}", "-v", *options, "-o", _OUTPUT, _INPUT)
    with tempfile.TemporaryDirectory(prefix="layoutkit-ptxas-") as scratch:
        Path(scratch, _INPUT).write_text(ptx)
        try:
            done = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                                  timeout=_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ToolchainError(f"ptxas did not finish assembling for {arch} within "
                                 f"{_TIMEOUT_S} s: {' '.join(command)}") from exc
        except OSError as exc:
            raise ToolchainError(f"ptxas could not be started ({exc}): {' '.join(command)}") \
                from exc
        log = done.stderr + done.stdout
        output = Path(scratch, _OUTPUT)
        if done.returncode != 0 or not output.is_file():
            raise assembly_error(ptx, log, arch=arch, returncode=done.returncode,
                                 command=command)
        data = output.read_bytes()
    return Cubin(data=data, arch=arch, resources=parse_ptxas_report(log, ptx), ptxas_log=log,
                 ptx=ptx, options=options, ptxas_version=version_build)


def _check_arguments(ptx: object, arch: object, options: object) -> tuple[str, ...]:
    if not isinstance(ptx, str):
        raise TypeError(f"assemble() takes PTX text as str, got {type(ptx).__name__}")
    if not isinstance(arch, str) or not _ARCH.fullmatch(arch):
        raise ValueError(f"assemble(arch={arch!r}): arch must name an SM target like "
                         "'sm_90a' (wgmma and setmaxnreg need the 'a' suffix) or 'sm_80'")
    if isinstance(options, (str, bytes)):
        raise TypeError(f"assemble(options={options!r}): options is a sequence of ptxas "
                        f"flags, e.g. ({options!r},), not one string")
    options = tuple(options)
    for option in options:
        if not isinstance(option, str):
            raise TypeError(f"assemble(options={options!r}): each ptxas flag must be a str, "
                            f"got {option!r}")
        name = option.split("=", 1)[0]
        if name in _RESERVED:
            raise ValueError(f"assemble(options={options!r}): {option!r} is set by assemble() "
                             "itself (arch via the arch argument; -v and -o always)")
    return options
