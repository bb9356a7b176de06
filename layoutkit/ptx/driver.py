"""The CUDA driver through cuda-python: checked calls, devices with their primary contexts, and
loaded kernel functions.

cuda-python is imported on first use, so ``import layoutkit.ptx`` works on a machine with no
driver; only calls that need the GPU raise :class:`DriverUnavailableError` there. Contexts are the
devices' *primary* contexts (``cuDevicePrimaryCtxRetain``), the same ones the CUDA runtime and
PyTorch use, so pointers and streams are shared with them. Operations that need a current context
push it for their duration and pop it again, leaving the calling thread's context as it was.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass, field

__all__ = ["CudaDriverError", "Device", "DriverUnavailableError", "LoadedFunction", "SharedMemoryLimitError",
           "bindings", "check", "current_device", "device", "device_count", "initialize",
           "load_function"]

# A plain word for the CUresults a user of layoutkit meets; others get the driver's own string.
_EXPLANATIONS = {
    "CUDA_ERROR_INVALID_VALUE": "an argument was outside the range the driver accepts",
    "CUDA_ERROR_OUT_OF_MEMORY": "the device has not enough free memory for this request",
    "CUDA_ERROR_NOT_INITIALIZED": "the driver was not initialised (cuInit)",
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable device is visible to this process",
    "CUDA_ERROR_INVALID_DEVICE": "the device ordinal does not name a visible device",
    "CUDA_ERROR_INVALID_IMAGE": "the cubin is not a valid image for this driver",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the cubin was built for another GPU architecture than this device's",
    "CUDA_ERROR_NOT_FOUND": "the named symbol is not in the module",
    "CUDA_ERROR_INVALID_CONTEXT": "no valid context is current on this thread",
    "CUDA_ERROR_INVALID_HANDLE": "a handle (function, stream, module) is invalid or belongs to another context",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "the launch needs more registers or threads than a block may have",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "a kernel accessed memory it may not; the context is unusable now",
    "CUDA_ERROR_LAUNCH_FAILED": "a kernel faulted; the context is unusable now",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "a kernel executed an illegal instruction; the context is unusable now",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "a kernel accessed a misaligned address; the context is unusable now",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "a kernel ran past the watchdog time limit",
    "CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES": "the cluster shape does not fit on the device's SMs",
    "CUDA_ERROR_INVALID_CLUSTER_SIZE": "the cluster dimensions are not supported for this kernel",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the driver is too old for this PTX",
}


class CudaDriverError(RuntimeError):
    """A CUDA driver call failed: names the call, the CUresult and what it means."""

    def __init__(self, call: str, result_name: str, explanation: str, code: int | None = None):
        self.call, self.result_name, self.explanation, self.code = call, result_name, explanation, code
        super().__init__(f"{call} failed with {result_name}: {explanation}")


class DriverUnavailableError(CudaDriverError):
    """cuda-python, the driver library or a device is missing on this machine."""


class SharedMemoryLimitError(ValueError):
    """A launch asks for more dynamic shared memory than the device allows the kernel."""


@functools.lru_cache(maxsize=1)
def bindings():
    """The ``cuda.bindings.driver`` module, imported on first use."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise DriverUnavailableError("import cuda.bindings.driver", "ImportError",
                                     f"cuda-python is not installed ({exc}); pip install cuda-python") from None
    return driver


def check(result, call: str):
    """Unpack a cuda-python ``(CUresult, *values)`` result, raising CudaDriverError on failure.

    Returns None, the single value, or the tuple of values.
    """
    err = result[0]
    if err != 0:  # CUDA_SUCCESS; comparing with 0 works for the enum and needs no driver
        raise _error(call, err)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def _error(call: str, err) -> CudaDriverError:
    cu = bindings()
    name = getattr(err, "name", None) or f"CUresult {int(err)}"
    explanation = _EXPLANATIONS.get(name)
    if explanation is None:
        status, text = cu.cuGetErrorString(err)
        explanation = text.decode() if status == 0 and text else "no description from the driver"
    cls = DriverUnavailableError if name in ("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_NOT_INITIALIZED") else CudaDriverError
    return cls(call, name, explanation, int(err))


_init_lock = threading.Lock()
_initialized = False


