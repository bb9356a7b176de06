"""`interpret(kernel, grid, *args, seed=0, **kwargs)`: run a kernel on the CPU.

The kernel is specialized exactly as a launch would (the arrays' dtypes and alignment facts,
the integers' facts, the constexprs), its verified IR compiled into per-op steps, and every CTA
of the grid run with one thread coroutine per thread of the block under the seeded scheduler.
Pointer arguments are numpy arrays (C-contiguous; bf16 data as uint16 bit patterns, see
`to_bf16`), which are the global memory: stores land in them. Tensor arguments are numpy arrays
with any non-negative strides (slices too: the memory they span is mapped); their extents and
strides are the kernel's. Scalars are Python numbers.
"""
from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass

import numpy as np

from layoutkit.sync import MBARRIER_BYTES

from ..core import collector
from ..core.arguments import bind
from ..core.kernel import Kernel
from ..core.types import PointerType, TensorMapType
from . import dsmem_model, float8
from .cluster_model import cluster_registers
from .errors import ExecutionError
from .executor import Compiler, run_steps
from .happens_before import HappensBefore
from .machine import CTA, WARP_SIZE
from .memory import GlobalMemory, SharedMemory
from .numerics import to_dtype
from .scheduler import DEFAULT_MAX_STEPS, Scheduler

OPTION_NAMES = ("seed", "max_steps", "race_check")


@dataclass(frozen=True)
class Execution:
    """What a run did: the `seed`, the scheduler's decisions (`schedule`: a thread uid, or
    -1 - k for the k-th asynchronous completion), the `steps` taken, the CTAs in run order."""

    seed: int
    schedule: tuple
    steps: int
    ctas: tuple

    @property
    def digest(self) -> str:
        """A short hash of the schedule (equal for equal interleavings)."""
        data = np.asarray(self.schedule, dtype=np.int64).tobytes()
        return hashlib.sha1(data).hexdigest()[:16]


class Unresolved:
    """A hidden parameter whose launch value could not be computed for host arrays."""

    def __init__(self, name: str, error: Exception):
        self.name, self.error = name, error

    def __repr__(self) -> str:
        return f"<unresolved hidden parameter {self.name}: {self.error}>"


class Machine:
    """One kernel run: global memory, the compiled kernel, the scheduler and the CTAs."""

    def __init__(self, fn, values: tuple, params, scheduler: Scheduler, race_check: bool,
                 compiled: Compiler | None = None):
        self.fn = fn
        self.scheduler = scheduler
        self.memory = GlobalMemory()
        self.values = values         # the bound arguments (hidden parameters' resolvers read them)
        self.params = self._bind_params(fn, values, params)
        self.compiled = compiled or Compiler(fn)
        self.agents = async_agents(fn)
        self.hb = HappensBefore(tuple(self.agents.values())) if race_check else None
        self.state: dict = {}        # per-family machine-wide state
        self.ctas: list[CTA] = []

    def _bind_params(self, fn, values: tuple, params) -> dict:
        env = {}
        for op in fn.params:
            value, index = op.results[0], op.attrs["index"]
            if index is None:
                try:
                    env[value.id] = op.attrs["resolve"](values)
                except Exception as exc:  # a resolver made for device arrays
                    env[value.id] = Unresolved(op.attrs["name"], exc)
                continue
            arg, name = values[index], params[index]
            field = op.attrs.get("field")
            if field is not None:                        # a Tensor parameter's extent/stride
                env[value.id] = to_dtype(op.attrs["read"](values), value.type)
            elif isinstance(value.type, PointerType):
                array = tensor_span(name, arg) if op.attrs.get("tensor") else \
                    _host_array(name, arg)
                env[value.id] = self.memory.add(name, array, value.type.dtype)
            elif isinstance(value.type, TensorMapType):
                env[value.id] = arg
            else:
                env[value.id] = to_dtype(arg, value.type)
        return env

    # ---- hooks the op families call -------------------------------------------------------
    def on_barrier_complete(self, barrier, arrived, waiters) -> None:
        """A barrier phase completed: the waiters have seen every arriver's past."""
        if self.hb is not None:
            by_cta: dict = {}
            for thread in arrived:
                by_cta.setdefault(id(thread.cta), ([], []))[0].append(thread)
            for thread in waiters:
                by_cta.setdefault(id(thread.cta), ([], []))[1].append(thread)
            for cta_arrived, cta_waiters in by_cta.values():
                self.hb.synchronize(cta_arrived, cta_waiters)

    def on_shared_access(self, thread, start: int, nbytes: int, writes: bool, what: str,
                         op, same=None) -> None:
        """Race-check an access (`same`: per byte, whether a write leaves it unchanged)."""
        if self.hb is not None:
            self.hb.access_at(thread.cta, thread.tid, start, nbytes, writes, what, op, same)
            dsmem_model.access(thread, thread.cta, start, nbytes, writes, what, op)

    def on_thread_exit(self, thread) -> None:
        for hook in self.state.get("exit_hooks", ()):
            hook(thread)

    # ---- running ----------------------------------------------------------------------------
    def new_cta(self, coord: tuple) -> CTA:
        cta = CTA(self, coord, self.fn.num_warps, len(self.ctas) * 32 * self.fn.num_warps)
        cta.shared = SharedMemory(self.fn)
        if self.hb is not None:
            self.hb.add_cta(cta)
        for thread in cta.threads:
            thread.env = dict(self.params)
            thread.gen = run_steps(thread, self.compiled.body)
        self.ctas.append(cta)
        return cta

    def run(self, clusters: list[list[tuple]], grid: tuple, shape: tuple) -> None:
        """Run the clusters (lists of CTA coordinates, in rank order) one after another, the
        CTAs of a cluster interleaved, with the cyclic collector paused: a run allocates
        millions of short-lived objects, and the collections they trigger would scan every
        object of the process (a third of a flash attention run's time); what a run keeps in
        cycles (its CTAs and threads) lives as long as the machine anyway."""
        with collector.paused():
            self._run(clusters, grid, shape)

    def _run(self, clusters: list[list[tuple]], grid: tuple, shape: tuple) -> None:
        for coords in clusters:
            wave = [self.new_cta(c) for c in coords]
            for cta in wave:
                cta.state["cluster_ctas"] = wave
                cta.state["cluster_registers"] = cluster_registers(cta.coord, grid, shape)
            if self.hb is not None and self.compiled.cluster_memory:
                dsmem_model.enable(wave)
            threads = [t for cta in wave for t in cta.threads]
            for thread in threads:
                self.scheduler.start(thread)
            self.scheduler.run(threads)
            for cta in wave:            # a read of unwritten shared bytes, if one was noted
                cta.shared.finish(f"CTA {cta.coord}: ")
            if not self.scheduler.pending:
                release(wave)


