"""DeviceBuffer: device memory for numpy users (no PyTorch needed).

A DeviceBuffer is a C-contiguous array on one device: ``shape``, a numpy ``dtype``, a device
pointer. It exposes ``__cuda_array_interface__`` (version 3), so it is a kernel argument and other
libraries (CuPy, Numba, PyTorch) can view it. Copies are synchronous with respect to the host.
bfloat16 data travels as ``numpy.uint16`` bit patterns.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from . import driver

__all__ = ["DeviceBuffer"]


def _free(dev: driver.Device, ptr: int) -> None:
    cu = driver.bindings()
    try:
        with dev.activated():
            cu.cuMemFree(ptr)
    except Exception:  # at interpreter exit or after a fault the context may be gone; nothing to free then
        pass


class DeviceBuffer:
    """A C-contiguous device array: ``DeviceBuffer.empty(shape, dtype)``, ``from_numpy``, ``to_numpy``."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype, dev: driver.Device, *, owner: bool = True):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.device = dev
        self._finalizer = weakref.finalize(self, _free, dev, self.ptr) if owner else None

    @classmethod
    def empty(cls, shape, dtype, *, device: int | None = None) -> DeviceBuffer:
        """Uninitialised device memory for an array of ``shape`` and ``dtype`` on ``device`` (default: current)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if any(int(s) < 0 for s in shape):
            raise ValueError(f"DeviceBuffer shape {shape} has a negative extent")
        dev = driver.device(device) if device is not None else driver.current_device()
        nbytes = max(math.prod(shape) * np.dtype(dtype).itemsize, 1)
        with dev.activated():
            ptr = driver.check(driver.bindings().cuMemAlloc(nbytes), f"cuMemAlloc({nbytes} bytes)")
        return cls(int(ptr), shape, dtype, dev)

    @classmethod
    def from_numpy(cls, array: np.ndarray, *, device: int | None = None) -> DeviceBuffer:
        """A new device copy of ``array``."""
        array = np.ascontiguousarray(array)
        buf = cls.empty(array.shape, array.dtype, device=device)
        buf.copy_from(array)
        return buf

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def freed(self) -> bool:
        return self._finalizer is not None and not self._finalizer.alive

    def _live(self) -> None:
        if self.freed:
            raise ValueError(f"DeviceBuffer at 0x{self.ptr:x} was freed; it cannot be used any more")

    def copy_from(self, array: np.ndarray) -> None:
        """Overwrite the buffer with ``array`` (same shape and dtype)."""
        self._live()
        array = np.ascontiguousarray(array)
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ValueError(f"cannot copy a {array.dtype} array of shape {array.shape} into a DeviceBuffer "
                             f"of {self.dtype} {self.shape}: shape and dtype must match")
        if self.nbytes:
            with self.device.activated():
                driver.check(driver.bindings().cuMemcpyHtoD(self.ptr, array.ctypes.data, self.nbytes),
                             "cuMemcpyHtoD")

    def to_numpy(self) -> np.ndarray:
        """A host copy; waits for the work queued on the device's legacy default stream first."""
        self._live()
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            with self.device.activated():
                driver.check(driver.bindings().cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes),
                             "cuMemcpyDtoH")
        return out

    def fill_bytes(self, value: int) -> None:
        """Set every byte to ``value`` (0..255), e.g. to poison an output before a kernel writes it."""
        self._live()
        if not 0 <= value <= 255:
            raise ValueError(f"fill_bytes value {value} is not a byte (0..255)")
        with self.device.activated():
            driver.check(driver.bindings().cuMemsetD8(self.ptr, value, self.nbytes), "cuMemsetD8")

    def free(self) -> None:
        """Release the memory now (also done when the buffer is garbage collected)."""
        if self._finalizer is not None:
            self._finalizer()

    @property
    def __cuda_array_interface__(self) -> dict:
        self._live()
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"0x{self.ptr:x}"
        return f"DeviceBuffer({self.shape}, {self.dtype}, device {self.device.ordinal}, {state})"
