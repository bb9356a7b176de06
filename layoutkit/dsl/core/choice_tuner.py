"""`lk.ChoiceTuner`: the function form of `@lk.autotune`, for a recipe whose choice is more than
one kernel's constexprs (which kernels run, their tile shapes, a split into two launches).

    tuner = lk.ChoiceTuner("recipes.gemm_hopper.gemm", Config, default=config_for,
                           sources=(gemm_tiles,))
    cfg = tuner.choose(key)                  # the key's winner (memory, disk), else default(key)
    cfg = tuner.tune(key, {cfg: launches(cfg) for cfg in space})      # sweep now, keep winner

A config is an instance of one frozen dataclass (`config_type`) of plain fields; a key is a
tuple of plain values (shapes, majors, dtype names, the device's name). `tune` is given each
candidate's launches, a list of (kernel, grid, args, constexprs) as the recipe runs them: every
specialization they need is made in parallel (kernel.precompile's workers: tracing and ptxas in
processes), a candidate one of whose launches does not compile is dropped (its error kept in
`report`), the rest are timed by `timer` (default: the interleaved CUDA-event timer that
`import layoutkit` installs: warm-up, an L2 flush per call, medians) and the fastest is kept per
key in memory and in `<LAYOUTKIT_CACHE_DIR>/autotune/` (one JSON file per tuner, named by its
name and a fingerprint of `sources` (functions: their source and everything they close over)
and the config type's fields; an lk.kernel stands for its definition). Entries are validated when read: one that does not decode into a
config of the type reads as absent, so a key falls back to its default.
"""
from __future__ import annotations

import dataclasses
import types

from layoutkit.ptx.settings import get_settings

from .arguments import bind
from .autotune import WinnerTable, _key_text, time_candidates
from .errors import DSLError, KernelDefinitionError
from .fingerprint import NotCacheable, digest, function_fingerprint
from .precompile import build

__all__ = ["ChoiceTuner"]


class ChoiceTuner:
    """Winners among a recipe's configs per key, tuned on the GPU and kept on disk (module
    docstring). `report` is the last tuning's {config label: median ms or the error that
    dropped it}."""

    def __init__(self, name: str, config_type: type, *, default, sources=(), timer=None,
                 reps: int = 20, warmup: int = 3, workers: int | None = None, progress=None):
        if not (dataclasses.is_dataclass(config_type) and isinstance(config_type, type)):
            raise KernelDefinitionError(f"ChoiceTuner {name}: config_type must be a dataclass "
                                        f"type, got {config_type!r}")
        if not callable(default):
            raise KernelDefinitionError(f"ChoiceTuner {name}: default must be a function of "
                                        f"the key returning a config, got {default!r}")
        self.name, self.config_type, self.default = name, config_type, default
        self.sources = tuple(_source_function(name, f) for f in sources)
        self.timer, self.reps, self.warmup = timer, reps, warmup
        self.workers, self.progress = workers, progress
        self._best: dict = {}
        self._disk = WinnerTable(self._path)
        self.report: dict = {}

    def choose(self, key: tuple):
        """The config of `key`: its winner (this process's, else the disk's), else
        default(key). Never tunes."""
        found = self._best.get(key)
        if found is None:
            found = self._from_disk(key)
            if found is None:
                found = self.default(key)
                if not isinstance(found, self.config_type):
                    raise KernelDefinitionError(
                        f"ChoiceTuner {self.name}: the default of key {key!r} is {found!r}, "
                        f"not a {self.config_type.__name__}")
            self._best[key] = found
        return found

    def tune(self, key: tuple, candidates: dict):
        """Sweep `candidates` ({config: its launches}) for `key` now and keep the fastest
        (module docstring); returns it."""
        configs = list(candidates)
        bad = [c for c in configs if not isinstance(c, self.config_type)]
        if not configs or bad:
            raise KernelDefinitionError(f"ChoiceTuner {self.name}: candidates must be a "
                                        f"non-empty dict of {self.config_type.__name__} -> "
                                        f"launches, got {bad[:1] or candidates!r}")
        jobs, owner = [], []
        for i, cfg in enumerate(configs):
            for kernel, _, args, constexprs in candidates[cfg]:
                values = bind(kernel.params, tuple(args), dict(constexprs), kernel.name)
                jobs.append((kernel, kernel._key(values), values))
                owner.append(i)
        failures = build(jobs, workers=self.workers, progress=self.progress,
                         what=f"tune {self.name}: compiling {len(configs)} configs")
        dropped: dict = {}
        for i, (kernel, spec_key, values), failure in zip(owner, jobs, failures):
            if failure is None and i not in dropped:
                try:
                    kernel._specialization(spec_key, values)
                except DSLError as exc:
                    failure = str(exc)
            if failure is not None:
                dropped.setdefault(i, failure)
        self.report = {str(configs[i]): error for i, error in dropped.items()}
        runs = {str(c): _runner(candidates[c]) for i, c in enumerate(configs) if i not in dropped}
        times, label = time_candidates(f"tune {self.name}", runs, self.report, self.timer,
                                       self.reps, self.warmup, self.progress)
        winner = next(c for c in configs if str(c) == label)
        self._best[key] = winner
        self._disk.put(_key_text(key), {"config": dataclasses.asdict(winner),
                                        "times_ms": times})
        return winner

    def _from_disk(self, key: tuple):
        entry = self._disk.get(_key_text(key))
        fields = entry.get("config") if entry is not None else None
        if not isinstance(fields, dict):
            return None
        try:
            return self.config_type(**fields)
        except (TypeError, ValueError):        # written by another version of the type
            return None

    def _path(self):
        try:
            fingerprint = digest(self.name, *(function_fingerprint(f) for f in self.sources),
                                 repr([(f.name, str(f.type)) for f in
                                       dataclasses.fields(self.config_type)]))
        except NotCacheable:
            return None
        return get_settings().cache_dir / "autotune" / f"{self.name}-{fingerprint[:24]}.json"

    def __repr__(self) -> str:
        return f"<lk.ChoiceTuner {self.name}: {len(self._best)} key(s) chosen>"


def _source_function(name: str, source) -> types.FunctionType:
    """A source's Python function (an lk.kernel's definition for a kernel)."""
    from .kernel import Kernel
    found = source.fn if isinstance(source, Kernel) else source
    if not isinstance(found, types.FunctionType):
        raise KernelDefinitionError(f"ChoiceTuner {name}: sources are Python functions or "
                                    f"lk.kernels, got {source!r}")
    return found


def _runner(steps: list):
    """A zero-argument function running a candidate's launches in order."""
    def run():
        for kernel, grid, args, constexprs in steps:
            kernel[grid](*args, **constexprs)
    return run
