"""A GPU on the CPU for the DSL's launch path: a fake torch module (exact-type Tensor with
data_ptr/get_device/dtype/shape, dtype singletons named like torch's), fake loaded functions (one
handle per cubin) on a fake device 0, and a recording cuLaunchKernel. ptxas assembles the real PTX.

    with fake_gpu(monkeypatch, kernels) as gpu:     # see the `gpu` fixtures of the tests
        k[16](Tensor(BASE), ...)
        gpu.calls[-1].spec, gpu.calls[-1].packed
"""
from __future__ import annotations

import ctypes
import dataclasses
import sys
import types
import zlib
from dataclasses import dataclass

from layoutkit.ptx import Device, LoadedFunction, arguments, driver, launch
from layoutkit.ptx.launcher import LaunchParts

BASE = 0x7F00_0000_0000
STREAM = 0xAB0
DEVICE = Device(0, None, None, {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
                                "MAX_SHARED_MEMORY_PER_BLOCK": 49152})


class DType:
    """Stands for a torch.dtype: a singleton per name, printed as torch prints it."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


DTYPES = {name: DType(name) for name in ("float32", "float16", "bfloat16", "float64", "int32",
                                         "int64", "int8", "uint8", "bool")}


class Tensor:
    """Stands for a torch.Tensor (a CUDA one on device >= 0), contiguous unless told; `strides`
    (elements) is what stride() says (default: 1 for every mode)."""

    def __init__(self, ptr: int, dtype: str = "float32", shape=(4096,), device: int = 0,
                 contiguous: bool = True, strides=None):
        self.ptr, self.dtype, self.shape = ptr, DTYPES[dtype], tuple(shape)
        self.dev, self.contiguous = device, contiguous
        self.strides = None if strides is None else tuple(strides)
        self.is_cuda = device >= 0
        self.device = f"cuda:{device}" if device >= 0 else "cpu"

    def data_ptr(self) -> int:
        return self.ptr

    def get_device(self) -> int:
        return self.dev

    def is_contiguous(self) -> bool:
        return self.contiguous

    def dim(self) -> int:
        return len(self.shape)

    def stride(self, mode: int | None = None):
        strides = self.strides if self.strides is not None else tuple(1 for _ in self.shape)
        return strides if mode is None else strides[mode]


def fake_torch() -> types.SimpleNamespace:
    """A torch module with Tensor, the dtypes, the current-stream query and empty/empty_like
    (new tensors at fresh 256-byte-aligned addresses)."""
    addresses = iter(range(BASE + (1 << 32), BASE + (1 << 40), 1 << 24))

    def empty_like(t):
        return Tensor(next(addresses), t.dtype.name, t.shape, t.dev)

    def empty(shape, dtype, device):          # shape: a tuple or, as torch takes, an int
        shape = (shape,) if isinstance(shape, int) else shape
        return Tensor(next(addresses), dtype.name, shape, int(device.split(":")[1]))
    return types.SimpleNamespace(Tensor=Tensor, empty_like=empty_like, empty=empty,
                                 _C=types.SimpleNamespace(_cuda_getCurrentRawStream={0: STREAM}.get),
                                 **DTYPES)


@dataclass
class Call:
    """One recorded launch: the specialization it ran, grid, block, stream, packed parameters."""

    spec: object
    grid: tuple
    block: int
    stream: int
    packed: bytes


class FakeGPU:
    """Installs the fakes; records launches of the given kernels' specializations."""

    def __init__(self, monkeypatch, kernels):
        self.kernels, self.calls = list(kernels), []
        monkeypatch.setitem(sys.modules, "torch", fake_torch())
        monkeypatch.setattr(arguments, "_torch_tensor", None)
        monkeypatch.setattr(launch, "_torch_stream_getter", None)
        monkeypatch.setattr(driver, "current_device", lambda: DEVICE)
        monkeypatch.setattr(driver, "device", lambda ordinal=0: DEVICE)
        monkeypatch.setattr(driver, "load_function", self.load)
        monkeypatch.setattr(driver.bindings(), "cuLaunchKernel", self.launch)
        self.reset()

    def reset(self) -> None:
        """Forget every loaded kernel, launcher and fast path of the kernels (they captured
        another test's fakes). A specialization without hidden parameters stays, its loaded
        kernel and launchers dropped: its IR, PTX and cubin (the real tracer's and ptxas') hold
        no fake, and tracing them again took most of each plan test's time. One with tensor
        maps goes (its plan's map resolvers hold maps the fakes encoded)."""
        for k in self.kernels:
            for key in [key for key, spec in k._cache.items() if spec.has_hidden]:
                del k._cache[key]
            for spec in k._cache.values():
                spec._compiled = None
                spec._launchers.clear()
            k._fast = None
            k._grids.clear()

    @staticmethod
    def load(cubin: bytes, name: str, dev) -> LoadedFunction:
        return LoadedFunction(name, dev, f"{name}#{zlib.crc32(cubin):08x}", 0, 32, 1024)

    def opt_in_shared_memory(self, monkeypatch) -> None:
        """Loaded functions take the device's opt-in dynamic shared memory (for kernels past
        48 KB), as the driver's attribute call gives them."""
        monkeypatch.setattr(driver, "load_function", lambda cubin, name, dev: dataclasses.replace(
            self.load(cubin, name, dev), _dynamic_smem_limit=DEVICE.max_dynamic_smem_optin))

    def spec_of(self, handle, params: int):
        """The specialization whose parameter buffer (a configured launcher's, or its checked
        launch's) the driver was handed; else the one whose loaded function it was (a kernel
        without parameters has no buffer; a launcher configured for one call, as for a grid
        launch() refuses, is kept nowhere)."""
        loaded = []
        for k in self.kernels:
            for spec in k._cache.values():
                compiled = spec._compiled
                if compiled is None:
                    continue
                buffers = [launcher.__globals__["params"] for launcher in spec._launchers.values()]
                buffers += [state.params for state in compiled._states.values()]
                buffers += [parts.params for parts in (k._fast.launchers.values() if k._fast else ())
                            if isinstance(parts, LaunchParts) and parts.launcher in spec._launchers.values()]
                if params and params in buffers:          # 0: no parameters, no buffer
                    return spec
                if compiled._functions.get(0) is not None and\
                        compiled._functions[0].handle == handle:
                    loaded.append(spec)
        assert len(loaded) == 1, f"a launch of {handle} with buffer 0x{params:x}: {loaded}"
        return loaded[0]

    def launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        spec = self.spec_of(f, params)
        if params == 0:     # a kernel without parameters
            packed = b""
        else:
            first = ctypes.c_void_p.from_address(params).value
            packed = ctypes.string_at(first, spec.compiled._state().packer.size)
        self.calls.append(Call(spec, (gx, gy, gz), bx, int(stream), packed))
        return (0,)


def record_calls(monkeypatch, owner, name: str) -> list:
    """The argument tuples of every call of owner.<name> from now on (each still made): a recipe's
    checked path counted, e.g. record_calls(monkeypatch, rmsnorm, "check_forward")."""
    seen, real = [], getattr(owner, name)

    def recorded(*args):
        seen.append(args)
        return real(*args)
    monkeypatch.setattr(owner, name, recorded)
    return seen
