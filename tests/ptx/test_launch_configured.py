"""Configured launchers (``kernel.configure``) on the CPU: the driver call, the packed bytes and every
error must be those of ``kernel.launch`` with the same shape; a bad shape is refused at configure time.

A fake torch module (exact-type ``Tensor`` with ``data_ptr()``/``get_device()``/``is_cuda``), fake loaded
functions on fake devices and a recording ``cuLaunchKernel`` stand in for the GPU.
"""
import ctypes
import sys
import threading
import types

import numpy as np
import pytest

from layoutkit.ptx import (CompiledKernel, CudaDriverError, Device, DeviceBuffer, LoadedFunction, LaunchArgumentError,
                           LaunchConfigError, parse_entry)
from layoutkit.ptx import arguments, driver, launch
from layoutkit.ptx import launcher as launcher_module

BASE = 0x7F00_0000_0000
H200_SMEM = {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448, "MAX_SHARED_MEMORY_PER_BLOCK": 49152}
PTX = ".visible .entry k(.param .u64 .ptr.align 16 x, .param .u64 y, .param .u32 n, .param .f32 a) { ret; }"


class Tensor:
    """Stands for torch.Tensor: the packer reads data_ptr() and get_device()."""

    def __init__(self, ptr, dev=0):
        self.ptr, self.dev = ptr, dev
        self.device = f"cuda:{dev}" if dev >= 0 else "cpu"
        self.is_cuda = dev >= 0

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return self.dev


@pytest.fixture
def torch_streams(monkeypatch):
    """A fake torch whose current raw stream per device is the returned dict."""
    current = {0: 0xAB0, 1: 0xCD0}
    fake = types.SimpleNamespace(Tensor=Tensor, _C=types.SimpleNamespace(_cuda_getCurrentRawStream=current.get))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    monkeypatch.setattr(launch, "_torch_stream_getter", None)
    return current


class Recorder:
    """The driver's launch entry points, recording (function, dims, stream, packed bytes) per call."""

    def __init__(self, kernel, result=0):
        self.kernel, self.calls, self.result = kernel, [], result
        self.during = None  # called once inside the next launch, while the driver "reads" the buffer
        kernel._launch_kernel, kernel._launch_kernel_ex = self.launch, self.launch_ex

    def packed(self, params):
        first = ctypes.c_void_p.from_address(params).value  # kernelParams[0]: the buffer's start
        return ctypes.string_at(first, self.kernel._state().packer.size)

    def launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        if self.during is not None:
            during, self.during = self.during, None
            during()
        self.calls.append((f, (gx, gy, gz, bx, by, bz, smem), int(stream), self.packed(params), params))
        return (self.result,)

    def launch_ex(self, config, f, params, extra):
        dims = (config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.blockDimY,
                config.blockDimZ, config.sharedMemBytes)
        self.calls.append((f, dims, int(config.hStream), self.packed(params), params))
        return (self.result,)


def fake_kernel(ptx=PTX, devices=(0, 1), max_threads=1024, current=0, monkeypatch=None):
    kernel = CompiledKernel(b"\x7fELF", signature=parse_entry(ptx))
    for ordinal in devices:
        dev = Device(ordinal, None, None, dict(H200_SMEM))
        kernel._functions[ordinal] = LoadedFunction(kernel.name, dev, f"fn{ordinal}", 1024, 32, max_threads)
    if monkeypatch is not None:
        monkeypatch.setattr(driver, "current_device", lambda: kernel._functions[current].device)
        monkeypatch.setattr(driver, "device_count", lambda: len(devices))
    return kernel, Recorder(kernel)


def both(kernel, recorder, args, launcher=None, **shape):
    """(launch()'s recorded call, the launcher's) with the same arguments and shape."""
    launcher = launcher or kernel.configure(**shape)
    kernel.launch(*args, **shape)
    launcher(*args)
    return recorder.calls[-2], recorder.calls[-1]


def good_args(dev=0):
    return Tensor(BASE + 0x100, dev), Tensor(BASE + 0x204, dev), 4_000_000_000, 0.5


