"""`@kernel`: trace a Python function per specialization, verify, lower to PTX, assemble,
cache, launch; and introspect (IR, PTX, resources, SASS) without a GPU.

    @lk.kernel(num_warps=4)
    def scale(x: lk.Pointer[lk.f32], n: lk.i32, a: lk.f32, BLOCK: lk.constexpr): ...

    scale[grid](x, n, 2.0, BLOCK=512)          # launch: block = 32 * num_warps threads
    scale.ptx(x, n, 2.0, BLOCK=512)            # same arguments, no GPU needed

Options: `target="sm_90a"` (the default) or `"sm_80"` is the PTX target: every op declares the
targets it exists on (the Hopper ops live in `lk.sm90`, the sm_80 ones in `lk.sm80`, which Hopper
runs too), and an op traced for a target it lacks is a TraceError naming both; an sm_80 kernel is
assembled for the GPU present (sm_90 on Hopper), else for sm_80. `cluster=(x, y, z)` launches the kernel in thread-block clusters of that shape
(`.reqnctapercluster`; see layoutkit.dsl.sm90.cluster); `debug=True` builds bounded mbarrier waits
that raise layoutkit.sync.BarrierTimeoutError instead of hanging (see layoutkit.dsl.sm90.debug_waits;
`debug=None`, the default, follows LAYOUTKIT_DEBUG at each specialization). Both are part of the
specialization key (its last entry, `KernelOptions`), and so is the target.
`do_not_specialize=("M", "q_shape1")` names integer parameters and tensor extents whose facts do
not specialize the kernel (one cubin for every value; layoutkit.dsl.core.nospec).
`max_registers=N` caps the registers of a thread (`.maxnreg N`, 24..255, within the register
file's share of a thread at num_warps): ptxas otherwise picks a budget itself and may spill below
what the block could hold; a kernel with warp roles sets its budgets per role instead.

A specialization is looked up in memory, then in the on-disk specialization cache
(layoutkit.dsl.core.spec_cache: a new process launches from it without tracing), else traced
and stored there once its cubin is assembled. `kernel.specializations()` lists those held,
`kernel.precompile([...])` makes many in parallel processes.
"""
from __future__ import annotations

import builtins
import inspect
import linecache
from dataclasses import dataclass
from time import perf_counter
from typing import NamedTuple

from layoutkit.algebra import LayoutError
from layoutkit.algebra.sympy_gate import deferred_module, sympy
from layoutkit.ptx import PTXBuildError, debug_enabled, disassemble
from layoutkit.ptx.builder import Requirement, SourceLocation
from layoutkit.ptx.builder.directives import MAXNREG_RANGE, Directives
from layoutkit.ptx.resources import warn_about

from .arguments import Parameter, bind, key_entry, name_clash, parameter
from .errors import DSLError, KernelDefinitionError, TraceError, user_frame_location
from ..lang.global_tensor import PointerArg, tensor_parameter
from .launch_fast import FastLaunch, plain_grid
from .specialization import _COLLECTORS, Specialization
from .nospec import relax, relaxed_facts, relaxed_names
from .spec_table import (SpecializationRow, SpecializationTable, describe_key, fact_text,
                         options_text)
from .ir import Function, Op
from .opdef import SM90A, TARGETS
from ..lower.function import Lowering
from ..lower.roles import kernel_directives, role_split_of
from ..check.protocol import check_kernel_protocol
from ..sm90.roles import finish_sync
from ..sm90.wgmma.accumulators import release_final_check
from .tracer import tracing
from . import collector, constructs, rewrite
from .tensor_args import runtime_values
from .types import PointerType
from .values import Scalar
from .verifier import verify

MAX_WARPS = 32   # 1024 threads per block
MAX_GRIDS = 64      # kernel[grid] functions a kernel keeps (one per plain grid)
MAX_CLUSTER_CTAS = 8   # the portable cluster size of sm_90 (CUDA programming guide, clusters)
REGISTERS_PER_SM = 65536   # 32-bit registers of an SM's register file (sm_80, sm_90)

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)


class KernelOptions(NamedTuple):
    """The last entry of a specialization key: the kernel's cluster shape, debug build and
    PTX target."""

    cluster: tuple[int, int, int] | None
    debug: bool
    target: str = SM90A


