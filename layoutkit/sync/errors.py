"""Errors of layoutkit.sync: each names the thing, the offending value and the rule it breaks.

`SyncError` and its subclasses are raised while a kernel is being written (trace or emission
time); `BarrierTimeoutError` is raised on the host after a debug-build kernel's bounded wait
gave up (see `debug_record`).
"""
from __future__ import annotations

from layoutkit.ptx.builder import SourceLocation, user_location

_UNSET = object()


class SyncError(ValueError):
    """A synchronization request that would hang, race or be ignored by the hardware.

    >>> str(SyncError("must be 1..16", thing="PipelineState.stages", value=0, location=None))
    'PipelineState.stages = 0: must be 1..16'
    """

    def __init__(self, rule: str, *, thing: str | None = None, value: object = _UNSET,
                 location: SourceLocation | None | object = _UNSET):
        self.rule = rule
        self.thing = thing
        self.value = None if value is _UNSET else value
        self.location = user_location() if location is _UNSET else location
        head = thing or ""
        if value is not _UNSET:
            head = f"{head} = {value!r}" if head else repr(value)
        message = f"{head}: {rule}" if head else rule
        if self.location is not None:
            message += f" (at {self.location})"
        super().__init__(message)


class PipelineStateError(SyncError):
    """A stage count, stage index or phase outside its range."""


class RoleBudgetError(SyncError):
    """A warp-role split or register budget the SM cannot honour (or setmaxnreg would ignore)."""


class NamedBarrierError(SyncError):
    """A named-barrier id or thread count outside the hardware's rules, or an id used twice."""


class MbarrierLayoutError(SyncError):
    """An mbarrier array that cannot be placed (bad count, arrive count, offset or name)."""


class DebugRecordError(SyncError):
    """A timeout record that cannot be encoded or decoded (bad field, unknown site)."""


class ProtocolViolation(SyncError):
    """A barrier protocol (events per role) that would hang or race; see `protocol`."""


class BarrierTimeoutError(RuntimeError):
    """A debug-build bounded wait gave up: the kernel trapped instead of hanging.

    The message names the barrier, stage, parity, timeout, the user's source line and the
    block/thread that waited; the fields are kept as attributes (`record`).
    """

    def __init__(self, message: str, record=None):
        self.record = record
        super().__init__(message)
