"""Finding the CUDA command-line tools (ptxas, nvdisasm, cuobjdump) and ptxas's version.

Search order for each tool, first hit wins:

1. its settings variable (``LAYOUTKIT_PTXAS``, ``LAYOUTKIT_NVDISASM``; cuobjdump has
   none) -- a set variable that names no executable file is an error;
2. the NVIDIA pip wheels on ``sys.path``: ``nvidia/cu<N>/bin/<tool>`` (CUDA 13 and
   later, newest N first), then ``nvidia/<wheel dir>/bin/<tool>`` (the CUDA 12
   layout: ``cuda_nvcc`` for ptxas, ``cuda_nvdisasm``, ``cuda_cuobjdump``);
3. ``$CUDA_HOME/bin/<tool>`` (or ``$CUDA_PATH``);
4. ``PATH``.

>>> find_ptxas().name
'ptxas'
>>> ptxas_version().release >= (12, 0)
True
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .settings import Settings, get_settings

_EXE_SUFFIX = ".exe" if os.name == "nt" else ""


class ToolchainError(RuntimeError):
    """Base class of the errors raised while running the CUDA command-line tools."""


class ToolNotFoundError(ToolchainError, FileNotFoundError):
    """A CUDA tool is on none of the places layoutkit searches."""


@dataclass(frozen=True)
class _ToolSpec:
    name: str
    setting: str | None          # attribute of Settings holding the override path
    env_var: str | None          # the variable behind that attribute, for messages
    cuda12_wheel_dir: str        # site-packages/nvidia/<this>/bin in the CUDA 12 wheels
    wheel: str                   # pip distribution that ships the tool


_TOOLS = {
    "ptxas": _ToolSpec("ptxas", "ptxas", "LAYOUTKIT_PTXAS", "cuda_nvcc", "nvidia-cuda-nvcc"),
    "nvdisasm": _ToolSpec("nvdisasm", "nvdisasm", "LAYOUTKIT_NVDISASM", "cuda_nvdisasm",
                          "nvidia-cuda-nvdisasm"),
    "cuobjdump": _ToolSpec("cuobjdump", None, None, "cuda_cuobjdump", "nvidia-cuda-cuobjdump"),
}

_found: dict[tuple, Path] = {}
_found_lock = threading.Lock()


def find_tool(name: str, settings: Settings | None = None) -> Path:
    """Absolute path of the CUDA tool ``name`` ('ptxas', 'nvdisasm' or 'cuobjdump').

    Raises ``ToolNotFoundError`` listing every place searched and the pip wheel to install.
    """
    if name not in _TOOLS:
        raise ValueError(f"unknown CUDA tool {name!r}; layoutkit finds {sorted(_TOOLS)}")
    spec = _TOOLS[name]
    settings = settings or get_settings()
    memo_key = (name, settings.ptxas, settings.nvdisasm, settings.cuda_home,
                settings.search_path, tuple(sys.path))
    cached = _found.get(memo_key)
    if cached is not None and _is_executable(cached):
        return cached
    path = _search(spec, settings)
    with _found_lock:
        _found[memo_key] = path
    return path


def find_ptxas(settings: Settings | None = None) -> Path:
    """Absolute path of ptxas (see the module docstring for the search order)."""
    return find_tool("ptxas", settings)


def find_nvdisasm(settings: Settings | None = None) -> Path:
    """Absolute path of nvdisasm (see the module docstring for the search order)."""
    return find_tool("nvdisasm", settings)


def find_cuobjdump(settings: Settings | None = None) -> Path:
    """Absolute path of cuobjdump (see the module docstring for the search order)."""
    return find_tool("cuobjdump", settings)


def _search(spec: _ToolSpec, settings: Settings) -> Path:
    exe = spec.name + _EXE_SUFFIX
    override = getattr(settings, spec.setting) if spec.setting else None
    if override is not None:
        if _is_executable(override):
            return override.resolve()
        raise ToolNotFoundError(
            f"{spec.env_var}={str(override)!r} is not an executable file; point it at a "
            f"{spec.name} executable or unset it to search the {spec.wheel} wheel, "
            "$CUDA_HOME/bin and PATH")
    candidates, without_wheels = _wheel_candidates(spec, exe)
    looked = [str(candidate) for candidate in candidates]
    for candidate in candidates:
        if _is_executable(candidate):
            return candidate.resolve()
    if without_wheels:
        looked.append(f"nvidia/cu<N>/bin/{exe}, nvidia/{spec.cuda12_wheel_dir}/bin/{exe} under "
                      f"the sys.path entries {without_wheels} (none has an nvidia/ directory)")
    if settings.cuda_home is not None:
        candidate = settings.cuda_home / "bin" / exe
        looked.append(str(candidate))
        if _is_executable(candidate):
            return candidate.resolve()
    else:
        looked.append("$CUDA_HOME/bin (CUDA_HOME and CUDA_PATH are unset)")
    on_path = shutil.which(exe, path=settings.search_path)
    looked.append(f"PATH={settings.search_path}")
    if on_path:
        return Path(on_path).resolve()
    where = "\n  ".join(looked)
    hint = f"; or set {spec.env_var} to its path" if spec.env_var else ""
    raise ToolNotFoundError(
        f"{spec.name} was not found. Install it with `pip install {spec.wheel}`, or install "
        f"the CUDA toolkit and set CUDA_HOME{hint}. Looked in:\n  {where}")


def _wheel_candidates(spec: _ToolSpec, exe: str) -> tuple[list[Path], list[str]]:
    """``nvidia/cu<N>/bin/<exe>`` (newest N first), then the CUDA 12 layout, per sys.path
    entry; and the sys.path entries that hold no ``nvidia/`` directory at all."""
    found: list[Path] = []
    without: list[str] = []
    for entry in sys.path:
        nvidia = Path(entry or ".") / "nvidia"
        if not nvidia.is_dir():
            without.append(entry)
            continue
        versioned = []
        for child in nvidia.iterdir():
            match = re.fullmatch(r"cu(\d+)", child.name)
            if match:
                versioned.append((int(match.group(1)), child / "bin" / exe))
        found += [path for _, path in sorted(versioned, reverse=True)]
        found.append(nvidia / spec.cuda12_wheel_dir / "bin" / exe)
    return found, without


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@dataclass(frozen=True)
class PtxasVersion:
    """ptxas's ``--version``: ``release`` (major, minor), ``build`` ('V13.0.88'), the full ``text``."""

    release: tuple[int, int]
    build: str
    text: str

    def __str__(self) -> str:
        return f"ptxas {self.build}"


_versions: dict[tuple, PtxasVersion] = {}


def ptxas_version(path: Path | None = None) -> PtxasVersion:
    """The version of the ptxas at ``path`` (default: ``find_ptxas()``), cached per file."""
    path = Path(path) if path is not None else find_ptxas()
    try:
        stat = path.stat()
    except OSError as exc:
        raise ToolNotFoundError(f"ptxas {str(path)!r} cannot be read: {exc}") from exc
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    cached = _versions.get(key)
    if cached is not None:
        return cached
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"`{path} --version` could not run: {exc}") from exc
    text = (done.stdout + done.stderr).strip()
    match = re.search(r"release (\d+)\.(\d+), (V[\w.]+)", text)
    if done.returncode != 0 or match is None:
        raise ToolchainError(
            f"`{path} --version` exited with {done.returncode} and printed no "
            f"'release X.Y, VX.Y.Z' line; is it ptxas? It printed:\n{text}")
    version = PtxasVersion((int(match.group(1)), int(match.group(2))), match.group(3), text)
    _versions[key] = version
    return version