def test_the_launcher_makes_the_same_driver_call_as_launch(torch_streams, monkeypatch):
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    by_launch, by_launcher = both(kernel, recorder, good_args(), grid=(4, 2), block=128, smem_bytes=256)
    assert by_launcher[:4] == by_launch[:4] == ("fn0", (4, 2, 1, 128, 1, 1, 256), 0xAB0, by_launch[3])
    assert by_launch[3][:8] == (BASE + 0x100).to_bytes(8, "little")
    assert by_launcher[4] != by_launch[4]  # the launcher packed its own buffer: the fast path ran


def test_a_launcher_for_another_shape_compiles_nothing_and_launches_its_own_shape(torch_streams, monkeypatch):
    from layoutkit.ptx import fastpath
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    first = kernel.configure(4, 128)
    compiled = []
    monkeypatch.setattr(fastpath, "compile", lambda *args: compiled.append(args) or compile(*args), raising=False)
    second = kernel.configure((3, 2), 64, smem_bytes=512)
    second(*good_args())
    first(*good_args())
    assert compiled == [] and second.source == first.source
    assert [call[1] for call in recorder.calls] == [(3, 2, 1, 64, 1, 1, 512), (4, 1, 1, 128, 1, 1, 0)]


def test_the_launcher_follows_torchs_current_stream_or_a_fixed_one(torch_streams, monkeypatch):
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    launcher(*good_args())
    torch_streams[0] = 0xAB8
    launcher(*good_args())
    kernel.configure(1, 32, stream=0x77)(*good_args())
    kernel.configure(1, 32, stream=types.SimpleNamespace(cuda_stream=0x99))(*good_args())
    assert [c[2] for c in recorder.calls] == [0xAB0, 0xAB8, 0x77, 0x99]


def test_arguments_the_fast_path_does_not_take_still_launch_like_launch(torch_streams, monkeypatch):
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    launcher = kernel.configure(grid=3, block=64)
    x, y, n, a = good_args()
    buffer = DeviceBuffer(BASE + 0x300, (16,), np.float32, kernel._functions[0].device, owner=False)
    for args in [(x, y, np.uint32(7), a),   # a numpy integer
                 (x, y, n, 2),              # an int for a float
                 (buffer, y, n, a),         # a DeviceBuffer: the legacy default stream, not torch's
                 (x, 12345, n, a),          # an int for the untyped .u64
                 good_args(dev=1)]:         # another device than the configured one
        by_launch, by_launcher = both(kernel, recorder, args, launcher, grid=3, block=64)
        assert by_launcher[:4] == by_launch[:4]
    assert recorder.calls[-1][0] == "fn1" and recorder.calls[-1][2] == 0xCD0


BAD = [
    ((Tensor(BASE + 4),) + good_args()[1:], "the address 0x7f0000000004 must be 16-byte aligned"),
    ((Tensor(BASE, -1),) + good_args()[1:], "the torch tensor is on cpu, not on a CUDA device"),
    (good_args()[:1] + (Tensor(BASE, 1),) + good_args()[2:], "parameter 'y' is on CUDA device 1 but parameter "
                                                             "'x' is on device 0"),
    (good_args()[:2] + (2 ** 32, 0.5), r"parameter 'n' \(.param .u32 n\): got 4294967296; this parameter holds "
                                      r"integers in 0..4294967295"),
    (good_args()[:2] + (-1, 0.5), "got -1; this parameter holds integers in 0..4294967295"),
    (good_args()[:2] + (1.0, 0.5), r"got 1.0; this parameter \(.u32\) takes an int"),
    (good_args()[:3] + (1e39,), "the value overflows .f32"),
    (good_args()[:3] + ("0.5",), "takes a float"),
    (("x",) + good_args()[1:], "this parameter takes a device pointer"),
]


@pytest.mark.parametrize("args, message", BAD)
def test_bad_arguments_are_refused_with_launchs_message(torch_streams, monkeypatch, args, message):
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    with pytest.raises(LaunchArgumentError, match=message) as by_launch:
        kernel.launch(*args, grid=1, block=32)
    with pytest.raises(LaunchArgumentError) as by_launcher:
        launcher(*args)
    assert str(by_launcher.value) == str(by_launch.value)
    assert recorder.calls == []
    launcher(*good_args())  # a refused call leaves nothing behind
    assert recorder.calls[-1][3][:8] == (BASE + 0x100).to_bytes(8, "little")


