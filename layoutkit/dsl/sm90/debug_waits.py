"""Debug builds of DSL kernels: bounded mbarrier waits that record and trap instead of hanging.

A kernel traced with debug on (`@lk.kernel(debug=True)`, or LAYOUTKIT_DEBUG=1 when the kernel
leaves `debug` unset) gets one hidden pointer parameter, `ERROR_BUFFER_PARAM`, whose launch
value is a `WaitErrorSink`'s mapped pinned-host record (layoutkit.sync.WaitErrorBuffer). Every
`lk.sm90.mbarrier_wait` then lowers to layoutkit.sync's bounded wait, which, past the timeout,
writes barrier, stage, parity and the user's source line into the record and traps. After a
debug launch the host synchronizes and `check_launch` raises layoutkit.sync's
BarrierTimeoutError with that message (the CUDA error of the trap is its __cause__). Release
builds have neither the parameter nor the code.
"""
from __future__ import annotations

from layoutkit.ptx import CudaDriverError, DeviceBuffer, driver
from layoutkit.sync import (DEFAULT_TIMEOUT_S, ERROR_BUFFER_PARAM, RECORD_BYTES, BoundedWaits,
                            DebugTable, WaitErrorBuffer)

from ..core.types import PointerType, u32

RECORD_WORDS = RECORD_BYTES // 4


class WaitErrorSink:
    """The host end of a debug kernel's wait-error record: the DebugTable the lowering fills
    (barrier names, wait sites) and one zeroed WaitErrorBuffer per device. Called with the
    kernel's bound arguments, it is the hidden parameter's launch value."""

    def __init__(self, kernel: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.table = DebugTable(kernel)
        self.timeout_s = timeout_s
        self._buffers: dict[int, WaitErrorBuffer] = {}
        self._last: WaitErrorBuffer | None = None

    def __call__(self, args) -> DeviceBuffer:
        dev = driver.current_device()
        buffer = self._buffers.get(dev.ordinal)
        if buffer is None:
            buffer = self._buffers[dev.ordinal] = WaitErrorBuffer(device=dev.ordinal)
        buffer.clear()
        self._last = buffer
        return DeviceBuffer(buffer.device_pointer, (RECORD_WORDS,), "uint32", buffer.device,
                            owner=False)

    def check_launch(self) -> None:
        """Synchronize the device of the last launch and raise BarrierTimeoutError if a bounded
        wait gave up (else re-raise the launch's own CUDA error, if any)."""
        buffer = self._last
        if buffer is None:
            return
        try:
            buffer.device.synchronize()
        except CudaDriverError as exc:
            try:
                buffer.check(self.table)
            except Exception as timeout:
                raise timeout from exc
            raise
        buffer.check(self.table)


def error_buffer(trace):
    """The kernel's hidden error-record pointer (declared on first use)."""
    for op in trace.fn.params:
        if op.attrs["name"] == ERROR_BUFFER_PARAM:
            return op.results[0]
    return trace.hidden_param(ERROR_BUFFER_PARAM, PointerType(u32), WaitErrorSink(trace.fn.name),
                              "the debug build's mbarrier wait-error record")


def sink_of(fn) -> WaitErrorSink | None:
    """The WaitErrorSink of a traced Function, or None in a release build."""
    for op in fn.hidden:
        if isinstance(op.attrs.get("resolve"), WaitErrorSink):
            return op.attrs["resolve"]
    return None


class LoweredWaits(BoundedWaits):
    """layoutkit.sync's bounded-wait emitter over a record pointer the DSL already loaded
    (the hidden parameter), sharing the sink's DebugTable."""

    def __init__(self, k, sink: WaitErrorSink, buffer):   # noqa: super().__init__ declares
        self.kernel = k                                   # its own parameter; the DSL's
        self.timeout_ns = round(sink.timeout_s * 1e9)     # hidden parameter replaces it
        self.table = sink.table
        self.buffer = buffer


__all__ = ["LoweredWaits", "WaitErrorSink", "error_buffer", "sink_of"]
