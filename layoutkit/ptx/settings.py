"""Every environment variable layoutkit reads, read here and nowhere else.

``get_settings()`` reads the environment afresh on each call (it is a handful of
dictionary look-ups), so a variable set in a running process takes effect at the
next call and nothing depends on import order. Other packages take their
settings from here too.

The variables:

``LAYOUTKIT_PTXAS``
    Path of the ``ptxas`` executable to use. When set it wins over every other
    place (the ``nvidia-cuda-nvcc`` wheel, ``$CUDA_HOME/bin``, ``PATH``), and a
    path that is not an executable file is an error, never silently skipped.
``LAYOUTKIT_NVDISASM``
    Path of the ``nvdisasm`` executable used for SASS listings; same rules.
``LAYOUTKIT_CACHE_DIR``
    Root directory of layoutkit's on-disk caches (cubins live in
    ``<root>/cubin``). Default: ``$XDG_CACHE_HOME/layoutkit`` when
    ``XDG_CACHE_HOME`` is an absolute path, else ``~/.cache/layoutkit``.
``LAYOUTKIT_DEBUG``
    ``1``/``true``/``yes``/``on`` (any case) turns on debug reports: each
    ``assemble`` call prints one line to stderr (cache hit or miss, the cache
    key, the ptxas command); and DSL kernels that leave ``debug`` unset
    (``@lk.kernel(debug=None)``) are built as debug builds, whose mbarrier
    waits are bounded and raise ``BarrierTimeoutError`` instead of hanging.
    ``0``/``false``/``no``/``off`` or empty turns both off; any other value is
    a ``SettingsError``. The DSL puts the resulting debug flag in each
    kernel's specialization key (it changes the PTX, hence the cubin cache key
    too); the reports change no output. ``debug_enabled()`` reads this one
    variable alone, cheaply enough for every kernel launch.
``LAYOUTKIT_SPEC_CACHE``
    ``0``/``false``/``no``/``off`` turns off the DSL's on-disk specialization cache
    (``<root>/spec``: a kernel's traced specializations with their cubins, so a new process
    launches without tracing); on by default (unset or empty). Same values as LAYOUTKIT_DEBUG.

Also read, because the toolchain search follows them: ``CUDA_HOME`` (then
``CUDA_PATH``) for ``$CUDA_HOME/bin``, ``PATH`` for the last resort, and
``XDG_CACHE_HOME`` for the default cache root.

>>> s = get_settings({"LAYOUTKIT_CACHE_DIR": "/tmp/lk", "LAYOUTKIT_DEBUG": "on"})
>>> s.cache_dir, s.debug
(PosixPath('/tmp/lk'), True)
>>> get_settings({"XDG_CACHE_HOME": "/var/cache/me"}).cache_dir
PosixPath('/var/cache/me/layoutkit')
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class SettingsError(ValueError):
    """An environment variable layoutkit reads holds a value it cannot use."""


@dataclass(frozen=True)
class Settings:
    """A snapshot of layoutkit's environment. Paths are ``None`` when unset."""

    ptxas: Path | None
    nvdisasm: Path | None
    cache_dir: Path
    debug: bool
    cuda_home: Path | None
    search_path: str
    spec_cache: bool = True


def get_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the settings from ``environ`` (default: ``os.environ``)."""
    env = os.environ if environ is None else environ
    return Settings(
        ptxas=_optional_path(env, "LAYOUTKIT_PTXAS"),
        nvdisasm=_optional_path(env, "LAYOUTKIT_NVDISASM"),
        cache_dir=_cache_dir(env),
        debug=_flag(env, "LAYOUTKIT_DEBUG"),
        cuda_home=_optional_path(env, "CUDA_HOME") or _optional_path(env, "CUDA_PATH"),
        search_path=env.get("PATH", os.defpath),
        spec_cache=_flag(env, "LAYOUTKIT_SPEC_CACHE") if env.get("LAYOUTKIT_SPEC_CACHE", "").strip()
        else True,
    )


def debug_enabled() -> bool:
    """``get_settings().debug`` without reading the rest: LAYOUTKIT_DEBUG as it is now in
    ``os.environ``, in about 0.2 µs (the DSL's checked launch path reads it at every launch of a
    kernel whose ``debug`` is unset; its fast path uses debug_raw_lookup). Raises SettingsError for
    a value that is not a boolean.

    >>> debug_enabled() == get_settings().debug
    True
    """
    environ = os.environ
    # CPython's os.environ keeps the environment it sets and reads in ``_data``, keyed by
    # ``encodekey(name)``; a lookup there skips the mapping's encode/decode (0.6 µs).
    data = getattr(environ, "_data", None)
    if data is None or _DEBUG_KEY is None:     # os.environ replaced by a plain mapping
        return _flag(environ, _DEBUG)
    raw = data.get(_DEBUG_KEY)
    known = _DEBUG_BY_RAW.get(raw)
    if known is None:
        known = _flag({_DEBUG: "" if raw is None else environ.decodevalue(raw)}, _DEBUG)
        if len(_DEBUG_BY_RAW) < 64:             # a handful of distinct values in practice
            _DEBUG_BY_RAW[raw] = known
    return known


def debug_raw_lookup() -> tuple[object, dict] | None:
    """(key, flags): wherever ``flags.get(os.environ._data.get(key))`` is not None it is
    debug_enabled()'s value (None: a raw value not parsed yet, which debug_enabled() parses and
    adds). For generated launch code that reads the flag in two dict lookups; None where
    os.environ keeps no encoded keys.

    >>> key, flags = debug_raw_lookup()
    >>> flags.get(os.environ._data.get(key)) in (None, debug_enabled())
    True
    """
    return None if _DEBUG_KEY is None else (_DEBUG_KEY, _DEBUG_BY_RAW)


_DEBUG = "LAYOUTKIT_DEBUG"
_DEBUG_KEY = os.environ.encodekey(_DEBUG) if hasattr(os.environ, "encodekey") else None
_DEBUG_BY_RAW: dict = {}                        # raw value in os.environ._data -> parsed flag


def _optional_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "")
    return Path(value).expanduser() if value.strip() else None


def _cache_dir(env: Mapping[str, str]) -> Path:
    explicit = _optional_path(env, "LAYOUTKIT_CACHE_DIR")
    if explicit is not None:
        return explicit
    # XDG Base Directory spec: a relative XDG_CACHE_HOME is invalid and is ignored.
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "layoutkit"
    return Path("~/.cache/layoutkit").expanduser()


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(
        f"{name}={env[name]!r} is not a boolean; use one of "
        f"{sorted(_TRUE)} to turn it on or {sorted(_FALSE - {''})} (or unset it) to turn it off")