def test_with_one_device_the_launcher_asks_is_cuda_not_get_device(torch_streams, monkeypatch):
    kernel, recorder = fake_kernel(devices=(0,), monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    assert "not x.is_cuda" in launcher.source and "get_device" not in launcher.source
    assert "get_device" in fake_kernel(monkeypatch=monkeypatch)[0].configure(1, 32).source
    cpu = (Tensor(BASE, -1),) + good_args()[1:]
    with pytest.raises(LaunchArgumentError, match="the torch tensor is on cpu") as by_launch:
        kernel.launch(*cpu, grid=1, block=32)
    with pytest.raises(LaunchArgumentError) as by_launcher:
        launcher(*cpu)
    assert str(by_launcher.value) == str(by_launch.value) and recorder.calls == []
    by_launch, by_launcher = both(kernel, recorder, good_args(), launcher, grid=1, block=32)
    assert by_launcher[:4] == by_launch[:4]


@pytest.mark.parametrize("count, launch_message, launcher_message", [
    (0, r"takes 4 arguments \(x, y, n, a\) but 0 were given", r"missing 4 required positional arguments: 'x', "),
    (3, r"takes 4 arguments \(x, y, n, a\) but 3 were given", r"missing 1 required positional argument: 'a'"),
    (5, r"takes 4 arguments \(x, y, n, a\) but 5 were given", r"takes 4 positional arguments but 5 were given"),
])
def test_a_wrong_argument_count_is_refused_by_the_call(torch_streams, monkeypatch, count, launch_message,
                                                       launcher_message):
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    args = (good_args() + (1,))[:count]
    with pytest.raises(LaunchArgumentError, match=launch_message):
        kernel.launch(*args, grid=1, block=32)
    with pytest.raises(TypeError, match=r"^k\[grid=\(1, 1, 1\), block=\(32, 1, 1\), smem_bytes=0\]\(\) "
                                        + launcher_message):
        launcher(*args)
    assert recorder.calls == []


def test_arguments_are_positional_only(torch_streams, monkeypatch):
    kernel, _ = fake_kernel(monkeypatch=monkeypatch)
    with pytest.raises(TypeError, match="positional-only arguments passed as keyword arguments: 'a'"):
        kernel.configure(1, 32)(*good_args()[:3], a=0.5)


def test_parameters_named_like_generated_names_or_builtins_are_positional_names(torch_streams, monkeypatch):
    ptx = ".entry k(.param .u64 launch, .param .u32 type, .param .u32 s, .param .u32 $x, .param .u32 arg3) { ret; }"
    kernel, recorder = fake_kernel(ptx, monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    assert launcher.source.splitlines()[4] == "    def launcher(arg0, arg1, arg2, arg3_, arg3, /):"
    launcher(Tensor(BASE), 1, 2, 3, 4)
    assert recorder.calls[-1][3] == ((BASE).to_bytes(8, "little") + b"".join(v.to_bytes(4, "little")
                                                                              for v in (1, 2, 3, 4)))


@pytest.mark.parametrize("shape, message", [
    (dict(grid=0, block=128), r"grid.x = 0 must be in 1..2147483647"),
    (dict(grid=1, block=(64, 32)), r"block = \(64, 32, 1\) has 2048 threads"),
    (dict(grid=1, block=640), r"640 threads; with 32 registers per thread it can run at most 512"),
    (dict(grid=1, block=32, smem_bytes=231425), r"asks for 231425 bytes of dynamic shared memory"),
    (dict(grid=1, block=32, smem_bytes=-1), r"smem_bytes = -1 must be an int >= 0"),
    (dict(grid=3, block=32, cluster=2), r"grid.x = 3 is not divisible by cluster.x = 2"),
    (dict(grid=1.5, block=32), r"grid = 1.5: give an int or a tuple of 1 to 3 ints"),
    (dict(grid=1, block=32, stream="default"), r"stream = 'default': give an int handle"),
])
def test_a_bad_shape_is_refused_at_configure_time(torch_streams, monkeypatch, shape, message):
    kernel, recorder = fake_kernel(max_threads=512, monkeypatch=monkeypatch)
    with pytest.raises(LaunchConfigError, match=message):
        kernel.configure(**shape)
    assert recorder.calls == []


def test_configure_checks_the_shape_on_the_chosen_device(torch_streams, monkeypatch):
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch, current=1)
    assert kernel.configure(2, 32).device == 1
    launcher = kernel.configure(2, 32, device=0)
    assert (launcher.device, launcher.grid, launcher.block, launcher.cluster) == (0, (2, 1, 1), (32, 1, 1), None)
    launcher(*good_args(dev=0))
    assert recorder.calls[-1][0] == "fn0"
    assert launcher.__qualname__ == "k[grid=(2, 1, 1), block=(32, 1, 1), smem_bytes=0]"


def test_a_cluster_launch_goes_through_cuLaunchKernelEx(torch_streams, monkeypatch):
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    by_launch, by_launcher = both(kernel, recorder, good_args(), grid=(4, 2), block=64, cluster=(2, 1))
    assert by_launcher[:4] == by_launch[:4]
    assert by_launcher[1] == (4, 2, 1, 64, 1, 1, 0) and by_launcher[2] == 0xAB0


def test_a_driver_error_is_raised_with_the_kernels_name(torch_streams, monkeypatch):
    from cuda.bindings.driver import CUresult
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    recorder.result = CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(CudaDriverError, match=r"cuLaunchKernel\('k'\) failed with CUDA_ERROR_INVALID_VALUE"):
        kernel.configure(1, 32)(*good_args())


def test_tensor_maps_name_the_device_of_a_pointerless_signature(torch_streams, monkeypatch):
    kernel, recorder = fake_kernel(".entry t(.param .align 64 .b8 m[128], .param .u32 n) { ret; }",
                                   monkeypatch=monkeypatch, current=1)
    tmap = types.SimpleNamespace(packed=bytes(range(128)), device=0,
                                 encoding=types.SimpleNamespace(global_address=BASE))
    launcher = kernel.configure(1, 32, device=0)
    by_launch, by_launcher = both(kernel, recorder, (tmap, 5), launcher, grid=1, block=32)
    assert by_launcher[:4] == by_launch[:4] and by_launcher[0] == "fn0" and by_launcher[2] == 0
    assert by_launcher[4] != by_launch[4]  # the fast path took it
    tmap.device = None  # no argument names a device: launch()'s rule, the current device
    launcher(tmap, 5)
    assert recorder.calls[-1][0] == "fn1"


def test_torch_imported_after_configure_is_picked_up(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    monkeypatch.setattr(launch, "_torch_stream_getter", None)
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    current = {0: 0xAB0}
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        Tensor=Tensor, _C=types.SimpleNamespace(_cuda_getCurrentRawStream=current.get)))
    launcher(*good_args())  # the general path, which notices torch
    launcher(*good_args())  # the fast path
    general, fast = recorder.calls
    assert general[:4] == fast[:4] and general[2] == 0xAB0
    assert general[4] == kernel._state().packer.kernel_params != fast[4]


@pytest.mark.parametrize("gil", [True, False])
def test_another_thread_launches_through_its_own_buffer_while_a_launch_is_in_progress(torch_streams, monkeypatch,
                                                                                     gil):
    """With the GIL, any thread takes the fast path when no other call is between packing and the
    driver call; without it (free-threaded builds), only the configuring thread does."""
    monkeypatch.setattr(launcher_module, "gil_guards_launches", lambda: gil)
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    launcher(*good_args())
    mine = recorder.calls[-1][4]
    seen = {}

    def other():
        seen["params"] = kernel._state().packer.kernel_params
        launcher(*good_args())

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert recorder.calls[-1][4] == (mine if gil else seen["params"])

    def call_from_another_thread():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()

    recorder.during = call_from_another_thread  # a second call while the driver reads the buffer
    launcher(*good_args())
    assert [c[4] for c in recorder.calls[-2:]] == [seen["params"], mine]
    assert recorder.calls[-1][:4] == recorder.calls[-2][:4]