def release(wave: list) -> None:
    """Break a finished cluster's reference cycles (its threads and CTAs, their coroutines and
    the families' state), so that reference counting frees them, not a scan of the collector's."""
    for cta in wave:
        for thread in cta.threads:
            thread.gen = thread.waiting = thread.yielded = None
            thread.env.clear()
            thread.state.clear()
            thread.notes.clear()
        for warp in cta.warps:
            warp.threads.clear()
        cta.warps.clear()
        cta.threads.clear()
        cta.state.clear()
        cta.barriers.clear()


def async_agents(fn) -> dict:
    """mbarrier byte offset -> the name of the asynchronous agent (the TMA copies completing
    on that barrier) whose writes the race detector tracks, one per mbarrier of `fn`."""
    agents: dict = {}

    def walk(block):
        for op in block.ops:
            if op.name == "mbarrier_init":
                a = op.attrs
                for stage in range(a["stages"]):
                    agents.setdefault(a["offset"] + MBARRIER_BYTES * stage,
                                      f"the TMA copies completing on {a['barrier']}[{stage}]")
            for inner in op.blocks:
                walk(inner)
    walk(fn.body)
    return agents


def _host_array(name: str, arg) -> np.ndarray:
    if not isinstance(arg, np.ndarray):
        raise ExecutionError(f"argument {name}: the CPU interpreter takes numpy arrays for "
                             f"pointer parameters, got {type(arg).__name__}", None)
    if not arg.flags.c_contiguous:
        raise ExecutionError(f"argument {name}: a {arg.shape} array with strides {arg.strides} "
                             "is not C-contiguous; the kernel would address its memory as one "
                             "block (pass np.ascontiguousarray(...))", None)
    return arg


