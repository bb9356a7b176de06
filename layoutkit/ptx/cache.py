"""The content-addressed cubin cache: an in-memory LRU in front of a directory of entries.

Key: sha256 of (PTX text, ptxas version text, ptxas options, target arch), see
``cache_key``. Entries live in ``<settings.cache_dir>/cubin/<key>.lkc``; each is one file::

    magic b"LKCUBIN\\x01" | u64 cubin length | u64 metadata length | sha256(cubin + metadata)
    | cubin bytes | metadata (UTF-8 JSON: key, arch, options, ptxas version and log, resources)

little-endian. A file is written to a temporary name in the same directory and
``os.replace``d into place, so readers see a whole entry or none, whatever concurrent
writers or crashes do. A reader checks magic, lengths, digest and key, then that the payload is
an ELF cubin for the entry's arch (and the requested one, when the caller names it:
``cubin.elf_problem``); an entry that fails any check is deleted and reported as a miss, so the
caller rebuilds it.

The container is public for other caches of compiled code (layoutkit.dsl's specialization
cache): ``encode_entry`` adds a caller's JSON-able ``extra`` (and the PTX, when given) to the
metadata, ``read_entry`` validates a file the same way and returns the cubin with that extra,
``write_atomically`` writes one.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from .cubin import Cubin, elf_problem
from .resources import ResourceUsage
from .settings import get_settings

_MAGIC = b"LKCUBIN\x01"
_HEADER = struct.Struct("<8sQQ32s")
_SUFFIX = ".lkc"
_TEMP_PREFIX = ".tmp-"
_MEMORY_CAPACITY = 256   # cubins kept in memory (each tens of KB)

_memory: OrderedDict[str, Cubin] = OrderedDict()
_memory_lock = threading.Lock()


class CacheWarning(UserWarning):
    """The on-disk cubin cache could not be written; assembling goes on without it."""


@dataclass(frozen=True)
class CacheInfo:
    """What ``cache_info()`` reports: the entry directory, its entries and their total size."""

    directory: Path
    entries: int
    bytes: int
    memory_entries: int

    def __str__(self) -> str:
        return (f"{self.directory}: {self.entries} cubins, {self.bytes} bytes on disk; "
                f"{self.memory_entries} in memory")


def cache_key(ptx: str, arch: str, options: tuple[str, ...], ptxas_version_text: str) -> str:
    """Hex sha256 naming the cubin that ptxas (of this version) makes from these inputs.

    >>> key = cache_key("x", "sm_90a", (), "V13.0.88")
    >>> key == cache_key("x", "sm_90a", (), "V13.0.88"), len(key)
    (True, 64)
    >>> key == cache_key("x", "sm_90a", ("-lineinfo",), "V13.0.88")
    False
    """
    fields = [ptx, arch, json.dumps(list(options)), ptxas_version_text]
    digest = hashlib.sha256()
    for value in fields:  # length-prefixed, so no two field lists collide
        raw = value.encode()
        digest.update(len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()


def cache_directory() -> Path:
    """The directory holding the cubin entries: ``<LAYOUTKIT_CACHE_DIR or default>/cubin``."""
    return get_settings().cache_dir / "cubin"


def lookup(key: str, ptx: str, arch: str | None = None) -> Cubin | None:
    """The cached cubin for ``key`` (memory first, then disk), or None on a miss.

    A disk entry is served only if its payload is an ELF cubin for its recorded arch and for
    ``arch`` when given; otherwise it is corrupt: deleted, and a miss."""
    with _memory_lock:
        cubin = _memory.get(key)
        if cubin is not None and (arch is None or cubin.arch == arch):
            _memory.move_to_end(key)
            return cubin
    cubin = _read_entry(cache_directory() / (key + _SUFFIX), key, ptx, arch)
    if cubin is not None:
        _remember(key, cubin)
    return cubin


def store(key: str, cubin: Cubin) -> None:
    """Put ``cubin`` under ``key`` in memory and, atomically, on disk."""
    _remember(key, cubin)
    directory = cache_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(directory / (key + _SUFFIX), _encode(key, cubin))
    except FileNotFoundError:
        pass  # a concurrent cache_clear removed our temporary file; the next call rebuilds
    except OSError as exc:
        warnings.warn(CacheWarning(
            f"cannot write the cubin cache in {directory} ({exc}); assembling without it. "
            "Set LAYOUTKIT_CACHE_DIR to a writable directory"), stacklevel=3)


def cache_info() -> CacheInfo:
    """The cache directory, how many cubin entries it holds and their total bytes."""
    directory = cache_directory()
    files = list(directory.glob("*" + _SUFFIX)) if directory.is_dir() else []
    size = 0
    for path in files:
        try:
            size += path.stat().st_size
        except FileNotFoundError:
            pass
    with _memory_lock:
        in_memory = len(_memory)
    return CacheInfo(directory, len(files), size, in_memory)


def cache_clear() -> int:
    """Delete every cubin entry (and stray temporary file) on disk and in memory.

    Returns the number of on-disk entries removed.
    """
    clear_memory()
    directory = cache_directory()
    if not directory.is_dir():
        return 0
    removed = 0
    for path in directory.iterdir():
        if path.name.endswith(_SUFFIX) or path.name.startswith(_TEMP_PREFIX):
            try:
                path.unlink()
                removed += path.name.endswith(_SUFFIX)
            except FileNotFoundError:
                pass
    return removed


def clear_memory() -> None:
    """Forget the in-memory layer only (the disk entries stay)."""
    with _memory_lock:
        _memory.clear()


def _remember(key: str, cubin: Cubin) -> None:
    with _memory_lock:
        _memory[key] = cubin
        _memory.move_to_end(key)
        while len(_memory) > _MEMORY_CAPACITY:
            _memory.popitem(last=False)


def _encode(key: str, cubin: Cubin) -> bytes:
    return encode_entry(key, cubin)


def encode_entry(key: str, cubin: Cubin, extra: dict | None = None, *,
                 with_ptx: bool = False) -> bytes:
    """The bytes of one entry (see the module docstring) holding ``cubin`` under ``key``;
    ``extra`` (JSON-able) and, with ``with_ptx``, the cubin's PTX text go into its metadata."""
    fields = {
        "key": key, "arch": cubin.arch, "options": list(cubin.options),
        "ptxas_version": cubin.ptxas_version, "ptxas_log": cubin.ptxas_log,
        "resources": [usage.to_json() for usage in cubin.resources.values()],
    }
    if extra is not None:
        fields["extra"] = extra
    if with_ptx:
        fields["ptx"] = cubin.ptx
    meta = json.dumps(fields, sort_keys=True).encode()
    digest = hashlib.sha256(cubin.data + meta).digest()
    return _HEADER.pack(_MAGIC, len(cubin.data), len(meta), digest) + cubin.data + meta


