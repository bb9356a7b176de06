"""tests/dsl/fake_gpu.py's fake GPU, extended to the Hopper kernels' launch path: TMA tensor maps
(a recording cuTensorMapEncodeTiled whose maps are 128 zero bytes), cluster launches
(cuLaunchKernelEx, recorded like cuLaunchKernel), no context to push, and loaded functions that
may use the device's whole opt-in shared memory. `on_launch` (if given) is called at each launch
as the driver call is made: the point a benchmark of the host path stops its clock.

    with MonkeyPatch.context() as mp:
        gpu = FakeHopper(mp, [recipes.gemm_hopper.gemm_kernel])
        gemm_kernel[(132,)](a, b, c, ...)
        gpu.calls[-1].spec, gpu.maps
"""
from __future__ import annotations

import contextlib
import ctypes
import zlib

from layoutkit.ptx import Device, LoadedFunction, driver

from .fake_gpu import DEVICE, Call, FakeGPU

__all__ = ["FakeHopper"]


class _Map:
    """Stands for a CUtensorMap: 128 bytes at an address."""

    def __init__(self):
        self.buffer = ctypes.create_string_buffer(128)

    def getPtr(self) -> int:  # noqa: N802 - cuda-python's name
        return ctypes.addressof(self.buffer)


class FakeHopper(FakeGPU):
    """FakeGPU plus tensor maps, cluster launches and large shared memory (module docstring);
    `maps` records each encoded map's (rank, global address)."""

    def __init__(self, monkeypatch, kernels, on_launch=None):
        self.on_launch, self.maps = on_launch, []
        super().__init__(monkeypatch, kernels)
        cu = driver.bindings()
        monkeypatch.setattr(driver, "initialize", lambda: None)
        monkeypatch.setattr(driver, "device_count", lambda: 1)
        monkeypatch.setattr(Device, "activated", lambda self: contextlib.nullcontext(self))
        monkeypatch.setattr(cu, "cuTensorMapEncodeTiled", self.encode)
        monkeypatch.setattr(cu, "cuLaunchKernelEx", self.launch_ex)

    @staticmethod
    def load(cubin: bytes, name: str, dev) -> LoadedFunction:
        optin = DEVICE.max_dynamic_smem_optin
        return LoadedFunction(name, dev, f"{name}#{zlib.crc32(cubin):08x}", 0, 32, 1024,
                              _dynamic_smem_limit=optin)

    def encode(self, dtype, rank, address, *rest):
        self.maps.append((rank, int(address)))
        return 0, _Map()

    def launch(self, *args):
        if self.on_launch is not None:
            self.on_launch()
        return super().launch(*args)

    def launch_ex(self, config, handle, params, extra):
        if self.on_launch is not None:
            self.on_launch()
        spec = self.spec_of(handle, params)
        first = ctypes.c_void_p.from_address(params).value
        packed = ctypes.string_at(first, spec.compiled._state().packer.size)
        self.calls.append(Call(spec, (config.gridDimX, config.gridDimY, config.gridDimZ),
                               config.blockDimX, 0, packed))
        return (0,)