def tensor_span(name: str, arg) -> np.ndarray:
    """The memory a Tensor argument's elements span (a numpy array, any non-negative strides,
    e.g. a slice), as one flat array from its first element: the kernel's global memory there."""
    if not isinstance(arg, np.ndarray):
        raise ExecutionError(f"argument {name}: the CPU interpreter takes numpy arrays for "
                             f"Tensor parameters, got {type(arg).__name__}", None)
    items = arg.itemsize
    elements = 1 + sum((n - 1) * (s // items) for n, s in zip(arg.shape, arg.strides))
    return np.lib.stride_tricks.as_strided(arg, shape=(elements,), strides=(items,))


def _grid(grid) -> tuple[int, int, int]:
    dims = (grid,) if isinstance(grid, int) else tuple(grid)
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1
                                      for d in dims):
        raise ExecutionError(f"grid {grid!r}: one to three positive ints", None)
    return dims + (1,) * (3 - len(dims))


def interpret(kernel: Kernel, grid, *args, seed: int = 0, max_steps: int = DEFAULT_MAX_STEPS,
              race_check: bool = True, **kwargs) -> Execution:
    """Run `kernel` on `grid` on the CPU (see the module docstring); returns the Execution.

    `seed` picks the interleaving (threads, asynchronous completions, the CTAs' order);
    `race_check` tracks happens-before on shared memory (RaceError at the first unordered
    conflicting access). Kernel parameters named like these options go positionally."""
    if not isinstance(kernel, Kernel):
        raise ExecutionError(f"interpret runs an @lk.kernel, got {kernel!r}", None)
    values = bind(kernel.params, args, kwargs, kernel.name)
    spec = kernel.specialize_unlowered(*values)     # the IR is what runs here, not PTX
    return run_ir(spec.ir, grid, values, [p.name for p in kernel.params], seed=seed,
                  max_steps=max_steps, race_check=race_check, compiled=_compiled(spec.ir))


# id(IR) -> (IR, its Compiler): a specialization's IR is immutable once traced, so its compiled
# steps serve every run of it (seeds, cases); the last few are kept
_COMPILED: dict = {}


def _compiled(fn) -> Compiler:
    known = _COMPILED.get(id(fn))
    if known is None or known[0] is not fn:
        if len(_COMPILED) >= 8:
            del _COMPILED[next(iter(_COMPILED))]
        with collector.paused():        # the steps it builds live on: nothing to collect
            known = _COMPILED[id(fn)] = (fn, Compiler(fn))
    return known[1]


def run_ir(fn, grid, values, names=None, *, seed: int = 0, max_steps: int = DEFAULT_MAX_STEPS,
           race_check: bool = True, compiled: Compiler | None = None) -> Execution:
    """Run a verified IR Function on `grid`: `values` are the arguments by parameter index
    (pointer arguments numpy arrays), `names` their names (for messages); `compiled`: its
    Compiler, when already built."""
    dims = _grid(grid)
    names = names or [f"arg{i}" for i in range(len(values))]
    scheduler = Scheduler(seed, max_steps)
    machine = Machine(fn, tuple(values), names, scheduler, race_check, compiled)
    shape = tuple(getattr(fn, "cluster", None) or (1, 1, 1))
    if any(d % s for d, s in zip(dims, shape)):
        raise ExecutionError(f"grid {dims} is not a whole number of clusters of shape {shape}",
                             None)
    origins = [(x, y, z) for z, y, x in itertools.product(
        *(range(0, d, s) for d, s in zip(dims[::-1], shape[::-1])))]
    random.Random(seed).shuffle(origins)
    clusters = [[(ox + x, oy + y, oz + z) for z in range(shape[2]) for y in range(shape[1])
                 for x in range(shape[0])] for ox, oy, oz in origins]
    machine.run(clusters, dims, shape)
    return Execution(seed, tuple(scheduler.schedule), scheduler.steps,
                     tuple(c.coord for c in machine.ctas))


def to_bf16(values) -> np.ndarray:
    """A uint16 array of the bf16 bit patterns nearest (ties to even) to `values` (the way to
    pass bf16 data to the interpreter without a bf16 numpy dtype)."""
    from .numerics import bf16_from_f32_bits
    as32 = np.ascontiguousarray(values, dtype=np.float32)
    return bf16_from_f32_bits(as32.view(np.uint32)).reshape(as32.shape)


def from_bf16(bits) -> np.ndarray:
    """float32 values of a uint16 array of bf16 bit patterns."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32).reshape(bits.shape)


def to_fp8(values, dtype) -> np.ndarray:
    """A uint8 array of the fp8 (`dtype`: lk.e4m3 or lk.e5m2) bit patterns nearest (ties to
    even, saturating at the largest finite value, as cvt.rn.satfinite) to `values`."""
    name = getattr(dtype, "name", dtype)
    x = np.ascontiguousarray(values, dtype=np.float64)
    return float8.to_bits(float8.round_fp8(x, name), name).reshape(x.shape)


def from_fp8(bits, dtype) -> np.ndarray:
    """float32 values of a uint8 array of fp8 (`dtype`: lk.e4m3 or lk.e5m2) bit patterns."""
    bits = np.ascontiguousarray(bits, dtype=np.uint8)
    return float8.from_bits(bits, getattr(dtype, "name", dtype)).reshape(bits.shape)


__all__ = ["interpret", "run_ir", "tensor_span", "Execution", "Machine", "to_bf16", "from_bf16",
           "to_fp8", "from_fp8", "WARP_SIZE"]
