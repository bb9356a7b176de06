"""The host side of debug-build waits: a mapped pinned-host record buffer, read after a trap.

`WaitErrorBuffer()` allocates `RECORD_BYTES` of page-locked host memory mapped into the
device's address space (`cuMemHostAlloc(DEVICEMAP)`), zeroed. Pass `buffer.device_pointer` as
the kernel's hidden `ERROR_BUFFER_PARAM` argument. After the launch (failed or not),
`buffer.check(table)` reads the bytes with a plain host load - no driver call, so it works
after `trap` poisoned the context - and raises BarrierTimeoutError with the decoded message.
"""
from __future__ import annotations

import ctypes

from layoutkit.ptx import driver

from .debug_record import RECORD_BYTES, DebugTable, decode, raise_if_timed_out


class WaitErrorBuffer:
    """One zeroed timeout record in mapped pinned host memory on `device` (default: current)."""

    def __init__(self, *, device: int | None = None):
        cu = driver.bindings()
        dev = driver.device(device) if device is not None else driver.current_device()
        flags = cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE
        with dev.activated():
            host = driver.check(cu.cuMemHostAlloc(RECORD_BYTES, flags),
                                f"cuMemHostAlloc({RECORD_BYTES} bytes, DEVICEMAP)")
            dptr = driver.check(cu.cuMemHostGetDevicePointer(host, 0),
                                "cuMemHostGetDevicePointer")
        self.device = dev
        self.host_pointer = int(host)
        self.device_pointer = int(dptr)
        self._bytes = (ctypes.c_uint8 * RECORD_BYTES).from_address(self.host_pointer)
        self.clear()

    def clear(self) -> None:
        """Zero the record (before each launch that may time out)."""
        self._require_live()
        ctypes.memset(self.host_pointer, 0, RECORD_BYTES)

    def read(self) -> bytes:
        """The record's bytes as the device left them (a host read; no driver call)."""
        self._require_live()
        return bytes(self._bytes)

    def record(self, table: DebugTable | None = None):
        """The decoded TimeoutRecord, or None when no wait timed out."""
        return decode(self.read(), table)

    def check(self, table: DebugTable) -> None:
        """Raise BarrierTimeoutError when a bounded wait of the kernel gave up."""
        raise_if_timed_out(self.read(), table)

    def _require_live(self) -> None:
        if self.host_pointer == 0:
            raise ValueError("this WaitErrorBuffer was freed")

    def free(self) -> None:
        """Release the pinned memory (a context poisoned by trap may refuse; that is ignored,
        the process is expected to end)."""
        if self.host_pointer:
            pointer, self.host_pointer = self.host_pointer, 0
            try:
                with self.device.activated():
                    driver.bindings().cuMemFreeHost(pointer)
            except driver.CudaDriverError:
                pass


__all__ = ["WaitErrorBuffer"]