def _decode(blob: bytes, key: str, ptx: str, arch: str | None = None) -> Cubin | None:
    found = decode_entry(blob, key, arch, ptx=ptx)
    return None if found is None else found[0]


def decode_entry(blob: bytes, key: str, arch: str | None = None, *,
                 ptx: str | None = None) -> tuple[Cubin, dict | None] | None:
    """(cubin, extra) of an entry's bytes, or None unless magic, lengths, digest, key, arch
    (when given) and the ELF payload all check out. The cubin's PTX is ``ptx`` when given,
    else the entry's own (``encode_entry(with_ptx=True)``), else empty."""
    if len(blob) < _HEADER.size:
        return None
    magic, data_len, meta_len, digest = _HEADER.unpack_from(blob)
    if magic != _MAGIC or len(blob) != _HEADER.size + data_len + meta_len:
        return None
    body = memoryview(blob)[_HEADER.size:]
    if hashlib.sha256(body).digest() != digest:
        return None
    try:
        meta = json.loads(bytes(body[data_len:]).decode())
        if meta["key"] != key or (arch is not None and meta["arch"] != arch):
            return None
        data = bytes(body[:data_len])
        if elf_problem(data, meta["arch"]) is not None:
            return None
        resources = {usage["name"]: ResourceUsage.from_json(usage) for usage in meta["resources"]}
        cubin = Cubin(data=data, arch=meta["arch"], resources=resources,
                      ptxas_log=meta["ptxas_log"], ptx=meta.get("ptx", "") if ptx is None else ptx,
                      options=tuple(meta["options"]), ptxas_version=meta["ptxas_version"])
        return cubin, meta.get("extra")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _read_entry(path: Path, key: str, ptx: str, arch: str | None = None) -> Cubin | None:
    found = read_entry(path, key, arch, ptx=ptx)
    return None if found is None else found[0]


def read_entry(path: Path, key: str, arch: str | None = None, *,
               ptx: str | None = None) -> tuple[Cubin, dict | None] | None:
    """``decode_entry`` of the file at ``path``; a file that fails a check is deleted (so the
    caller rebuilds it) and, like a missing one, is None."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    found = decode_entry(blob, key, arch, ptx=ptx)
    if found is None:  # corrupt or truncated: discard so that the caller rebuilds it
        try:
            path.unlink()
        except OSError:
            pass
    return found


def remove_tree_files(root: Path, suffix: str) -> int:
    """Delete every file in the subdirectories of ``root`` (one level, as the specialization and
    code caches lay out their entries) and the emptied subdirectories; returns the files removed
    whose name ends with ``suffix`` (the entries, not their notes)."""
    if not root.is_dir():
        return 0
    removed = 0
    for directory in [p for p in root.iterdir() if p.is_dir()]:
        for path in directory.iterdir():
            try:
                path.unlink()
                removed += path.name.endswith(suffix)
            except OSError:
                pass
        try:
            directory.rmdir()
        except OSError:
            pass
    return removed


def write_atomically(path: Path, blob: bytes) -> None:
    """Write ``blob`` to ``path`` through a temporary file in its directory and ``os.replace``:
    readers see the whole old file or the whole new one."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