@dataclass
class KernelFunction(Function):
    """The IR of one specialization with the kernel's launch options (cluster shape, debug)."""

    cluster: tuple[int, int, int] | None = None
    debug: bool = False
    target: str = SM90A
    max_registers: int | None = None


def lower(fn: Function, where: SourceLocation | None = None) -> str:
    """The PTX of a traced kernel, with its directives (block size, role register cap,
    cluster shape; see lower_roles.kernel_directives). Instructions no op places (the
    prologue, the exit) carry `where`, the kernel's `def` line, so the PTX is the same whoever
    asks for it (not the caller's line)."""
    lowering = Lowering(fn)
    directives = kernel_directives(fn)
    lowering.k.directives = Directives.build(**directives,
                                             maxnreg=getattr(fn, "max_registers", None))
    if directives["reqnctapercluster"] is not None:   # what Module.kernel requires for it
        lowering.module.require(Requirement(version=(7, 8), sm=90), ".reqnctapercluster")
    with lowering.k.at(where):
        text = lowering.run().text()
    release_final_check(fn)         # the accumulator check the lowering read
    return text


def definition_line(fn) -> SourceLocation:
    """The `def` line of fn (co_firstlineno is its first decorator's line)."""
    code = fn.__code__
    line = code.co_firstlineno
    for offset in builtins.range(32):
        if linecache.getline(code.co_filename, line + offset).lstrip().startswith("def "):
            return SourceLocation(code.co_filename, line + offset)
    return SourceLocation(code.co_filename, line)


def _cluster_shape(name: str, cluster, where) -> tuple[int, int, int] | None:
    if cluster is None:
        return None
    dims = (cluster,) if isinstance(cluster, int) else tuple(cluster) \
        if isinstance(cluster, (tuple, list)) else ()
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1
                                      for d in dims):
        raise KernelDefinitionError(f"kernel {name}: cluster={cluster!r} must be an int or a "
                                    "tuple of 1 to 3 positive ints (x, y, z)", where)
    dims = tuple(dims) + (1,) * (3 - len(dims))
    if dims[0] * dims[1] * dims[2] > MAX_CLUSTER_CTAS:
        raise KernelDefinitionError(f"kernel {name}: cluster={dims} has "
                                    f"{dims[0] * dims[1] * dims[2]} CTAs; a portable cluster "
                                    f"has at most {MAX_CLUSTER_CTAS}", where)
    return dims


