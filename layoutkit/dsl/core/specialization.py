"""One compiled specialization of a kernel (`Specialization`): its key, IR, PTX, LaunchPlan
and, lazily, its cubin, CompiledKernel and configured launchers (one per grid).

A specialization is made by tracing (`source` "traced") or loaded from the on-disk
specialization cache (`source` "disk", layoutkit.dsl.core.spec_cache): then it has no IR until
one is asked for; `ir` is a stand-in answering the launch facts from the plan.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from time import perf_counter

from layoutkit.ptx import LaunchConfigError, ParamSpec, assemble, launch_dims, CompiledKernel

from .ir import Function
from .launch_fast import plain_grid
from .launch_plan import LaunchPlan, plan_of
from .opdef import SM90A

__all__ = ["Specialization", "MAX_LAUNCHERS"]

MAX_LAUNCHERS = 16  # configured launchers a specialization keeps (one per grid; the fast path
                    # of kernel[grid] keeps the ones it launches through on its own, up to 256)


# The lists Specialization.collected() blocks fill (innermost last); empty outside them.
_COLLECTORS: ContextVar[tuple] = ContextVar("layoutkit_specializations_collected", default=())


class Specialization:
    """One compiled specialization: its key, verified IR, PTX, launch plan and (lazily)
    cubin/launcher.

    `timings` holds the seconds each phase of making it took, measured once when it was made
    (perf_counter): "trace", "verify", "check" (the protocol check), "lower" and, once the
    cubin is assembled, "ptxas" (a cubin-cache hit included; benchmarks/bench_compile.py).
    `source` is "traced" (made in this process), "disk" (loaded from the on-disk
    specialization cache, layoutkit.dsl.core.spec_cache) or "precompiled" (made by a worker of
    kernel.precompile); the last two have PTX, cubin and LaunchPlan without a
    trace; its `ir` answers the plan's facts, name, num_warps, shared_bytes, cluster, debug and
    target, and traces the kernel the first time anything else of it is asked)."""

    def __init__(self, key: tuple, ir, ptx: str | None, timings: dict | None = None, *,
                 arch: str = SM90A, plan: LaunchPlan | None = None, cubin=None,
                 retrace=None, persist=None, source: str | None = None, lower=None):
        self.key, self._ptx, self._lower, self.arch = key, ptx, lower, arch
        self.timings = {} if timings is None else timings
        self._traced, self._plan, self._cubin = ir, plan, cubin
        self._retrace, self._persist = retrace, persist
        self._compiled = None
        self._launchers: dict = {}
        self.source = source or ("traced" if ir is not None else "disk")
        self.has_hidden = bool(self.plan.hidden)   # the fast path: through launch_maps

    def __repr__(self) -> str:
        return f"<Specialization of {self.plan.name} ({self.source}) key={self.key}>"

    @property
    def ptx(self) -> str:
        """The PTX text (lowered now if the specialization was made unlowered:
        Kernel.specialize_unlowered)."""
        if self._ptx is None:
            self._ptx = self._lower()
        return self._ptx

    @property
    def ir(self):
        """The verified IR (for a specialization from disk: a stand-in, see the class docs)."""
        if self._traced is None:
            return _LoadedIR(self)
        return self._traced

    def traced_ir(self) -> Function:
        """The verified IR, tracing the kernel now if this specialization came from disk."""
        if self._traced is None:
            self._traced = self._retrace()
        return self._traced

    @property
    def plan(self) -> LaunchPlan:
        """What a launch needs (layoutkit.dsl.core.launch_plan.LaunchPlan)."""
        if self._plan is None:
            self._plan = plan_of(self._traced, self.key)
        return self._plan

    @property
    def protocol_checked(self) -> bool:
        """Whether the static protocol check passed (False: traced under
        lk.protocol_check_skipped(); checked when next used outside one)."""
        if self._traced is None:
            return True                 # only checked specializations are stored on disk
        return getattr(self._traced, "protocol_checked", True)

    @property
    def shared_bytes(self) -> int:
        """Bytes of dynamic shared memory a launch needs."""
        return self.plan.shared_bytes

    @property
    def cubin(self):
        if self._cubin is None:
            start = perf_counter()
            self._cubin = assemble(self.ptx, self.arch)
            self.timings["ptxas"] = perf_counter() - start
            if self._persist is not None:
                self._persist(self)
        return self._cubin

    @staticmethod
    @contextlib.contextmanager
    def collected():
        """A list of every Specialization that Kernel.specialize returns inside the block (made
        or from the kernel's cache), in order: the IR behind PTX that code such as a recipe's
        compile_default() made (`layoutkit compile --resources`). Observes only."""
        made: list = []
        token = _COLLECTORS.set(_COLLECTORS.get() + (made,))
        try:
            yield made
        finally:
            _COLLECTORS.reset(token)

    @property
    def compiled(self):
        """The CompiledKernel, its parameters refined with the key's facts: a pointer must be
        16-byte aligned where the key says so (else element-aligned); a 64-bit scalar takes
        ints only."""
        if self._compiled is None:
            self._compiled = CompiledKernel(self.cubin, self.plan.name,
                                            params=list(self.plan.params))
        return self._compiled

    def param_specs(self) -> list[ParamSpec]:
        """The PTX parameters as layoutkit.ptx ParamSpecs, in order."""
        return list(self.plan.params)

    def hidden_values(self, values: tuple) -> list:
        """The launch values of the DSL's hidden parameters for the bound arguments `values`."""
        return self.plan.hidden_values(values)

    @property
    def cluster(self):
        """The cluster shape the kernel launches with (None: no clusters)."""
        return self.plan.cluster

    def launcher(self, grid, threads: int):
        """The compiled kernel configured for `grid` and `threads` (kept per grid; see
        CompiledKernel.configure): the shape is checked once, a launch is one call."""
        key = grid
        plan = self.plan
        if not plain_grid(grid):     # a list, True, or 4.0 (== 4 as a key): kept by its (x, y, z)
            try:
                key = launch_dims("grid", grid)
            except LaunchConfigError:    # configure words it
                return self.compiled.configure(grid, threads, plan.shared_bytes,
                                               cluster=plan.cluster)
        launcher = self._launchers.get(key)
        if launcher is None:
            if len(self._launchers) >= MAX_LAUNCHERS:
                self._launchers.clear()
            launcher = self.compiled.configure(grid, threads, plan.shared_bytes,
                                               cluster=plan.cluster)
            self._launchers[key] = launcher
        return launcher


_PLAN_FACTS = frozenset({"name", "num_warps", "shared_bytes", "cluster", "debug", "target"})


class _LoadedIR:
    """The `ir` of a specialization from the on-disk cache: the plan's facts (_PLAN_FACTS) without
    a trace; any other attribute (ops, params, str()) traces the kernel once and reads the IR."""

    __slots__ = ("_spec",)

    def __init__(self, spec: Specialization):
        self._spec = spec

    def __getattr__(self, name):
        if name in _PLAN_FACTS:
            return getattr(self._spec.plan, name)
        return getattr(self._spec.traced_ir(), name)

    @property
    def protocol_checked(self) -> bool:
        return True

    def __str__(self) -> str:
        return str(self._spec.traced_ir())
