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
"""
from __future__ import annotations

import builtins
import contextlib
import inspect
import linecache
from contextvars import ContextVar
from dataclasses import dataclass, field
from time import perf_counter
from typing import NamedTuple

import sympy

from layoutkit.algebra import LayoutError, symbol
from layoutkit.ptx import CompiledKernel, ParamSpec, PTXBuildError, assemble, disassemble
from layoutkit.ptx import LaunchConfigError, debug_enabled, launch_dims
from layoutkit.ptx.builder import Requirement, SourceLocation
from layoutkit.ptx.builder.directives import Directives

from .arguments import Parameter, bind, key_entry, name_clash, parameter
from ..sm90.debug_waits import sink_of
from .errors import DSLError, KernelDefinitionError, TraceError, user_frame_location
from ..lang.global_tensor import PointerArg, tensor_parameter
from .launch_fast import FastLaunch, plain_grid
from .ir import Function, Op
from .opdef import SM90A, TARGETS
from ..lower.function import Lowering
from ..lower.roles import kernel_directives
from ..check.protocol import check_kernel_protocol
from ..sm90.roles import finish_sync
from .tracer import tracing
from . import constructs, rewrite
from .tensor_args import runtime_values
from .types import PointerType, TensorMapType
from .values import Scalar
from .verifier import verify

MAX_WARPS = 32   # 1024 threads per block
MAX_LAUNCHERS = 16  # configured launchers a specialization keeps (one per grid; the fast path
                    # of kernel[grid] keeps the ones it launches through on its own, up to 256)
MAX_GRIDS = 64      # kernel[grid] functions a kernel keeps (one per plain grid)
MAX_CLUSTER_CTAS = 8   # the portable cluster size of sm_90 (CUDA programming guide, clusters)


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


def lower(fn: Function) -> str:
    """The PTX of a traced kernel, with its directives (block size, role register cap,
    cluster shape; see lower_roles.kernel_directives)."""
    lowering = Lowering(fn)
    directives = kernel_directives(fn)
    lowering.k.directives = Directives.build(**directives)
    if directives["reqnctapercluster"] is not None:   # what Module.kernel requires for it
        lowering.module.require(Requirement(version=(7, 8), sm=90), ".reqnctapercluster")
    return lowering.run().text()


# The lists Specialization.collected() blocks fill (innermost last); empty outside them.
_COLLECTORS: ContextVar[tuple] = ContextVar("layoutkit_specializations_collected", default=())


@dataclass
class Specialization:
    """One compiled specialization: its key, verified IR, PTX, and (lazily) cubin/launcher.

    `timings` holds the seconds each phase of making it took, measured once when it was made
    (perf_counter): "trace", "verify", "check" (the protocol check), "lower" and, once the
    cubin is assembled, "ptxas" (a cubin-cache hit included; benchmarks/bench_compile.py)."""

    key: tuple
    ir: Function
    ptx: str
    timings: dict = field(default_factory=dict, repr=False, compare=False)
    _cubin: object = field(default=None, repr=False)
    _compiled: object = field(default=None, repr=False)
    _launchers: dict = field(default_factory=dict, repr=False)
    has_hidden: bool = field(init=False, repr=False)   # hidden parameters: no fast launch

    def __post_init__(self):
        self.has_hidden = bool(self.ir.hidden)

    @property
    def cubin(self):
        if self._cubin is None:
            start = perf_counter()
            self._cubin = assemble(self.ptx, cubin_arch(self.ir.target))
            self.timings["ptxas"] = perf_counter() - start
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
            self._compiled = CompiledKernel(self.cubin, self.ir.name, params=self.param_specs())
        return self._compiled

    def param_specs(self) -> list[ParamSpec]:
        """The PTX parameters as layoutkit.ptx ParamSpecs, in order."""
        specs = []
        for op in self.ir.params:
            name, vtype = op.attrs["name"], op.results[0].type
            if isinstance(vtype, TensorMapType):
                specs.append(ParamSpec.tensormap(name))
            elif isinstance(vtype, PointerType) and op.attrs["index"] is None:
                specs.append(ParamSpec.pointer(name, align=vtype.dtype.nbytes,
                                               dtype=vtype.dtype.name))
            elif isinstance(vtype, PointerType):
                fact = self.key[op.attrs["index"]]      # a tensor's: (aligned, narrow, ...)
                aligned = fact is True or (type(fact) is tuple and fact[0] is True)
                align = 16 if aligned else vtype.dtype.nbytes
                specs.append(ParamSpec.pointer(name, align=align, dtype=vtype.dtype.name))
            else:
                specs.append(ParamSpec.scalar(name, vtype.ptx))
        return specs

    def hidden_values(self, values: tuple) -> list:
        """The launch values of the DSL's hidden parameters for the bound arguments `values`."""
        return [op.attrs["resolve"](values) for op in self.ir.hidden]

    @property
    def cluster(self):
        """The cluster shape the kernel launches with (None: no clusters)."""
        return getattr(self.ir, "cluster", None)

    def launcher(self, grid, threads: int):
        """The compiled kernel configured for `grid` and `threads` (kept per grid; see
        CompiledKernel.configure): the shape is checked once, a launch is one call."""
        key = grid
        if not plain_grid(grid):     # a list, True, or 4.0 (== 4 as a key): kept by its (x, y, z)
            try:
                key = launch_dims("grid", grid)
            except LaunchConfigError:    # configure words it
                return self.compiled.configure(grid, threads, self.ir.shared_bytes,
                                               cluster=self.cluster)
        launcher = self._launchers.get(key)
        if launcher is None:
            if len(self._launchers) >= MAX_LAUNCHERS:
                self._launchers.clear()
            launcher = self.compiled.configure(grid, threads, self.ir.shared_bytes,
                                               cluster=self.cluster)
            self._launchers[key] = launcher
        return launcher


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
                 target: str = SM90A):
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
        self.cluster = _cluster_shape(fn.__name__, cluster, where)
        self.debug, self.target = debug, target
        self.params = self._parameters(fn, where)
        self._runtime = tuple(i for i, p in enumerate(self.params) if p.kind != "constexpr")
        self._tensors = tuple(i for i, p in enumerate(self.params) if p.kind == "tensor")
        self._cache: dict[tuple, Specialization] = {}
        self._options = {flag: KernelOptions(self.cluster, flag, target) for flag in (False, True)}
        self._fast: FastLaunch | None = None   # built at the first kernel[grid]
        self._grids: dict = {}            # plain grid -> the function kernel[grid] returns
        self._body = None                 # fn with the construct checks (core/rewrite.py)

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
        return tuple(key_entry(p, v) for p, v in zip(self.params, values)) + (self.options(),)

    def key(self, *args, **kwargs) -> tuple:
        """The specialization key of these arguments (see layoutkit.dsl.core.arguments), ending in
        the kernel's KernelOptions."""
        return self._key(bind(self.params, args, kwargs, self.name))

    def specialize(self, *args, **kwargs) -> Specialization:
        """The (cached) specialization for these arguments: traced, verified and lowered."""
        values = bind(self.params, args, kwargs, self.name)
        key = self._key(values)
        spec = self._cache.get(key)
        if spec is not None and not getattr(spec.ir, "protocol_checked", True):
            check_kernel_protocol(spec.ir)      # traced under lk.protocol_check_skipped()
        if spec is None:
            timings: dict = {}
            ir = self._trace(key, values, timings)
            start = perf_counter()
            ptx = lower(ir)
            timings["lower"] = perf_counter() - start
            spec = self._cache[key] = Specialization(key, ir, ptx, timings)
        for made in _COLLECTORS.get():     # Specialization.collected() blocks, if any
            made.append(spec)
        return spec

    def _trace(self, key: tuple, values: tuple, timings: dict) -> Function:
        """The verified, protocol-checked IR; the seconds of each phase go into `timings`."""
        options = key[-1]
        fn_ir = KernelFunction(self.name, self.num_warps, cluster=options.cluster,
                               debug=options.debug, target=options.target)
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
            sym = symbol(p.name, 16 if fact == "16" else 1)
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
                fast = self._fast = FastLaunch(self.name, self.params, self.debug, self._checked_launch)
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
        if spec is None or not getattr(spec.ir, "protocol_checked", True):
            spec = self.specialize(*values)
        runtime = self._runtime_values(values)
        if spec.ir.hidden:
            runtime += spec.hidden_values(values)
        if stream is None:  # torch's current stream at each call (or the legacy default stream)
            launcher = spec.launcher(grid, 32 * self.num_warps)
            launcher(*runtime)
        else:
            spec.compiled.launch(*runtime, grid=grid, block=(32 * self.num_warps, 1, 1),
                                 smem_bytes=spec.ir.shared_bytes, stream=stream,
                                 cluster=spec.cluster)
        sink = sink_of(spec.ir)
        if sink is not None:   # debug build: wait, and name a barrier that timed out
            sink.check_launch()
        elif stream is None and not spec.has_hidden and self._fast is not None:
            self._fast.remember(key, grid, launcher)

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
           target: str = SM90A):
    """Decorator: `@kernel` or `@kernel(num_warps=8, cluster=(2, 1, 1), debug=True,
    target="sm_90a")` turns a function into a `Kernel` (see the module docstring for the
    options)."""
    if fn is None:
        return lambda f: Kernel(f, num_warps, cluster=cluster, debug=debug, target=target)
    if not callable(fn):
        raise KernelDefinitionError(f"@kernel decorates a function, got {fn!r}")
    return Kernel(fn, num_warps, cluster=cluster, debug=debug, target=target)


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