class Kernel:
    """A traced kernel; see the module docstring. `num_warps` fixes the block size."""

    def __init__(self, fn, num_warps: int = 4, *, cluster=None, debug: bool | None = None,
                 target: str = SM90A, do_not_specialize=(), max_registers: int | None = None):
        where = definition_line(fn)
        if not isinstance(target, str) or target not in TARGETS:
            raise KernelDefinitionError(f"kernel {fn.__name__}: target={target!r} must be one of "
                                        f"{', '.join(map(repr, TARGETS))}", where)
        if cluster is not None and target != SM90A:
            raise KernelDefinitionError(f"kernel {fn.__name__}: cluster={cluster!r} needs "
                                        f"target 'sm_90a' (thread-block clusters are sm_90); "
                                        f"its target is {target!r}", where)
        if isinstance(num_warps, bool) or not isinstance(num_warps, int) or \
                not 1 <= num_warps <= MAX_WARPS:
            raise KernelDefinitionError(f"kernel {fn.__name__}: num_warps={num_warps!r} must be "
                                        f"an int in 1..{MAX_WARPS}", where)
        if debug not in (None, True, False):
            raise KernelDefinitionError(f"kernel {fn.__name__}: debug={debug!r} must be True, "
                                        "False or None (None: follow LAYOUTKIT_DEBUG)", where)
        self.fn, self.name, self.num_warps = fn, fn.__name__, num_warps
        self.max_registers = _max_registers(fn.__name__, max_registers, num_warps, where)
        self.cluster = _cluster_shape(fn.__name__, cluster, where)
        self.debug, self.target = debug, target
        self.params = self._parameters(fn, where)
        self._relaxed = relaxed_facts(fn.__name__, self.params, do_not_specialize, where)
        self.do_not_specialize = relaxed_names(self.params, self._relaxed)
        self._runtime = tuple(i for i, p in enumerate(self.params) if p.kind != "constexpr")
        self._tensors = tuple(i for i, p in enumerate(self.params) if p.kind == "tensor")
        self._cache: dict[tuple, Specialization] = {}
        self._options = {flag: KernelOptions(self.cluster, flag, target) for flag in (False, True)}
        self._fast: FastLaunch | None = None   # built at the first kernel[grid]
        self._grids: dict = {}            # plain grid -> the function kernel[grid] returns
        self._body = None                 # fn with the construct checks (core/rewrite.py)
        self._arch: str | None = None     # cubin_arch(target), found at first use
        self._disk = None                 # spec_cache.KernelCache, made at first use

    @staticmethod
    def _parameters(fn, where) -> tuple[Parameter, ...]:
        try:
            annotations = inspect.get_annotations(fn, eval_str=True)
        except Exception as exc:  # an annotation that does not evaluate
            raise KernelDefinitionError(f"kernel {fn.__name__}: its annotations do not "
                                        f"evaluate ({exc})", where) from None
        params = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise KernelDefinitionError(f"kernel {fn.__name__}: parameter {p.name} is "
                                            "*args/**kwargs/keyword-only; kernel parameters are "
                                            "plain", where)
            ann = annotations.get(p.name, inspect.Parameter.empty)
            made = parameter(p.name, ann)
            if made is None:
                shown = "missing" if ann is inspect.Parameter.empty else repr(ann)
                raise KernelDefinitionError(
                    f"kernel {fn.__name__}: parameter {p.name} needs an annotation: "
                    f"lk.Tensor[dtype, rank], lk.Pointer[dtype], lk.i32, lk.i64, lk.u32, lk.f32, "
                    f"lk.f64 or lk.constexpr (got {shown})", where)
            params.append(made)
        clash = name_clash(tuple(params))
        if clash is not None:
            raise KernelDefinitionError(f"kernel {fn.__name__}: {clash}", where)
        return tuple(params)

    # ---- specialization ---------------------------------------------------------------------
    def options(self) -> KernelOptions:
        """The cluster shape and the debug flag a specialization made now gets (debug=None
        follows LAYOUTKIT_DEBUG, read at each call)."""
        return self._options[self.debug if self.debug is not None else debug_enabled()]

    def _key(self, values) -> tuple:
        entries = tuple(key_entry(p, v) for p, v in zip(self.params, values))
        if self._relaxed:                      # do_not_specialize: those facts are dropped
            entries = relax(self.params, entries, self._relaxed)
        return entries + (self.options(),)

    def identity(self) -> str:
        """The kernel's options that shape its code besides the key (part of its on-disk
        cache entries' key): num_warps, cluster, debug, target, do_not_specialize."""
        return (f"num_warps={self.num_warps};cluster={self.cluster};debug={self.debug};"
                f"target={self.target};do_not_specialize={self.do_not_specialize}"
                f"{f';max_registers={self.max_registers}' if self.max_registers else ''}")

    def key(self, *args, **kwargs) -> tuple:
        """The specialization key of these arguments (see layoutkit.dsl.core.arguments), ending in
        the kernel's KernelOptions."""
        return self._key(bind(self.params, args, kwargs, self.name))

    def specialize(self, *args, **kwargs) -> Specialization:
        """The (cached) specialization for these arguments: from memory, else from the on-disk
        specialization cache (layoutkit.dsl.core.spec_cache), else traced, verified and
        lowered (and stored on disk once its cubin is assembled)."""
        values = bind(self.params, args, kwargs, self.name)
        return self._specialization(self._key(values), values)

    def specialize_unlowered(self, *args, **kwargs) -> Specialization:
        """specialize(), but a specialization made now is lowered to PTX only when its PTX (or
        cubin) is first asked for: what the CPU interpreter runs, which needs the IR alone."""
        values = bind(self.params, args, kwargs, self.name)
        return self._specialization(self._key(values), values, lowered=False)

    def _specialization(self, key: tuple, values: tuple, lowered: bool = True) -> Specialization:
        spec = self._cache.get(key)
        if spec is not None and not spec.protocol_checked:
            check_kernel_protocol(spec.ir)      # traced under lk.protocol_check_skipped()
        if spec is None:
            spec = self._from_disk(key)
        if spec is None:
            timings: dict = {}
            with collector.paused():
                ir = self._trace(key, values, timings)
            spec = Specialization(key, ir, None, timings, arch=self.arch(),
                                  persist=self._persist,
                                  lower=lambda: self._lower(ir, timings))
        if lowered:
            spec.ptx            # lowering errors surface here, as before
        self._cache[key] = spec
        for made in _COLLECTORS.get():     # Specialization.collected() blocks, if any
            made.append(spec)
        return spec

    def _lower(self, ir, timings: dict) -> str:
        with collector.paused():
            start = perf_counter()
            ptx = lower(ir, definition_line(self.fn))
            timings["lower"] = perf_counter() - start
        return ptx

    def arch(self) -> str:
        """The ptxas -arch of this kernel's cubins (see cubin_arch), found once."""
        if self._arch is None:
            self._arch = cubin_arch(self.target)
        return self._arch

    def disk_cache(self):
        """This kernel's view of the on-disk specialization cache (spec_cache.KernelCache)."""
        if self._disk is None:
            from .spec_cache import KernelCache
            self._disk = KernelCache(self)
        return self._disk

    def _from_disk(self, key: tuple) -> Specialization | None:
        found = self.disk_cache().load(key, self.arch())
        if found is None:
            return None
        cubin, plan, extra = found
        warn_about(cubin.resources, stacklevel=4)     # spills, as a cubin-cache hit warns
        return Specialization(key, None, cubin.ptx, dict(extra.get("timings", {})),
                              arch=self.arch(), plan=plan, cubin=cubin,
                              retrace=lambda: self._retrace(key))

    def _persist(self, spec: Specialization) -> None:
        if spec.source == "traced" and spec.protocol_checked:
            self.disk_cache().store(spec, spec.arch)

    def _retrace(self, key: tuple) -> Function:
        """The IR of key `key`, traced now (a specialization from disk asked for its IR): a
        trace reads only the constexprs' values, which the key holds."""
        values = tuple(entry[1] if p.kind == "constexpr" else None
                       for p, entry in zip(self.params, key))
        with collector.paused():
            return self._trace(key, values, {})

    def describe_key(self, key: tuple) -> str:
        """Key `key` in words: one `name=facts` per parameter, then the options
        (layoutkit.dsl.core.spec_table)."""
        return describe_key(self.params, key)

    def specializations(self) -> SpecializationTable:
        """The specializations this kernel holds in memory (traced here or loaded from disk),
        one row of facts per specialization; prints as a table (layoutkit.dsl.core.spec_table
        says what each cell means). Parameters named in do_not_specialize are marked."""
        relaxed = set(self.do_not_specialize)
        headers = [p.name + (" (nospec)" if p.name in relaxed or any(
            n.startswith(p.name + "_shape") for n in relaxed) else "")
            for p in self.params]
        rows = [SpecializationRow(key, {p.name: fact_text(p, e) for p, e in zip(self.params, key)},
                                  options_text(key[-1]), spec.source)
                for key, spec in self._cache.items()]
        return SpecializationTable(self.name, headers, rows)

    def precompile(self, arg_specs, *, workers: int | None = None, progress=None) -> list:
        """Make the specializations of every argument list in `arg_specs` (a tuple of positional
        arguments, or a dict of arguments by name; lk.TensorSpec for tensors), tracing and
        assembling them in parallel processes (layoutkit.dsl.core.precompile); returns them in
        order, and the on-disk cache holds them for the next process."""
        from .precompile import precompile
        return precompile(self, arg_specs, workers=workers, progress=progress)

    def _trace(self, key: tuple, values: tuple, timings: dict) -> Function:
        """The verified, protocol-checked IR; the seconds of each phase go into `timings`."""
        options = key[-1]
        fn_ir = KernelFunction(self.name, self.num_warps, cluster=options.cluster,
                               debug=options.debug, target=options.target,
                               max_registers=self.max_registers)
        start = perf_counter()
        try:
            with tracing(fn_ir) as trace:
                proxies = [self._proxy(trace, i, p, fact, v)
                           for i, (p, fact, v) in enumerate(zip(self.params, key, values))]
                if self._body is None:
                    self._body = rewrite.checked(self.fn)
                result = self._body(*proxies)
                if result is not None:
                    raise TraceError(f"kernel {self.name} returns {result!r}; a kernel writes "
                                     "its results to memory and returns nothing",
                                     definition_line(self.fn))
                finish_sync(trace)
                if self.max_registers is not None and role_split_of(fn_ir) is not None:
                    raise TraceError(f"kernel {self.name}: max_registers={self.max_registers} "
                                     "and warp roles both set the register budget; a kernel "
                                     "with lk.sm90.warp_role gives each role its registers= "
                                     "(setmaxnreg) instead", definition_line(self.fn))
            traced = perf_counter()
            verify(fn_ir)
            verified = perf_counter()
            check_kernel_protocol(fn_ir)
            timings.update(trace=traced - start, verify=verified - traced,
                           check=perf_counter() - verified)
            return fn_ir
        except DSLError as exc:
            raise exc.with_traceback(None) from None
        except (LayoutError, PTXBuildError, sympy.SympifyError, TypeError, ValueError) as exc:
            explained = constructs.explain(exc)    # `if`/`while`/range() on a runtime value
            if explained is not None:
                raise explained.with_traceback(None) from None
            where = user_frame_location(exc.__traceback__)
            raise TraceError(f"{type(exc).__name__}: {exc}", where).with_traceback(None) \
                from None

    def _proxy(self, trace, index: int, p: Parameter, fact, value):
        if p.kind == "constexpr":
            return value
        vtype = p.annotation
        result = trace.fn.new_value(PointerType(vtype.dtype) if p.kind == "tensor" else vtype)
        attrs = {"name": p.name, "index": index}
        if p.kind == "tensor":
            attrs["tensor"] = True            # its extents and strides follow (tensor_parameter)
        trace.fn.params.append(Op("param", (), (result,), attrs, (), definition_line(self.fn)))
        if p.kind == "pointer":
            return PointerArg(result, vtype.dtype, fact, p.name)
        if p.kind == "tensor":
            return tensor_parameter(trace, index, p, fact, PointerArg(result, vtype.dtype,
                                                                      fact[0], p.name),
                                    definition_line(self.fn))
        if not vtype.is_int:
            return Scalar(result)
        if fact == "1":
            return 1
        if fact in ("16", "+"):
            sym = symbolic.symbol(p.name, 16 if fact == "16" else 1)
        else:
            sym = sympy.Symbol(p.name, integer=True)
        return trace.bind(sym, result)

    def _runtime_values(self, values: tuple) -> list:
        """The launch values of the kernel's own parameters, in PTX order (a tensor: itself,
        then its extents and strides; see layoutkit.dsl.core.tensor_args.runtime_values)."""
        if not self._tensors:
            return [values[i] for i in self._runtime]
        return runtime_values(self.params, self._runtime, values)

    # ---- launch -------------------------------------------------------------------------------
    def __getitem__(self, grid):
        """`kernel[grid](args...)`: launch on a grid (an int or a tuple of 1-3 ints). Plain
        arguments on a plain grid take the fast path (see layoutkit.dsl.core.launch_fast); any other
        call, and a first one, goes through `launch`. The function is kept per plain grid (only
        exact ints as keys: 4.0 and True equal 4 and 1 as keys but are other grids)."""
        if type(grid) is int or plain_grid(grid):
            launch = self._grids.get(grid)
            if launch is not None:
                return launch
            fast = self._fast
            if fast is None:
                fast = self._fast = FastLaunch(self.name, self.params, self.debug,
                                               self._checked_launch, self._relaxed)
            if fast.make is not None:
                if len(self._grids) >= MAX_GRIDS:
                    self._grids.clear()
                launch = self._grids[grid] = fast.make(grid)
                return launch
        return lambda *args, stream=None, **kwargs: self.launch(grid, *args, stream=stream, **kwargs)

    def _checked_launch(self, grid, args: tuple, stream, kwargs: dict) -> None:
        self.launch(grid, *args, stream=stream, **kwargs)

    def launch(self, grid, *args, stream=None, **kwargs) -> None:
        """Launch on `grid` with block = 32 * num_warps threads and the kernel's dynamic shared
        memory (the total of its lk.shared_tensor allocations, computed at trace time)."""
        values = bind(self.params, args, kwargs, self.name)
        key = self._key(values)
        spec = self._cache.get(key)
        if spec is None or not spec.protocol_checked:
            spec = self._specialization(key, values)
        plan = spec.plan
        if plan.assumptions:            # lk.assume: every launch, so never the fast path's
            plan.check_assumptions(values)
        runtime = self._runtime_values(values)
        if plan.hidden:
            runtime += plan.hidden_values(values)
        if stream is None:  # torch's current stream at each call (or the legacy default stream)
            launcher = spec.launcher(grid, 32 * self.num_warps)
            launcher(*runtime)
        else:
            spec.compiled.launch(*runtime, grid=grid, block=(32 * self.num_warps, 1, 1),
                                 smem_bytes=plan.shared_bytes, stream=stream,
                                 cluster=plan.cluster)
        sink = plan.sink
        if sink is not None:   # debug build: wait, and name a barrier that timed out
            sink.check_launch()
        elif stream is None and self._fast is not None and not plan.assumptions:
            self._fast.remember(key, grid, launcher, spec if spec.has_hidden else None)

    # ---- introspection (no GPU) --------------------------------------------------------------
    def ir(self, *args, **kwargs) -> Function:
        """The verified IR of the specialization for these arguments (prints as text)."""
        return self.specialize(*args, **kwargs).ir

    def ptx(self, *args, **kwargs) -> str:
        """The PTX text of the specialization for these arguments."""
        return self.specialize(*args, **kwargs).ptx

    def resources(self, *args, **kwargs):
        """ptxas's resource report (registers, spills, shared memory) for these arguments."""
        spec = self.specialize(*args, **kwargs)
        return spec.cubin.resources[self.name]

    def sass(self, *args, **kwargs) -> str:
        """The SASS of the specialization (nvdisasm or cuobjdump)."""
        return disassemble(self.specialize(*args, **kwargs).cubin)

    def __repr__(self) -> str:
        params = ", ".join(p.describe() for p in self.params)
        extra = (f" cluster={self.cluster}" if self.cluster else "") + \
            (f" debug={self.debug}" if self.debug is not None else "")
        return f"<lk.kernel {self.name}({params}) num_warps={self.num_warps}{extra}>"


