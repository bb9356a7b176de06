"""The on-disk specialization cache: a kernel's specializations with their cubins, so that a new
process goes from `kernel[grid](...)` to the launch without tracing.

One entry per specialization, in `<LAYOUTKIT_CACHE_DIR>/spec/<module.qualname>/<entry key>.lkc`,
in layoutkit.ptx.cache's container (magic, lengths, sha256 digest, key, and an ELF cubin for the
entry's arch, all checked before use; written to a temporary file and renamed into place, so
concurrent writers and crashes leave a whole entry or none; an entry failing a check is deleted
and traced again). Its metadata holds the PTX, the LaunchPlan (layoutkit.dsl.core.launch_plan:
entry name, block, shared memory, cluster, parameters, how each hidden parameter is computed)
and, for `layoutkit cache info`, the kernel, its facts and the seconds its making took.

The entry key is a sha256 of:

    the kernel's fingerprint   its function's source and every value it closes over
                               (layoutkit.dsl.core.fingerprint), and its options (num_warps,
                               cluster, debug, target, do_not_specialize)
    the specialization key     the facts of the call's arguments and the KernelOptions, written
                               down by fingerprint.canonical (a constexpr value included)
    the environment            layoutkit's source, ptxas, Python, sympy (fingerprint.environment)
    the cubin's arch           (an sm_80 kernel assembles for the GPU present)

Editing the kernel or anything it reads changes its fingerprint: its old entries are never read
again (`layoutkit cache clear` removes them). A kernel whose fingerprint cannot be written down,
a constexpr value that cannot, or a hidden parameter the plan cannot rebuild, is traced in every
process as before: the reason is kept in `<kernel dir>/NOT_CACHEABLE` for `layoutkit cache info`.
Only protocol-checked specializations are stored. `LAYOUTKIT_SPEC_CACHE=0` turns the cache off.
Warnings a trace raised (protocol, bounds) are not repeated when an entry is served instead.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from layoutkit.ptx.cache import encode_entry, read_entry, remove_tree_files, write_atomically
from layoutkit.ptx.settings import get_settings

from .fingerprint import (NotCacheable, canonical, digest, environment, environment_digest,
                          function_fingerprint)
from .launch_plan import plan_from_json, plan_to_json

__all__ = ["KernelCache", "cache_root", "enabled", "spec_cache_info", "spec_cache_clear",
           "KernelEntries", "NOT_CACHEABLE"]

SUFFIX = ".lkc"
NOT_CACHEABLE = "NOT_CACHEABLE"
_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
_ENVIRONMENT: dict = {}        # computed once per process (layoutkit's source is read once)


def cache_root() -> Path:
    """`<LAYOUTKIT_CACHE_DIR or default>/spec`."""
    return get_settings().cache_dir / "spec"


def enabled() -> bool:
    """Whether the on-disk specialization cache is on (LAYOUTKIT_SPEC_CACHE)."""
    return get_settings().spec_cache


def _environment() -> tuple[dict, str]:
    if not _ENVIRONMENT:
        env = environment(cache_root() / "environment.json" if enabled() else None)
        _ENVIRONMENT.update(env=env, digest=environment_digest(env))
    return _ENVIRONMENT["env"], _ENVIRONMENT["digest"]


class KernelCache:
    """One Kernel's entries: `reason` is None when its specializations can be cached, else why
    not (computed at first use, once per process)."""

    def __init__(self, kernel):
        self.kernel = kernel
        fn = kernel.fn
        self.label = _LABEL.sub("_", f"{fn.__module__}.{fn.__qualname__}")
        self._fingerprint: str | None = None
        self._reason: str | None = None
        self._checked = False
        self._lock = threading.Lock()

    @property
    def directory(self) -> Path:
        return cache_root() / self.label

    @property
    def reason(self) -> str | None:
        """None when the kernel's fingerprint is written down, else why it cannot be."""
        self._fingerprint_or_reason()
        return self._reason

    def _fingerprint_or_reason(self) -> str | None:
        if self._checked:
            return self._fingerprint
        with self._lock:              # threads launching the kernel at once: computed once
            if not self._checked:
                try:
                    self._fingerprint = digest(function_fingerprint(self.kernel.fn),
                                               self.kernel.identity())
                except NotCacheable as exc:
                    self._reason = f"kernel {self.kernel.name}: {exc.reason}"
                    self._note(self._reason)
                self._checked = True
        return self._fingerprint

    def _note(self, reason: str) -> None:
        """Keep why the kernel is not cached where `layoutkit cache info` finds it."""
        if not enabled():
            return
        path = self.directory / NOT_CACHEABLE
        try:
            if path.is_file() and path.read_text() == reason:
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, reason.encode())
        except OSError:
            pass

    def entry_key(self, key: tuple, arch: str) -> str | None:
        """The entry key of specialization key `key` for `arch`, or None when it has none (the
        cache is off, the kernel or a value of the key cannot be written down)."""
        if not enabled():
            return None
        fingerprint = self._fingerprint_or_reason()
        if fingerprint is None:
            return None
        try:
            text = canonical(key, "the specialization key")
        except NotCacheable as exc:
            self._note(f"kernel {self.kernel.name}: a specialization is not cached: {exc.reason}")
            return None
        return digest(fingerprint, _environment()[1], text, arch)

    def load(self, key: tuple, arch: str):
        """(cubin, LaunchPlan, entry metadata) of the entry for `key`, or None (a miss, or an
        entry that fails validation: deleted)."""
        name = self.entry_key(key, arch)
        if name is None:
            return None
        path = self.directory / (name + SUFFIX)
        found = read_entry(path, name, arch)
        if found is None:
            return None
        cubin, extra = found
        try:
            plan = plan_from_json(extra["plan"])
        except (KeyError, TypeError, ValueError, AttributeError):
            _discard(path)
            return None
        if not cubin.ptx or plan.name not in cubin.resources:
            _discard(path)
            return None
        return cubin, plan, extra

    def store(self, spec, arch: str) -> None:
        """Write specialization `spec` (traced here, its cubin assembled) as an entry, if it can
        be written down; never raises for the cache's sake."""
        if not spec.plan.protocol_checked:
            return
        name = self.entry_key(spec.key, arch)
        if name is None:
            return
        try:
            plan = plan_to_json(spec.plan, spec.ir)
        except NotCacheable as exc:
            self._note(f"kernel {self.kernel.name}: a specialization is not cached: {exc.reason}")
            return
        env, env_digest = _environment()
        extra = {"kernel": self.label, "fingerprint": self._fingerprint,
                 "environment_digest": env_digest,
                 "facts": self.kernel.describe_key(spec.key), "plan": plan,
                 "timings": dict(spec.timings), "created": time.time(),
                 "environment": {k: v.splitlines()[-1] if k == "ptxas" else v
                                 for k, v in env.items()}}
        blob = encode_entry(name, spec.cubin, extra, with_ptx=True)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(self.directory / (name + SUFFIX), blob)
        except OSError:
            pass          # a read-only or vanished cache directory: this process traced anyway


