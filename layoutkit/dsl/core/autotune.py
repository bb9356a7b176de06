"""`@lk.autotune(configs=[...], key=[...])`: the fastest of a kernel's candidate configurations,
chosen once per key and kept on disk.

    @lk.autotune(configs=[lk.Config(BLOCK=256), lk.Config(BLOCK=512, num_warps=8)], key=["n"])
    @lk.kernel(num_warps=4)
    def scale(x: lk.Tensor[lk.f32, 1], n: lk.i32, BLOCK: lk.constexpr): ...

    scale[lambda meta: (-(-meta["n"] // meta["BLOCK"]),)](x, n)     # tunes at the first call

A Config gives values to some of the kernel's constexprs and may set num_warps and cluster (the
kernel made again with that block size or cluster shape). The tuning key is the values of the arguments named in `key`
(a tensor's: its shape, strides and dtype), the device's name, and the specialization facts of
the other arguments. At the first call of a key: every candidate's specialization is made in
parallel (kernel.precompile's workers: tracing and ptxas in processes), a candidate that does
not compile is dropped (its error kept in `report`), the rest are timed on the call's own
arguments by `timer` (default: layoutkit.tools.benchmarking.interleaved, CUDA events,
interleaved calls, warm-up and an L2 flush per call, medians; installed by `import layoutkit`;
tests pass a fake one), and the fastest runs. Timed launches write the call's outputs: a kernel
that accumulates into its output is tuned on a copy by the caller. The winner is kept per key in
memory and in `<LAYOUTKIT_CACHE_DIR>/autotune/` (one JSON file per kernel, keyed by the kernel's
fingerprint, its configs and key names; written atomically), so a new process tunes nothing.

`grid` is an int, a tuple, or a function of `meta` (the call's arguments by name and the
config's constexprs and num_warps). A progress line shows the compile and the timing (tqdm's
bar when installed).

With `default=` (a Config, or a function of the call's arguments by name returning one) a key
with no winner yet launches that default instead of tuning, so a first call never waits on a
sweep; `tuner.tune(grid, *args, **kwargs)` runs the sweep for the call's key and keeps its
winner (in memory and on disk), which later calls of that key, in any process, then launch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from layoutkit.ptx.cache import write_atomically
from layoutkit.ptx.settings import get_settings

from .arguments import bind
from .errors import DSLError, KernelDefinitionError
from .fingerprint import NotCacheable, canonical, digest, function_fingerprint
from .precompile import build
from .progress import Progress

__all__ = ["Config", "Autotuner", "autotune", "set_default_timer"]

_DEFAULT_TIMER = [None]


def set_default_timer(timer) -> None:
    """The timer autotuners use when given none: `timer(candidates, reps=, warmup=)` with
    candidates {label: zero-argument launch} returning {label: ms or an object with
    median_ms} (layoutkit/__init__.py installs layoutkit.tools.benchmarking.interleaved)."""
    _DEFAULT_TIMER[0] = timer


@dataclass(frozen=True, init=False)
class Config:
    """One candidate: values of constexprs and, optionally, the kernel's num_warps and cluster
    shape (an int or a tuple, as @lk.kernel takes it)."""

    constexprs: tuple
    num_warps: int | None
    cluster: object

    def __init__(self, num_warps: int | None = None, cluster=None, **constexprs):
        object.__setattr__(self, "constexprs", tuple(sorted(constexprs.items())))
        object.__setattr__(self, "num_warps", num_warps)
        object.__setattr__(self, "cluster", tuple(cluster) if isinstance(cluster, list)
                           else cluster)

    @property
    def kwargs(self) -> dict:
        return dict(self.constexprs)

    def __str__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self.constexprs]
        if self.num_warps is not None:
            parts.append(f"num_warps={self.num_warps}")
        if self.cluster is not None:
            parts.append(f"cluster={self.cluster}")
        return ", ".join(parts) or "(defaults)"


def autotune(configs, key, *, timer=None, reps: int = 20, warmup: int = 3,
             workers: int | None = None, progress=None, default=None):
    """Decorator over an `@lk.kernel`: an Autotuner (module docstring)."""
    def decorate(kernel):
        return Autotuner(kernel, configs, key, timer=timer, reps=reps, warmup=warmup,
                         workers=workers, progress=progress, default=default)
    return decorate


class Autotuner:
    """A kernel with candidate configs; `tuner[grid](...)` launches the best for the call's key.
    `best(*args, **kwargs)` is that config (tuning if needed, or the default); `tune(...)` runs
    the sweep; `report` the last tuning's {config label: median ms or the error that dropped
    it}."""

    def __init__(self, kernel, configs, key, *, timer=None, reps: int = 20, warmup: int = 3,
                 workers: int | None = None, progress=None, default=None):
        from .kernel import Kernel
        if not isinstance(kernel, Kernel):
            raise KernelDefinitionError(f"@lk.autotune decorates an @lk.kernel, got {kernel!r}")
        self.kernel, self.name = kernel, kernel.name
        self.configs = tuple(configs) if not isinstance(configs, Config) else (configs,)
        self.key = (key,) if isinstance(key, str) else tuple(key)
        self.timer, self.reps, self.warmup = timer, reps, warmup
        self.workers, self.progress, self.default = workers, progress, default
        self._check()
        self.tuned = frozenset(k for c in self.configs for k, _ in c.constexprs)   # set by configs
        self._variants = {(kernel.num_warps, kernel.cluster): kernel}
        self._best: dict = {}
        self._remembered: dict = {}          # launch_remembered's facts -> (launch, constexprs)
        self._disk = WinnerTable(self._path)
        self.report: dict = {}

    def _check(self) -> None:
        names = {p.name: p for p in self.kernel.params}
        if not self.configs or not all(isinstance(c, Config) for c in self.configs):
            raise KernelDefinitionError(f"autotune {self.name}: configs must be a non-empty "
                                        f"list of lk.Config, got {self.configs!r}")
        for c in self.configs + ((self.default,) if isinstance(self.default, Config) else ()):
            for k, _ in c.constexprs:
                if k not in names or names[k].kind != "constexpr":
                    raise KernelDefinitionError(
                        f"autotune {self.name}: config {c} sets {k!r}, which is not a constexpr "
                        f"of the kernel (constexprs: {', '.join(n for n, p in names.items() if p.kind == 'constexpr') or 'none'})")
        for k in self.key:
            if k not in names:
                raise KernelDefinitionError(f"autotune {self.name}: key names {k!r}, which is "
                                            f"not a parameter ({', '.join(names)})")
        if self.default is not None and not (isinstance(self.default, Config) or
                                             callable(self.default)):
            raise KernelDefinitionError(f"autotune {self.name}: default must be an lk.Config or "
                                        f"a function of the arguments returning one, got "
                                        f"{self.default!r}")

    # ---- kernels and keys --------------------------------------------------------------------
    def kernel_for(self, config: Config):
        """The kernel with the config's num_warps and cluster (the decorated one's where it
        sets none)."""
        from .kernel import Kernel, _cluster_shape
        base = self.kernel
        warps = config.num_warps or base.num_warps
        cluster = base.cluster if config.cluster is None else \
            _cluster_shape(base.name, config.cluster, None)
        k = self._variants.get((warps, cluster))
        if k is None:
            k = self._variants[warps, cluster] = Kernel(
                base.fn, warps, cluster=cluster, debug=base.debug, target=base.target,
                do_not_specialize=base.do_not_specialize)
        return k

    def tuning_key(self, values: tuple) -> tuple:
        """The key a winner is kept under, for the bound arguments `values` (module docstring)."""
        named = {p.name: v for p, v in zip(self.kernel.params, values)}
        key = self.kernel._key(values)
        facts = tuple(key[i] for i, p in enumerate(self.kernel.params) if p.name not in self.tuned)
        return tuple(_key_value(named[k]) for k in self.key) + (facts, _device_name())

    # ---- choosing ----------------------------------------------------------------------------
    def best(self, grid, *args, **kwargs) -> Config:
        """The fastest config for these arguments on `grid` (tuned now if the key is new; the
        constexprs the configs set are left out)."""
        return self._best_for(self._bind(args, kwargs), grid)

    def _bind(self, args, kwargs) -> tuple:
        return bind_partial(self.kernel.params, args, kwargs, self.name, self.tuned)

    def tune(self, grid, *args, **kwargs) -> Config:
        """Run the sweep for these arguments' key now (even if it has a winner) and keep its
        winner; returns it."""
        values = self._bind(args, kwargs)
        key = self.tuning_key(values)
        found = self._best[key] = self._tune(values, key, grid)
        self._remembered.clear()
        return found

    def _best_for(self, values: tuple, grid) -> Config:
        key = self.tuning_key(values)
        found = self._best.get(key)
        if found is None:
            found = self._from_disk(key)
        if found is None and self.default is not None:
            found = self._default(values)
        if found is None:
            found = self._tune(values, key, grid)
        self._best[key] = found
        return found

    def _default(self, values: tuple) -> Config:
        """The default config for the bound arguments `values` (a KernelDefinitionError where
        the default function returns something else)."""
        if isinstance(self.default, Config):
            return self.default
        found = self.default({p.name: v for p, v in zip(self.kernel.params, values)})
        if not isinstance(found, Config):
            raise KernelDefinitionError(f"autotune {self.name}: the default function returned "
                                        f"{found!r}, not an lk.Config")
        return found

    def __getitem__(self, grid):
        def launch(*args, stream=None, **kwargs):
            values = self._bind(args, kwargs)
            config = self._best_for(values, grid)
            self._launcher(grid, config, values)(stream)
        return launch

    def launch_remembered(self, facts, grid, *args, stream=None, **kwargs) -> None:
        """`self[grid](*args, **kwargs)` for a caller whose hashable `facts` determine the call's
        tuning key and grid (every tensor's shape, strides, dtype and 16-byte alignment, every
        integer's value, the device): the config, its kernel and grid are found by one lookup
        of `facts` after the first call with them (a sweep run by tune() forgets them), and the
        launch is the kernel's own `kernel[grid](...)` with the config's constexprs."""
        found = self._remembered.get(facts)
        if found is None:
            values = self._bind(args, kwargs)
            config = self._best_for(values, grid)
            k = self.kernel_for(config)
            if callable(grid):
                grid = grid(dict(zip((p.name for p in k.params), values), **config.kwargs,
                                 num_warps=k.num_warps))
            if len(self._remembered) >= 1024:
                self._remembered.clear()
            found = self._remembered[facts] = (k[grid], config.kwargs)
        launch, constexprs = found
        launch(*args, stream=stream, **{**kwargs, **constexprs})

    def _launcher(self, grid, config: Config, values: tuple):
        """A function(stream) launching `config` on the bound arguments `values`."""
        k = self.kernel_for(config)
        call = dict(zip((p.name for p in k.params), values))
        call.update(config.kwargs)
        if callable(grid):
            meta = dict(call, num_warps=k.num_warps)
            grid = grid(meta)
        return lambda stream=None: k[grid](stream=stream, **call)

    def _tune(self, values: tuple, key: tuple, grid) -> Config:
        jobs = []
        for c in self.configs:
            k = self.kernel_for(c)
            full = tuple(dict(c.constexprs).get(p.name, v) for p, v in zip(k.params, values))
            jobs.append((k, k._key(full), full))
        failures = build(jobs, workers=self.workers, progress=self.progress,
                         what=f"autotune {self.name}: compiling {len(jobs)} configs")
        self.report = {}
        candidates = {}
        for c, (k, spec_key, full), failure in zip(self.configs, jobs, failures):
            if failure is None:
                try:
                    k._specialization(spec_key, full)
                except DSLError as exc:
                    failure = str(exc)
            if failure is not None:
                self.report[str(c)] = failure
                continue
            candidates[str(c)] = self._launcher(grid, c, values)
        times, winner_label = time_candidates(f"autotune {self.name}", candidates, self.report,
                                              self.timer, self.reps, self.warmup, self.progress)
        winner = next(c for c in self.configs if str(c) == winner_label)
        self._to_disk(key, winner, times)
        return winner

    # ---- on disk -----------------------------------------------------------------------------
    def _path(self):
        try:
            fingerprint = digest(function_fingerprint(self.kernel.fn), self.kernel.identity(),
                                 canonical(self.configs, "the configs"), repr(self.key))
        except NotCacheable:
            return None
        return get_settings().cache_dir / "autotune" / f"{self.kernel.disk_cache().label}-" \
            f"{fingerprint[:24]}.json"

    def _from_disk(self, key: tuple) -> Config | None:
        entry = self._disk.get(_key_text(key))
        label = entry.get("config") if entry is not None else None
        return next((c for c in self.configs if str(c) == label), None)

    def _to_disk(self, key: tuple, winner: Config, times: dict) -> None:
        self._disk.put(_key_text(key), {"config": str(winner), "times_ms": times})

    def __repr__(self) -> str:
        return f"<lk.autotune {self.name}: {len(self.configs)} configs, key {list(self.key)}>"


def time_candidates(what: str, candidates: dict, report: dict, timer, reps: int, warmup: int,
                    progress) -> tuple[dict, str]:
    """Time `candidates` ({label: zero-argument launch}, those that compiled; `report` holds
    the others' errors and gains the times) with `timer` (else the default timer), showing a
    progress line; ({label: median ms}, the fastest's label). `what` names the tuner."""
    if not candidates:
        raise DSLError(f"{what}: no config compiles:\n" + "\n".join(
            f"  {c}: {e}" for c, e in report.items()))
    timer = timer or _DEFAULT_TIMER[0]
    if timer is None:
        raise DSLError(f"{what}: no timer (pass timer=, or import layoutkit, "
                       "which installs the CUDA-event timer)")
    bar = Progress(1, f"{what}: timing {len(candidates)} configs", progress)
    times = {label: _ms(t) for label, t in timer(candidates, reps=reps, warmup=warmup).items()}
    fastest = min(times, key=times.get)
    bar.update(f"best {fastest}: {times[fastest]:.4g} ms")
    bar.close()
    report.update(times)
    return times, fastest


class WinnerTable:
    """A tuner's winners on disk: one JSON object {key text: entry dict} at `path()` (None: the
    tuner cannot be written down), read once, written atomically; unreadable or malformed files
    and entries read as absent, and nothing is read or written with the cache off
    (LAYOUTKIT_SPEC_CACHE=0)."""

    def __init__(self, path):
        self._path, self._table = path, None

    def _load(self) -> dict:
        if self._table is None:
            self._table = {}
            path = self._path()
            if path is not None:
                try:
                    found = json.loads(path.read_text())
                    self._table = found if isinstance(found, dict) else {}
                except (OSError, ValueError):
                    pass
        return self._table

    def get(self, key: str) -> dict | None:
        if not get_settings().spec_cache:
            return None
        entry = self._load().get(key)
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict) -> None:
        path = self._path()
        if path is None or not get_settings().spec_cache:
            return
        table = dict(self._load())
        table[key] = entry
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(table, sort_keys=True, indent=1).encode())
            self._table = table
        except OSError:
            pass


def bind_partial(params, args, kwargs, name, tuned: set) -> tuple:
    """The arguments in parameter order, the constexprs in `tuned` (the configs set them) left
    out by the caller as None."""
    if len(args) > len(params) or any(p.name in kwargs for p in params[:len(args)]):
        return bind(params, args, kwargs, name)          # words the error
    given = dict(zip((p.name for p in params), args))
    given.update(kwargs)
    missing = {p.name: None for p in params if p.name not in given and p.name in tuned}
    return bind(params, (), {**missing, **given}, name)


def _key_value(value):
    shape = getattr(value, "shape", None)
    if shape is not None:
        stride = getattr(value, "stride", None)
        strides = stride() if callable(stride) else getattr(value, "strides", None)
        return (tuple(int(n) for n in shape), tuple(strides) if strides is not None else None,
                str(getattr(value, "dtype", "")))
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return repr(value)


def _key_text(key: tuple) -> str:
    return repr(key)


def _ms(t) -> float:
    return float(getattr(t, "median_ms", t))


def _device_name() -> str:
    from layoutkit.ptx import CudaDriverError, DriverUnavailableError, current_device
    try:
        return current_device().name
    except (DriverUnavailableError, CudaDriverError, RuntimeError):   # RuntimeError: no libcuda
        return "no device"