def initialize() -> None:
    """cuInit once per process; DriverUnavailableError where cuda-python, libcuda or a device is missing."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        cu = bindings()
        try:
            result = cu.cuInit(0)
        except RuntimeError as exc:  # cuda-python raises this when libcuda.so cannot be loaded
            raise DriverUnavailableError("cuInit", "no driver library",
                                         f"the NVIDIA driver library could not be loaded ({exc})") from None
        check(result, "cuInit")
        _initialized = True


def device_count() -> int:
    """Number of visible CUDA devices (raises DriverUnavailableError without a driver)."""
    initialize()
    return check(bindings().cuDeviceGetCount(), "cuDeviceGetCount")


@dataclass(eq=False)
class Device:
    """A CUDA device with its retained primary context. Get one with :func:`device`."""

    ordinal: int
    handle: object
    context: object
    _attributes: dict = field(default_factory=dict, repr=False)

    def attribute(self, name: str) -> int:
        """A device attribute by its CUdevice_attribute suffix, e.g. ``"MULTIPROCESSOR_COUNT"`` (cached)."""
        value = self._attributes.get(name)
        if value is None:
            cu = bindings()
            try:
                attr = getattr(cu.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
            except AttributeError:
                raise ValueError(f"{name!r} is not a CUdevice_attribute (CU_DEVICE_ATTRIBUTE_{name})") from None
            value = check(cu.cuDeviceGetAttribute(attr, self.handle), f"cuDeviceGetAttribute({name})")
            self._attributes[name] = value
        return value

    @property
    def compute_capability(self) -> tuple[int, int]:
        return (self.attribute("COMPUTE_CAPABILITY_MAJOR"), self.attribute("COMPUTE_CAPABILITY_MINOR"))

    @property
    def name(self) -> str:
        raw = check(bindings().cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode()

    @property
    def max_dynamic_smem_optin(self) -> int:
        """Bytes of shared memory a block may use after opting in (232448 on an H200)."""
        return self.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")

    @property
    def default_smem_per_block(self) -> int:
        """Bytes of shared memory a block may use without opting in (49152)."""
        return self.attribute("MAX_SHARED_MEMORY_PER_BLOCK")

    @contextlib.contextmanager
    def activated(self):
        """Make this device's primary context current for the block; restore the thread's after."""
        cu = bindings()
        check(cu.cuCtxPushCurrent(self.context), "cuCtxPushCurrent")
        try:
            yield self
        finally:
            check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")

    def synchronize(self) -> None:
        """Wait for all work on this device's primary context."""
        with self.activated():
            check(bindings().cuCtxSynchronize(), "cuCtxSynchronize")


_devices: dict[int, Device] = {}
_devices_lock = threading.Lock()


def device(ordinal: int = 0) -> Device:
    """The device ``ordinal`` (retaining its primary context on first use; shared with PyTorch)."""
    dev = _devices.get(ordinal)
    if dev is not None:
        return dev
    with _devices_lock:
        if ordinal in _devices:
            return _devices[ordinal]
        count = device_count()
        if not 0 <= ordinal < count:
            raise DriverUnavailableError("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE",
                                         f"device {ordinal} does not exist; {count} device(s) are visible")
        cu = bindings()
        handle = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        context = check(cu.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
        dev = _devices[ordinal] = Device(ordinal, handle, context)
        return dev


def current_device() -> Device:
    """The device of the context current on this thread (PyTorch's current device), else device 0."""
    initialize()
    cu = bindings()
    ctx = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        return device(0)
    return device(int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice")))


@dataclass(eq=False)
class LoadedFunction:
    """A kernel function loaded on one device: its handle and resource attributes."""

    name: str
    device: Device
    handle: object
    static_smem_bytes: int
    num_regs: int
    max_threads_per_block: int
    _dynamic_smem_limit: int = field(default=-1, repr=False)

    def ensure_dynamic_smem(self, nbytes: int) -> None:
        """Allow launches with ``nbytes`` of dynamic shared memory, opting in above the default.

        Raises SharedMemoryLimitError when static + dynamic exceeds the device's opt-in maximum.
        """
        if nbytes <= self._dynamic_smem_limit:
            return
        optin = self.device.max_dynamic_smem_optin
        if nbytes + self.static_smem_bytes > optin:
            raise SharedMemoryLimitError(
                f"kernel {self.name!r} asks for {nbytes} bytes of dynamic shared memory, but with its "
                f"{self.static_smem_bytes} bytes of static shared memory at most "
                f"{optin - self.static_smem_bytes} fit (device {self.device.ordinal} allows {optin} bytes "
                "per block after opting in)")
        default = self.device.default_smem_per_block
        if nbytes + self.static_smem_bytes > default:
            cu = bindings()
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(self.handle, attr, nbytes),
                  f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) for {self.name!r}")
        self._dynamic_smem_limit = nbytes


_modules: dict[tuple[int, bytes], object] = {}
_functions: dict[tuple[int, bytes, str], LoadedFunction] = {}
_load_lock = threading.Lock()


def load_function(cubin: bytes, name: str, dev: Device) -> LoadedFunction:
    """The kernel ``name`` of ``cubin`` on ``dev``; module and function are loaded once and cached."""
    key = (dev.ordinal, cubin, name)
    fn = _functions.get(key)
    if fn is not None:
        return fn
    cu = bindings()
    with _load_lock, dev.activated():
        fn = _functions.get(key)
        if fn is not None:
            return fn
        module = _modules.get(key[:2])
        if module is None:
            module = _modules[key[:2]] = check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
        try:
            handle = check(cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name!r})")
        except CudaDriverError as exc:
            if exc.result_name == "CUDA_ERROR_NOT_FOUND":
                raise CudaDriverError(exc.call, exc.result_name,
                                      f"the cubin has no kernel named {name!r}", exc.code) from None
            raise

        def attr(which: str) -> int:
            a = getattr(cu.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_" + which)
            return check(cu.cuFuncGetAttribute(a, handle), f"cuFuncGetAttribute({which}) for {name!r}")

        fn = LoadedFunction(name, dev, handle, attr("SHARED_SIZE_BYTES"), attr("NUM_REGS"),
                      attr("MAX_THREADS_PER_BLOCK"))
        _functions[key] = fn
        return fn