def kernel(fn=None, *, num_warps: int = 4, cluster=None, debug: bool | None = None,
           target: str = SM90A, do_not_specialize=(), max_registers: int | None = None):
    """Decorator: `@kernel` or `@kernel(num_warps=8, cluster=(2, 1, 1), debug=True,
    target="sm_90a", do_not_specialize=("M",), max_registers=128)` turns a function into a
    `Kernel` (see the module docstring for the options)."""
    options = dict(cluster=cluster, debug=debug, target=target,
                   do_not_specialize=do_not_specialize, max_registers=max_registers)
    if fn is None:
        return lambda f: Kernel(f, num_warps, **options)
    if not callable(fn):
        raise KernelDefinitionError(f"@kernel decorates a function, got {fn!r}")
    return Kernel(fn, num_warps, **options)


def _max_registers(name: str, value, num_warps: int, where) -> int | None:
    """max_registers checked: None, or an int in .maxnreg's range that the register file can
    give every thread of a block of num_warps warps."""
    if value is None:
        return None
    share = REGISTERS_PER_SM // (32 * num_warps)
    low, high = MAXNREG_RANGE[0], min(MAXNREG_RANGE[1], share)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise KernelDefinitionError(
            f"kernel {name}: max_registers={value!r} must be an int in {low}..{high} (.maxnreg "
            f"takes {MAXNREG_RANGE[0]}..{MAXNREG_RANGE[1]}, and {REGISTERS_PER_SM} registers "
            f"over a block of num_warps={num_warps} warps give a thread at most {share})", where)
    return value


def cubin_arch(target: str) -> str:
    """The ptxas -arch of a kernel of `target`: sm_90a itself; an sm_80 kernel for the GPU
    present (a cubin runs only on its own major architecture), else sm_80."""
    if target == SM90A:
        return target
    from layoutkit.ptx import CudaDriverError, DriverUnavailableError, current_device
    try:
        major, minor = current_device().compute_capability
    except (DriverUnavailableError, CudaDriverError):
        return target
    return f"sm_{major}{minor}"



__all__ = ["Kernel", "KernelFunction", "KernelOptions", "Specialization", "kernel",
           "PointerType"]
