"""CompiledKernel: a cubin entry with its signature, launched through ``cuLaunchKernel(Ex)``.

``CompiledKernel.from_ptx(ptx)`` assembles PTX text (``layoutkit.ptx.assemble``) and reads the entry's
parameters from it; ``kernel.launch(*args, grid=, block=, smem_bytes=, stream=, cluster=)`` checks
the arguments and the launch shape and queues the kernel. Stream: ``stream=`` if given (an int
handle, a ``CUstream``, or any object with ``cuda_stream`` or ``__cuda_stream__``); else PyTorch's
current stream of the arguments' device when a torch tensor is among the arguments; else the
legacy default stream. The launch is asynchronous: synchronize before reading results on the host.

Per-launch host work is kept small: the function handle, the packed parameter buffer (with a packing
function generated for the signature), the stream objects and the last launch shape's validation are
cached, per thread, on the CompiledKernel.
"""
from __future__ import annotations

import math
import sys
import threading

from . import driver
from .arguments import ArgumentPacker, LaunchArgumentError
from .fastpath import FAST_PATH_MISSES
from .signature import EntrySignature, ParamSpec, SignatureError, parse_entry

__all__ = ["CompiledKernel", "LaunchConfigError"]

_get_ident = threading.get_ident
_MUTABLE = object()  # stands in the launch-shape cache for a shape passed as a mutable sequence

