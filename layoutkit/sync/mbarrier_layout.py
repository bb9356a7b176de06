"""Where mbarriers live: named arrays of 8-byte `.b64` barriers packed in one shared region.

An mbarrier is an opaque `.b64` in shared memory, 8-byte aligned (hopper-ptx.md §3). A
pipeline needs arrays of them (`full[stages]`, `empty[stages]`), each barrier initialised with
its expected arrival count (1..2^20-1). `MbarrierLayout` packs arrays back to back (array i
starts where array i-1 ends, so every barrier is 8-byte aligned when the region is) and
records each one's arrival count for `init_mbarriers`.

>>> layout = MbarrierLayout()
>>> full = layout.add("full", stages=2, arrive_count=1)
>>> empty = layout.add("empty", stages=2, arrive_count=256)
>>> [full.byte_offset(s) for s in range(2)], [empty.byte_offset(s) for s in range(2)]
([0, 8], [16, 24])
>>> layout.nbytes
32
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from layoutkit.ptx.isa.mbarrier import MAX_COUNT as MAX_ARRIVE_COUNT  # 1..2^20-1
from layoutkit.ptx.isa.mbarrier import MBARRIER_ALIGN, MBARRIER_BYTES     # one aligned .b64

from .errors import MbarrierLayoutError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class MbarrierPlacement:
    """`stages` barriers named `name`, each expecting `arrive_count` arrivals per phase, at
    byte `offset` of the barrier region."""

    name: str
    stages: int
    arrive_count: int
    offset: int = 0

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise MbarrierLayoutError("a barrier array's name is an identifier",
                                      thing="mbarrier array name", value=self.name)
        for what, value, lo, hi, rule in (
                ("stages", self.stages, 1, 1 << 16, "barriers in the array"),
                ("arrive_count", self.arrive_count, 1, MAX_ARRIVE_COUNT,
                 "the expected arrivals per phase: PTX allows 1..2^20-1"),
                ("offset", self.offset, 0, 1 << 20, "bytes into the barrier region")):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise MbarrierLayoutError(f"must be an integer in {lo}..{hi} ({rule})",
                                          thing=f"mbarrier '{self.name}' {what}", value=value)
        if self.offset % MBARRIER_ALIGN:
            raise MbarrierLayoutError(f"must be a multiple of {MBARRIER_ALIGN} (an mbarrier is an "
                                      "8-byte aligned .b64)", thing=f"mbarrier '{self.name}' "
                                      "offset", value=self.offset)

    @property
    def nbytes(self) -> int:
        return self.stages * MBARRIER_BYTES

    def check_stage(self, stage: int) -> int:
        """`stage` if it is an index into this array, else MbarrierLayoutError."""
        if isinstance(stage, bool) or not isinstance(stage, int)\
                or not 0 <= stage < self.stages:
            raise MbarrierLayoutError(f"must be in 0..{self.stages - 1} (the array has "
                                      f"{self.stages} barriers)",
                                      thing=f"mbarrier '{self.name}' stage", value=stage)
        return stage

    def byte_offset(self, stage: int) -> int:
        """Byte offset of barrier `stage` in the region."""
        return self.offset + MBARRIER_BYTES * self.check_stage(stage)


class MbarrierLayout:
    """The barrier region of a kernel: arrays added in order, packed, each 8-byte aligned."""

    def __init__(self):
        self._arrays: list[MbarrierPlacement] = []

    def add(self, name: str, stages: int, arrive_count: int) -> MbarrierPlacement:
        """Append an array of `stages` barriers with `arrive_count` arrivals per phase."""
        if any(a.name == name for a in self._arrays):
            raise MbarrierLayoutError("is already an mbarrier array of this layout",
                                      thing="mbarrier array name", value=name)
        array = MbarrierPlacement(name, stages, arrive_count, self.nbytes)
        self._arrays.append(array)
        return array

    @property
    def arrays(self) -> tuple[MbarrierPlacement, ...]:
        return tuple(self._arrays)

    @property
    def nbytes(self) -> int:
        """Bytes of the region (a multiple of 8)."""
        return sum(a.nbytes for a in self._arrays)

    def array(self, name: str) -> MbarrierPlacement:
        for a in self._arrays:
            if a.name == name:
                return a
        names = ", ".join(a.name for a in self._arrays)
        raise MbarrierLayoutError(f"no such array; arrays: {names}", thing="mbarrier array",
                                  value=name)

    def __contains__(self, array) -> bool:
        """Whether `array` was added to THIS layout (identity: an equal array made elsewhere
        belongs to another region)."""
        return any(a is array for a in self._arrays)


__all__ = ["MAX_ARRIVE_COUNT", "MBARRIER_BYTES", "MbarrierPlacement", "MbarrierLayout"]
