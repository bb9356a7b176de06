"""layoutkit's Python work per launch, measured on the CPU: no GPU, no driver library needed.

The driver's ``cuLaunchKernel`` is replaced by a no-op of the same signature, the kernel's
function by a fake loaded on a fake device, and torch by a stand-in module whose ``Tensor``
exposes ``data_ptr()``, ``get_device()``, ``dtype``, ``is_cuda`` and ``device`` (what
layoutkit.ptx reads; the packer recognises torch tensors by exact type ``torch.Tensor``). Two kinds
of stand-in tensor: methods written in Python (slower than torch's) and methods that are C
builtins (close to torch's METH_NOARGS methods). Where PyTorch is installed, a third kind: real CPU
``torch.Tensor``s, with the fake device numbered -1 (what ``get_device()`` answers for CPU memory) so
that the configured launcher's fast path runs torch's own ``data_ptr()``/``get_device()``;
``launch()`` refuses CPU tensors, so that row is left out there, and torch's current-stream query
stays a fake (it needs a GPU; benchmarks/bench_launch.py times it). Each row times repeats of a
batch of calls, in µs per launch: the best repeat and the median (on a shared CPU the best is the steadier number);
"overhead" subtracts the floor row (the no-op called with parameters
packed once, which is what the GPU benchmark's floor does on top of the real driver call).

    python benchmarks/bench_launch_cpu.py [--calls 20000] [--repeats 21]
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from layoutkit.ptx import CompiledKernel, Device, LoadedFunction, driver, parse_entry  # noqa: E402
from layoutkit.ptx import arguments, launch as launch_module  # noqa: E402

EMPTY = """.visible .entry empty(.param .u64 a, .param .u64 b, .param .u32 n)
{
    ret;
}
"""
ADDRESS = 0x7F00_0000_1000


class PyTensor:
    """A torch-like tensor whose methods are Python functions."""

    dtype = "float32"
    is_cuda = True

    def __init__(self, address: int, device: int = 0):
        self.address, self.index, self.device = address, device, f"cuda:{device}"

    def data_ptr(self) -> int:
        return self.address

    def get_device(self) -> int:
        return self.index


class CTensor:
    """A torch-like tensor whose methods are C builtins (per-instance, like a bound C method)."""

    dtype = "float32"
    is_cuda = True

    def __init__(self, address: int, device: int = 0):
        self.data_ptr = itertools.repeat(address).__next__
        self.get_device = itertools.repeat(device).__next__
        self.device = f"cuda:{device}"


def real_torch_tensor():
    """torch.Tensor standing for a CUDA tensor type (its CPU tensors are on "device -1"), or None."""
    try:
        import torch
    except ImportError:
        return None

    def cpu_tensor(address: int, device: int = -1):
        return torch.zeros(1024)  # the address is torch's: only the cost of reading it matters
    cpu_tensor.__name__ = f"torch {torch.__version__} CPU tensor"
    cpu_tensor.torch = torch
    return cpu_tensor


def no_op_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                 hStream, kernelParams, extra):
    return (0,)


def install_fakes(tensor_type) -> None:
    """torch stand-in, a driver whose cuLaunchKernel does nothing, and a fake current device."""
    current_stream = {0: 0, -1: 0}  # torch's legacy default stream on devices 0 and -1
    torch = getattr(tensor_type, "torch", None)
    if torch is None:
        torch = types.SimpleNamespace(Tensor=tensor_type, _C=types.SimpleNamespace())
    sys.modules["torch"] = torch
    arguments._torch_tensor = None
    launch_module._torch_stream_getter = current_stream.get  # the real query needs a GPU
    driver.bindings().cuLaunchKernel = no_op_launch


def fake_kernel(ordinal: int = 0) -> CompiledKernel:
    kernel = CompiledKernel(b"\x7fELF", signature=parse_entry(EMPTY))
    dev = Device(ordinal, None, None, {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
                                       "MAX_SHARED_MEMORY_PER_BLOCK": 49152})
    kernel._functions[ordinal] = LoadedFunction(kernel.name, dev, driver.bindings().CUfunction(), 0, 8, 1024)
    driver.current_device = lambda: dev
    return kernel


def methods(tensor_type) -> dict:
    install_fakes(tensor_type)
    a, b, n = tensor_type(ADDRESS), tensor_type(ADDRESS + 4096), 1024
    cu = driver.bindings()
    fn, params, stream = cu.CUfunction(), 0x1234, cu.CUstream(0)
    raw = cu.cuLaunchKernel

    def floor():
        raw(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0)

    real_torch = hasattr(tensor_type, "torch")
    kernel = fake_kernel(-1 if real_torch else 0)
    launch = kernel.launch

    def compiled_launch():
        launch(a, b, n, grid=1, block=32)

    rows = {"floor: no-op cuLaunchKernel, params packed once": floor}
    if not real_torch:
        rows["CompiledKernel.launch(x, y, n, grid=, block=)"] = compiled_launch
    configure = getattr(kernel, "configure", None)
    if configure is not None:
        launcher = configure(1, 32)

        def configured():
            launcher(a, b, n)

        a2, b2 = tensor_type(ADDRESS + 8192), tensor_type(ADDRESS + 12288)

        def configured_alternating():  # new pointers every call: no packing is ever reused
            launcher(a, b, n)
            launcher(a2, b2, n)

        rows["kernel.configure(grid, block)(x, y, n)"] = configured
        rows["  same, pointers changing every call"] = configured_alternating
    return rows


def measure(rows: dict, calls: int, repeats: int) -> dict[str, tuple[float, float]]:
    times = {name: [] for name in rows}
    for _ in range(repeats):
        for name, run in rows.items():
            per_call = 2 if name.startswith("  same") else 1
            start = time.perf_counter()
            for _ in range(calls // per_call):
                run()
            times[name].append((time.perf_counter() - start) / (calls // per_call * per_call) * 1e6)
    return {name: (min(t), statistics.median(t)) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}; µs per launch, best and median of {args.repeats} x {args.calls} calls\n")
    print("| tensors | method | µs best | overhead µs best | µs median | overhead µs median |")
    print("|---|---|---:|---:|---:|---:|")
    for tensor_type in (CTensor, PyTensor, real_torch_tensor()):
        if tensor_type is None:
            continue
        results = measure(methods(tensor_type), args.calls, args.repeats)
        best, median = next(iter(results.values()))
        for name, (b, m) in results.items():
            print(f"| {tensor_type.__name__} | {name} | {b:.3f} | {b - best:.3f} | {m:.3f} | {m - median:.3f} |")


if __name__ == "__main__":
    main()