MAX_GRID = (2 ** 31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
# Cluster sizes every sm_90 device supports without CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED.
MAX_PORTABLE_CLUSTER_SIZE = 8


class LaunchConfigError(ValueError):
    """A launch shape (grid, block, cluster, shared memory) the kernel or device cannot run."""


def launch_dims(what: str, value) -> tuple[int, int, int]:
    """(x, y, z) of a grid, block or cluster shape given as an int or a tuple of 1-3 ints;
    LaunchConfigError naming `what` otherwise."""
    try:
        dims = (value,) if isinstance(value, int) else tuple(value)
    except TypeError:
        dims = ()
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) for d in dims):
        raise LaunchConfigError(f"{what} = {value!r}: give an int or a tuple of 1 to 3 ints")
    return tuple(dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


_torch_stream_getter = None


def torch_stream_getter():
    """The function ``device_index -> raw handle`` of PyTorch's current stream (its fast C entry point
    if present); torch must have been imported."""
    global _torch_stream_getter
    if _torch_stream_getter is None:
        torch = sys.modules["torch"]
        raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        _torch_stream_getter = raw if raw is not None else (
            lambda index: torch.cuda.current_stream(index).cuda_stream)
    return _torch_stream_getter


def _torch_current_stream(device_index: int) -> int:
    """PyTorch's current stream on ``device_index`` as a raw handle."""
    return torch_stream_getter()(device_index)


def _stream_handle(stream) -> int:
    """The raw CUstream handle of a user's ``stream=`` argument."""
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol: (version, handle)
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream, cupy streams
        return int(stream.cuda_stream)
    if hasattr(stream, "getPtr") and type(stream).__name__ == "CUstream":
        return int(stream)
    raise LaunchConfigError(f"stream = {stream!r}: give an int handle, a CUstream, or an object with "
                            "cuda_stream or __cuda_stream__")


class _ThreadState:
    """What one thread's launches of a kernel reuse: its parameter buffer and the last checked shape."""

    __slots__ = ("packer", "params", "ordinal", "grid", "block", "smem_bytes", "cluster", "fn", "head",
                 "config")

    def __init__(self, packer: ArgumentPacker):
        self.packer = packer
        self.params = packer.kernel_params
        self.ordinal = None  # the cached plan's device, shape (as passed), function, launch arguments
        self.grid = self.block = self.smem_bytes = self.cluster = self.fn = self.head = self.config = None


class CompiledKernel:
    """One entry of a cubin, launchable on any device: cubin bytes + its :class:`EntrySignature`.

    ``cubin``: a ``Cubin`` from ``assemble`` (its PTX gives the signature) or raw bytes with
    ``signature=``. ``name``: the entry; may be omitted when the module has one.

    ``params``: optional richer per-parameter specs (same order as the PTX), e.g.
    ``ParamSpec.pointer("x", align=16, dtype="bf16")`` for a PTX ``.u64 x``.
    """

    def __init__(self, cubin, name: str | None = None, *, signature: EntrySignature | None = None,
                 params: list[ParamSpec] | None = None):
        self.cubin: bytes = bytes(getattr(cubin, "data", cubin))
        if signature is None:
            ptx = getattr(cubin, "ptx", "")
            if not ptx:
                raise SignatureError("the cubin carries no PTX text to read the kernel's parameters from; "
                                     "pass signature= (e.g. parse_entry(ptx, name)) or a Cubin from assemble()")
            signature = parse_entry(ptx, name)
        elif name is not None and name != signature.name:
            raise SignatureError(f"name = {name!r} but the signature is of kernel {signature.name!r}")
        self.signature = signature.with_params(params) if params is not None else signature
        self.name = signature.name
        self._states: dict[int, _ThreadState] = {}  # by thread id: launches from many threads are safe
        self._functions: dict[int, driver.LoadedFunction] = {}
        self._streams: dict[int, object] = {}
        cu = None
        try:
            cu = driver.bindings()
        except driver.DriverUnavailableError:
            pass  # no cuda-python: packing still works; launching raises in function()
        self._launch_kernel = getattr(cu, "cuLaunchKernel", None)
        self._launch_kernel_ex = getattr(cu, "cuLaunchKernelEx", None)

    @classmethod
    def from_ptx(cls, ptx: str, name: str | None = None, *, arch: str = "sm_90a",
                 params: list[ParamSpec] | None = None) -> CompiledKernel:
        """Assemble ``ptx`` with ``layoutkit.ptx.assemble`` and take entry ``name`` (or the only one)."""
        from layoutkit.ptx import assemble  # the toolchain's, imported at call time
        return cls(assemble(ptx, arch=arch), name, params=params)

    def function(self, device: int | None = None) -> driver.LoadedFunction:
        """The loaded function on ``device`` (default: the current device); loads it on first use."""
        fn = self._functions.get(device)
        if fn is not None:
            return fn
        dev = driver.device(device) if device is not None else driver.current_device()
        fn = self._functions.get(dev.ordinal)
        if fn is None:
            fn = self._functions[dev.ordinal] = driver.load_function(self.cubin, self.name, dev)
        return fn

    def _state(self) -> _ThreadState:
        state = self._states.get(_get_ident())
        if state is None:
            state = self._states[_get_ident()] = _ThreadState(ArgumentPacker(self.signature))
        return state

    def pack(self, *args) -> bytes:
        """Check ``args`` and return the packed parameter bytes (no GPU needed; for inspection)."""
        packer = self._state().packer
        packer.pack(args)
        return packer.packed_bytes()

    def launch(self, *args, grid, block, smem_bytes: int = 0, stream=None, cluster=None) -> None:
        """Queue one launch of the kernel with ``args`` (see the module docstring for streams)."""
        state = self._states.get(_get_ident()) or self._state()
        packer = state.packer
        try:
            ordinal = packer.fast_pack(args)
            saw_torch = packer.has_pointers
        except FAST_PATH_MISSES:
            packer.pack_checked(args)
            ordinal, saw_torch = packer.device, packer.saw_torch
            if packer.unknown_device:
                ordinal = self._resolve_unknown_devices(packer, ordinal)
        if ordinal is None:
            ordinal = driver.current_device().ordinal
        if (grid is not state.grid or block is not state.block or smem_bytes is not state.smem_bytes
                or cluster is not state.cluster or ordinal != state.ordinal):
            self._prepare(state, ordinal, grid, block, smem_bytes, cluster)
        if stream is not None:
            raw = _stream_handle(stream)
        elif saw_torch:
            raw = (_torch_stream_getter or _torch_current_stream)(ordinal)
        else:
            raw = 0
        handle = self._streams.get(raw)
        if handle is None:
            handle = self._streams[raw] = driver.bindings().CUstream(raw)
        if state.config is None:
            err = self._launch_kernel(*state.head, handle, state.params, 0)[0]
        else:
            state.config.hStream = handle
            err = self._launch_kernel_ex(state.config, state.fn.handle, state.params, 0)[0]
        if err:
            self._launch_failed(err, state.fn, state.head, state.config, state.params, handle)

    def configure(self, grid, block, smem_bytes: int = 0, stream=None, cluster=None, *, device: int | None = None):
        """A function ``launcher(*args)`` that launches like ``launch(*args, grid=grid, block=block, ...)``
        with less host work per call; the shape is checked now, on ``device`` (default: the current one).
        It takes exactly the kernel's arguments, positionally (a wrong count is Python's TypeError).

        Its fast path: pointer arguments exact torch tensors on that device, no other call of the
        launcher in progress; anything else launches through :meth:`launch` (see layoutkit.ptx.launcher).
        """
        from .launcher import configured_launcher  # it builds on this module's helpers
        return configured_launcher(self, grid, block, smem_bytes, stream, cluster, device)

    def _prepare(self, state: _ThreadState, ordinal: int, grid, block, smem_bytes, cluster) -> None:
        """Load the function for the device and check the shape (skipped when it equals the cached
        one, which ``launch`` compares by identity); cache both in ``state``."""
        shape = (ordinal, grid, block, smem_bytes, cluster)
        if shape != (state.ordinal, state.grid, state.block, state.smem_bytes, state.cluster):
            state.ordinal = None  # no valid plan while checking
            state.fn = self._functions.get(ordinal) or self.function(ordinal)
            dims, state.config = self._launch_plan(state.fn, grid, block, smem_bytes, cluster)
            state.head = (state.fn.handle, *dims)
        # only immutable shapes are kept for the identity test: a list could change in place
        keep = [v if v is None or type(v) in (int, tuple) else _MUTABLE for v in shape[1:]]
        state.ordinal = ordinal
        state.grid, state.block, state.smem_bytes, state.cluster = keep

    def _launch_failed(self, err, fn: driver.LoadedFunction, head: tuple, config, params: int, stream) -> None:
        """Raise the launch's CudaDriverError; with no context current on this thread, launch again
        inside the device's primary context (the launch ``head`` or ``config`` did not run)."""
        call = f"cuLaunchKernel{'Ex' if config is not None else ''}({self.name!r})"
        if getattr(err, "name", "") != "CUDA_ERROR_INVALID_CONTEXT":
            driver.check((err,), call)
        with fn.device.activated():
            if config is None:
                result = self._launch_kernel(*head, stream, params, 0)
            else:
                config.hStream = stream
                result = self._launch_kernel_ex(config, fn.handle, params, 0)
        driver.check(result, call)

    def _resolve_unknown_devices(self, packer: ArgumentPacker, ordinal: int | None) -> int | None:
        """Device of pointers whose objects do not say it (array-interface objects), by asking the driver."""
        driver.initialize()
        cu = driver.bindings()
        for spec, address in packer.unknown_device:
            attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
            try:
                dev = driver.check(cu.cuPointerGetAttribute(attr, address), "cuPointerGetAttribute")
            except driver.DriverUnavailableError:
                raise
            except driver.CudaDriverError:
                raise LaunchArgumentError(f"kernel {self.name!r}, parameter {spec.name!r}: address "
                                          f"0x{address:x} is not device memory the driver knows") from None
            if ordinal is None:
                ordinal = int(dev)
            elif int(dev) != ordinal:
                raise LaunchArgumentError(f"kernel {self.name!r}: parameter {spec.name!r} is on CUDA device "
                                          f"{int(dev)} but other arguments are on device {ordinal}")
        return ordinal

    def _launch_plan(self, fn: driver.LoadedFunction, grid, block, smem_bytes, cluster):
        """Check a launch shape; return ((grid..., block..., smem_bytes), CUlaunchConfig or None)."""
        sig = self.signature
        g, b = launch_dims("grid", grid), launch_dims("block", block)
        for what, dims, limits in (("grid", g, MAX_GRID), ("block", b, MAX_BLOCK)):
            for axis, d, limit in zip("xyz", dims, limits):
                if not 1 <= d <= limit:
                    raise LaunchConfigError(f"kernel {self.name!r}: {what}.{axis} = {d} must be in 1..{limit}")
        threads = math.prod(b)
        if sig.reqntid is not None and b != sig.reqntid:
            raise LaunchConfigError(f"kernel {self.name!r}: block = {b} but the PTX requires exactly "
                                    f".reqntid {sig.reqntid}")
        if sig.maxntid is not None and threads > math.prod(sig.maxntid):
            raise LaunchConfigError(f"kernel {self.name!r}: block = {b} has {threads} threads; .maxntid "
                                    f"{sig.maxntid} allows at most {math.prod(sig.maxntid)}")
        if threads > min(MAX_THREADS_PER_BLOCK, fn.max_threads_per_block):
            raise LaunchConfigError(
                f"kernel {self.name!r}: block = {b} has {threads} threads; with {fn.num_regs} registers per "
                f"thread it can run at most {fn.max_threads_per_block}")
        if not isinstance(smem_bytes, int) or smem_bytes < 0:
            raise LaunchConfigError(f"kernel {self.name!r}: smem_bytes = {smem_bytes!r} must be an int >= 0")
        try:
            fn.ensure_dynamic_smem(smem_bytes)
        except driver.SharedMemoryLimitError as exc:
            raise LaunchConfigError(str(exc)) from None
        c = self._cluster_dims(g, cluster)
        return (*g, *b, smem_bytes), None if cluster is None else self._launch_config(g, b, smem_bytes, c)

    def _cluster_dims(self, g, cluster):
        sig = self.signature
        if cluster is None:
            if sig.explicitcluster:
                raise LaunchConfigError(f"kernel {self.name!r} is declared .explicitcluster: pass cluster=")
            c = sig.reqnctapercluster
            if c is None:
                return None
        else:
            c = launch_dims("cluster", cluster)
            if sig.reqnctapercluster is not None and c != sig.reqnctapercluster:
                raise LaunchConfigError(f"kernel {self.name!r}: cluster = {c} but the PTX fixes "
                                        f".reqnctapercluster {sig.reqnctapercluster}")
            if any(d < 1 for d in c) or math.prod(c) > MAX_PORTABLE_CLUSTER_SIZE:
                raise LaunchConfigError(f"kernel {self.name!r}: cluster = {c} must have dims >= 1 and at "
                                        f"most {MAX_PORTABLE_CLUSTER_SIZE} CTAs (the portable cluster size)")
        for axis, gd, cd in zip("xyz", g, c):
            if gd % cd:
                raise LaunchConfigError(f"kernel {self.name!r}: grid.{axis} = {gd} is not divisible by "
                                        f"cluster.{axis} = {cd}; the grid must be a whole number of clusters")
        return c

    def max_active_clusters(self, block, smem_bytes: int, cluster, device: int | None = None) -> int:
        """How many clusters of shape ``cluster`` can run at once on the device with this block
        size and dynamic shared memory (cuOccupancyMaxActiveClusters): the grid of a persistent
        cluster kernel, in clusters. Raises LaunchConfigError when not even one fits."""
        fn = self.function(device)
        b, c = launch_dims("block", block), launch_dims("cluster", cluster)
        try:
            fn.ensure_dynamic_smem(smem_bytes)
        except driver.SharedMemoryLimitError as exc:
            raise LaunchConfigError(str(exc)) from None
        config = self._launch_config(c, b, smem_bytes, c)
        count = driver.check(driver.bindings().cuOccupancyMaxActiveClusters(fn.handle, config),
                             "cuOccupancyMaxActiveClusters")
        if count < 1:
            raise LaunchConfigError(f"kernel {self.name!r}: no cluster of {c} blocks of {b} threads "
                                    f"with {smem_bytes} bytes of shared memory fits on the device")
        return int(count)

    @staticmethod
    def _launch_config(g, b, smem_bytes, c):
        cu = driver.bindings()
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = g
        config.blockDimX, config.blockDimY, config.blockDimZ = b
        config.sharedMemBytes = smem_bytes
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = c
        config.attrs = [attr]
        config.numAttrs = 1
        return config

    def __repr__(self) -> str:
        params = ", ".join(p.describe().removeprefix(".param ") for p in self.signature.params)
        return f"CompiledKernel({self.name}({params}), {len(self.cubin)} bytes of cubin)"
