"""`kernel.precompile(arg_specs)`: many specializations traced and assembled in parallel.

Each item of `arg_specs` is one call's arguments: a tuple (positional) or a dict (by name), with
lk.TensorSpec / lk.Pointer[dtype] standing for memory. The calls whose specialization the kernel
does not hold yet are split over `workers` processes (default: one per CPU, at most one per
call), forked from this one so that a kernel made inside a function works too; each traces,
verifies, checks and lowers its specialization, runs ptxas (so ptxas runs concurrently) and
stores the entry in the on-disk specialization cache (layoutkit.dsl.core.spec_cache), then sends
the entry back: this process loads it without tracing (also when the cache is off). A
specialization whose launch plan cannot be written down is traced again here (its cubin comes
from the cubin cache). A call that fails in a worker is specialized again here, so its own error
(a TraceError naming the user's line) is raised. Without fork (not Linux/macOS) or with one call
or one worker, everything runs here, in order.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from layoutkit.ptx.cache import decode_entry, encode_entry

from .arguments import bind
from .errors import KernelArgumentError
from .fingerprint import NotCacheable
from .launch_plan import plan_from_json, plan_to_json
from .progress import Progress
from .specialization import Specialization

__all__ = ["precompile", "build", "bound_calls"]

_ENTRY = "precompiled"          # the key a worker's entry is sent under
_JOBS: list = []                # (kernel, key, values) per job: set before the workers fork


def bound_calls(kernel, arg_specs) -> list[tuple[tuple, tuple]]:
    """(key, bound values) of each item of `arg_specs` (module docstring)."""
    if isinstance(arg_specs, (tuple, dict)) or not hasattr(arg_specs, "__iter__"):
        raise KernelArgumentError(f"kernel {kernel.name}.precompile takes a list of argument "
                                  f"specs (tuples or dicts), got {type(arg_specs).__name__}")
    calls = []
    for i, item in enumerate(arg_specs):
        if isinstance(item, dict):
            values = bind(kernel.params, (), item, kernel.name)
        elif isinstance(item, (tuple, list)):
            values = bind(kernel.params, tuple(item), {}, kernel.name)
        else:
            raise KernelArgumentError(f"kernel {kernel.name}.precompile: item {i} is a "
                                      f"{type(item).__name__}; give a tuple of arguments or a "
                                      "dict of arguments by name")
        calls.append((kernel._key(values), values))
    return calls


def _make(index: int):
    """In a worker: make job `index`'s specialization and its cubin; ("entry", bytes),
    ("ptx", None) when its plan cannot be written down, or ("error", text)."""
    kernel, key, values = _JOBS[index]
    try:
        spec = kernel._specialization(key, values)
        cubin = spec.cubin                       # ptxas; stored on disk if it can be
        try:
            plan = plan_to_json(spec.plan, spec.ir)
        except NotCacheable:
            return "ptx", None
        return "entry", encode_entry(_ENTRY, cubin, {"plan": plan, "timings": spec.timings},
                                     with_ptx=True)
    except Exception as exc:                     # re-raised in the parent by specializing there
        return "error", f"{type(exc).__name__}: {exc}"


def _loaded(kernel, key: tuple, blob: bytes) -> Specialization | None:
    found = decode_entry(blob, _ENTRY, kernel.arch())
    if found is None:
        return None
    cubin, extra = found
    return Specialization(key, None, cubin.ptx, dict(extra["timings"]), arch=kernel.arch(),
                          plan=plan_from_json(extra["plan"]), cubin=cubin,
                          retrace=lambda: kernel._retrace(key), source="precompiled")


def _fork_available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def precompile(kernel, arg_specs, *, workers: int | None = None, progress=None) -> list:
    """The specialization of each call of `arg_specs`, in order (module docstring)."""
    calls = bound_calls(kernel, arg_specs)
    failures = build([(kernel, key, values) for key, values in calls], workers=workers,
                     progress=progress, what=f"precompile {kernel.name}")
    for (key, values), failure in zip(calls, failures):
        if failure is not None:              # raise the error itself, from this process
            kernel._specialization(key, values).cubin
    return [kernel._specialization(key, values) for key, values in calls]


def build(jobs: list, *, workers: int | None = None, progress=None,
          what: str = "precompile") -> list[str | None]:
    """Make each job's specialization (a job: (kernel, key, bound values), the values read only
    for constexprs) with its cubin, in parallel where it can (module docstring), into its
    kernel's memory; per job None, or the error text of a call that failed."""
    result: list[str | None] = [None] * len(jobs)
    todo, seen = [], {}
    for i, (kernel, key, values) in enumerate(jobs):
        if key in kernel._cache:
            continue
        if (id(kernel), key) in seen:
            seen[id(kernel), key].append(i)
            continue
        seen[id(kernel), key] = [i]
        spec = kernel._from_disk(key)
        if spec is not None:
            kernel._cache[key] = spec
        else:
            todo.append(i)
    count = min(len(todo), workers or os.cpu_count() or 1)
    bar = Progress(len(todo), what, progress)
    try:
        if count > 1 and _fork_available():
            errors = _in_workers([jobs[i] for i in todo], count, bar)
        else:
            errors = []
            for i in todo:
                errors.append(_here(*jobs[i]))
                bar.update()
    finally:
        bar.close()
    for i, error in zip(todo, errors):
        for j in seen[id(jobs[i][0]), jobs[i][1]]:
            result[j] = error
    return result


def _here(kernel, key, values) -> str | None:
    try:
        kernel._specialization(key, values).cubin
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _in_workers(jobs: list, count: int, bar: Progress) -> list[str | None]:
    """Run `jobs` in `count` forked workers; per job None or the error text (a specialization
    whose plan did not come back is made here)."""
    for kernel, _, _ in jobs:
        kernel.arch()                    # found here: a worker never asks the driver
        kernel.disk_cache().reason       # the fingerprint, once, before the fork
    _JOBS[:] = jobs
    errors: list[str | None] = [None] * len(jobs)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(count, mp_context=context) as pool:
            futures = {pool.submit(_make, i): i for i in range(len(jobs))}
            for future in as_completed(futures):
                i = futures[future]
                kernel, key, values = jobs[i]
                try:
                    kind, payload = future.result()
                except BrokenProcessPool:
                    kind, payload = "ptx", None          # a worker died: make it here
                spec = _loaded(kernel, key, payload) if kind == "entry" else None
                if spec is not None:
                    kernel._cache[key] = spec
                elif kind == "error":
                    errors[i] = payload
                else:
                    errors[i] = _here(kernel, key, values)
                bar.update()
    finally:
        _JOBS.clear()
    return errors