def _discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


@dataclass
class KernelEntries:
    """What `spec_cache_info` says of one kernel directory."""

    label: str
    entries: int = 0
    bytes: int = 0
    versions: set = field(default_factory=set)     # distinct fingerprints: source versions
    facts: list = field(default_factory=list)       # (facts text, trace-to-PTX seconds)
    corrupt: int = 0
    stale: int = 0                                  # made under another environment
    not_cacheable: str | None = None

    def lines(self, verbose: bool = False) -> list[str]:
        head = f"{self.label}: {self.entries} specialization(s), {self.bytes} bytes"
        if len(self.versions) > 1:
            head += f", from {len(self.versions)} versions of its source (the older ones are " \
                    "never read again)"
        if self.stale:
            head += f", {self.stale} made by another layoutkit, ptxas or Python (never read " \
                    "again)"
        if self.corrupt:
            head += f", {self.corrupt} unreadable (deleted when next looked up)"
        out = [head]
        if self.not_cacheable:
            out.append(f"  not cacheable: {self.not_cacheable}")
        if verbose:
            out += [f"  {facts}  (traced in {seconds * 1e3:.0f} ms)" for facts, seconds in
                    self.facts]
        return out


def spec_cache_info() -> list[KernelEntries]:
    """Per kernel directory: its entries, bytes, source versions and facts (each entry read
    and validated), and why it is not cacheable where that was noted."""
    root = cache_root()
    found = []
    if not root.is_dir():
        return found
    current = _environment()[1]
    for directory in sorted(p for p in root.iterdir() if p.is_dir()):
        info = KernelEntries(directory.name)
        note = directory / NOT_CACHEABLE
        if note.is_file():
            info.not_cacheable = note.read_text(errors="replace")
        for path in sorted(directory.glob("*" + SUFFIX)):
            try:
                blob_size = path.stat().st_size
            except OSError:
                continue
            info.entries += 1
            info.bytes += blob_size
            entry = _peek(path)
            if entry is None:
                info.corrupt += 1
                continue
            info.versions.add(entry.get("fingerprint"))
            info.stale += entry.get("environment_digest") != current
            timings = entry.get("timings", {})
            info.facts.append((entry.get("facts", "?"), sum(timings.get(p, 0.0) for p in
                                                             ("trace", "verify", "check",
                                                              "lower"))))
        found.append(info)
    return found


def _peek(path: Path) -> dict | None:
    """The extra metadata of an entry file, validated (not deleted when bad: info only looks)."""
    from layoutkit.ptx.cache import decode_entry
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    found = decode_entry(blob, path.stem)
    return None if found is None else found[1]


def spec_cache_clear() -> int:
    """Delete every specialization entry (and note) on disk; returns the entries removed."""
    return remove_tree_files(cache_root(), SUFFIX)
