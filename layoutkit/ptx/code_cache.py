"""Code objects of the source layoutkit generates (configured launchers, fast packers, the DSL's
fast launch paths), compiled once per machine: a new process reads them from disk instead of
compiling the source again (~1-4 ms each, several per kernel at its first launch).

One file per (source, filename) in ``<LAYOUTKIT_CACHE_DIR>/code/<cache tag>/<key>.code``: the
cache tag is the interpreter's (``sys.implementation.cache_tag``, e.g. cpython-312), because
marshal's format is the interpreter version's; the key is a sha256 of the filename, the source
and the interpreter's -O level (which compile() follows). The file holds importlib's
MAGIC_NUMBER, the key, a sha256 of the payload and the marshal'd code object, all checked before
use: a file failing a check (another interpreter's, a truncated or flipped payload, an object
that is not the code of that filename) is compiled again and rewritten. Files are written
through a temporary file and a rename, so concurrent writers leave a whole file or none. With
the specialization cache off (``LAYOUTKIT_SPEC_CACHE=0``) nothing is read or written: the code
is compiled in memory only.
"""
from __future__ import annotations

import hashlib
import importlib.util
import marshal
import sys
import threading
import types
from pathlib import Path

from .settings import get_settings

__all__ = ["compiled", "code_directory", "clear"]

SUFFIX = ".code"
_MAGIC = importlib.util.MAGIC_NUMBER          # changes with the bytecode format
_HEADER = len(_MAGIC) + 32 + 32                # magic, key, payload digest

_memory: dict[tuple[str, str], types.CodeType] = {}    # (source, filename) -> code
_MAX_MEMORY = 512
_lock = threading.Lock()


def code_directory(settings=None) -> Path:
    """``<LAYOUTKIT_CACHE_DIR>/code/<this interpreter's cache tag>``."""
    settings = settings or get_settings()
    return settings.cache_dir / "code" / (sys.implementation.cache_tag or "python")


def compiled(source: str, filename: str) -> types.CodeType:
    """``compile(source, filename, "exec")``, from memory, else from disk (module docstring),
    else compiled now and kept in both."""
    code = _memory.get((source, filename))
    if code is not None:
        return code
    settings = get_settings()
    path = key = None
    if settings.spec_cache:
        key = hashlib.sha256(f"{filename}\0{sys.flags.optimize}\0{source}".encode()).digest()
        path = code_directory(settings) / (key.hex()[:40] + SUFFIX)
        code = _read(path, key, filename)
    if code is None:
        code = compile(source, filename, "exec")
        if path is not None:
            _write(path, key, code)
    with _lock:
        if len(_memory) >= _MAX_MEMORY:
            _memory.clear()
        _memory[source, filename] = code
    return code


def _read(path: Path, key: bytes, filename: str) -> types.CodeType | None:
    """The code object in ``path`` if every check passes (module docstring), else None."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    magic, stored_key, payload_digest = blob[:len(_MAGIC)], blob[len(_MAGIC):len(_MAGIC) + 32], \
        blob[len(_MAGIC) + 32:_HEADER]
    payload = blob[_HEADER:]
    if magic != _MAGIC or stored_key != key or hashlib.sha256(payload).digest() != payload_digest:
        return None
    try:
        code = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(code, types.CodeType) or code.co_filename != filename:
        return None
    return code


def _write(path: Path, key: bytes, code: types.CodeType) -> None:
    """Keep ``code`` in ``path``; never raises for the cache's sake (a read-only directory)."""
    from .cache import write_atomically
    payload = marshal.dumps(code)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, _MAGIC + key + hashlib.sha256(payload).digest() + payload)
    except OSError:
        pass


def clear() -> int:
    """Delete every code file on disk (every interpreter's) and forget the in-memory ones;
    returns the files removed."""
    from .cache import remove_tree_files
    with _lock:
        _memory.clear()
    return remove_tree_files(get_settings().cache_dir / "code", SUFFIX)
