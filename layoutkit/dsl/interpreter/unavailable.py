"""Register values a thread may not read: a wgmma result before the wgmma_wait that retires it
(`Pending`), an accumulator made by lk.sm90.wgmma_accumulator that no wgmma has written
(`Undefined`). Copies pass them along (a loop's carried value, an accumulator chained into the
next wgmma); any arithmetic, comparison, conversion or store of one raises at the reading op.

>>> x = Undefined(3)
>>> try:
...     float(x)
... except UndefinedRead as exc:
...     print(exc.message.split(";")[0])
reads an accumulator value whose registers hold nothing defined (lk.sm90.wgmma_accumulator at line 3)
"""
from __future__ import annotations

from .errors import ExecutionError, RaceError


class UnavailableRead:
    """Mixin of the errors raised by reading an unavailable value: the scheduler points them at
    the reading op (`thread.last_op`), which the value itself does not know."""

    at_reading_op = True


class PendingRead(UnavailableRead, RaceError):
    """A wgmma result read before a wgmma_wait covers its group."""


class UndefinedRead(UnavailableRead, ExecutionError):
    """An undefined accumulator value read by an instruction."""


class Unavailable:
    """Base of the unavailable register values; every use but a copy raises `error()`."""

    __slots__ = ()

    def error(self) -> Exception:
        raise NotImplementedError

    def _refuse(self, *args):
        raise self.error()

    __float__ = __int__ = __index__ = __bool__ = __neg__ = __abs__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __and__ = __or__ = __xor__ = _refuse
    __array__ = _refuse


class Pending(Unavailable):
    """Value `index` of the results of wgmma execution `instance` (not yet retired)."""

    __slots__ = ("instance", "index")

    def __init__(self, instance, index: int):
        self.instance, self.index = instance, index

    def error(self) -> Exception:
        line = self.instance.op.location.line if self.instance.op.location else "?"
        return PendingRead(
            f"reads a result of the wgmma at line {line} before an lk.sm90.wgmma_wait covers its "
            "group: the warpgroup's tensor cores may still be writing those registers; "
            "lk.sm90.wgmma_commit() and lk.sm90.wgmma_wait(n) first", None)

    def __repr__(self) -> str:
        return f"<pending wgmma result {self.index}>"


class Undefined(Unavailable):
    """A value of an accumulator with undefined contents (made at source line `line`)."""

    __slots__ = ("line",)

    def __init__(self, line):
        self.line = line

    def error(self) -> Exception:
        return UndefinedRead(
            f"reads an accumulator value whose registers hold nothing defined "
            f"(lk.sm90.wgmma_accumulator at line {self.line}); the first wgmma into it must not "
            "accumulate (accumulate=False), or start from lk.full(layout, 0.0)", None)

    def __repr__(self) -> str:
        return "<undefined accumulator value>"


__all__ = ["Unavailable", "Pending", "Undefined", "UnavailableRead", "PendingRead",
           "UndefinedRead"]
