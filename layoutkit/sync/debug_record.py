"""The timeout record a debug-build bounded wait writes before it traps, and its host decoder.

Where the record lives, and why: `trap` poisons the CUDA context, after which every driver
call (a device-to-host copy included) fails. So the record goes to *mapped pinned host
memory* (`cuMemHostAlloc(DEVICEMAP)`), whose device address the kernel gets as a hidden
`.u64` parameter (`ERROR_BUFFER_PARAM`); the host reads those bytes directly, with no driver
call, after the failed launch. A `.global` variable read back with cuModuleGetGlobal would be
unreadable at exactly the moment it matters.

Layout: `RECORD_WORDS` little-endian u32 words (64 bytes), zeroed by the host before launch.

    word  field        written by
    0     claims       atom.add by every thread whose wait timed out (the first gets 0)
    1     magic        RECORD_MAGIC, stored last (after membar.sys): the record is complete
    2     barrier      index into the kernel's DebugTable.barriers (the barrier's name)
    3     stage        stage index of the barrier in its array (runtime value)
    4     parity       the parity the thread waited for (runtime value)
    5     site         index into DebugTable.sites (the user's source line of the wait)
    6-8   block        %ctaid.x, .y, .z
    9-11  thread       %tid.x, .y, .z
    12    timeout_us   the bound, microseconds
    13-15 reserved     0

>>> table = DebugTable("my_kernel")
>>> site = table.add_site("full", SourceLocation("my_kernel.py", 57))
>>> words = TimeoutRecord(1, table.barrier_index("full"), 2, 0, site, (3, 0, 0), (128, 0, 0),
...                       2_000_000).encode()
>>> print(decode(words, table).message(table))
mbarrier 'full' stage 2 waited for parity 0 for more than 2.0 s at my_kernel.py:57 (block 3, thread 128)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from layoutkit.ptx.builder import SourceLocation

from .errors import BarrierTimeoutError, DebugRecordError

RECORD_WORDS = 16
RECORD_BYTES = RECORD_WORDS * 4
RECORD_MAGIC = 0x4C4B5754          # 'LKWT': layoutkit wait timeout
ERROR_BUFFER_PARAM = "__layoutkit_wait_errors"
U32_MAX = (1 << 32) - 1

# Byte offsets of the fields (the emitter and the decoder share them).
CLAIMS, MAGIC, BARRIER, STAGE, PARITY, SITE = 0, 4, 8, 12, 16, 20
BLOCK, THREAD, TIMEOUT_US = 24, 36, 48


@dataclass(frozen=True)
class WaitSite:
    """One bounded wait in the kernel: the barrier it waits on and the user's source line."""

    barrier: str
    location: SourceLocation | None


@dataclass
class DebugTable:
    """Per kernel: the barrier names and wait sites a record's indices refer to (host side).

    Built while the kernel is emitted (`BoundedWaits.wait` adds a site per wait) and kept with
    the compiled kernel to decode a record after a failed launch.
    """

    kernel: str
    barriers: list[str] = field(default_factory=list)
    sites: list[WaitSite] = field(default_factory=list)

    def barrier_index(self, name: str) -> int:
        """The index of barrier `name`, adding it on first use."""
        if not isinstance(name, str) or not name:
            raise DebugRecordError("a barrier in a timeout record needs a non-empty name",
                                   thing="barrier name", value=name)
        if name not in self.barriers:
            self.barriers.append(name)
        return self.barriers.index(name)

    def add_site(self, barrier: str, location: SourceLocation | None) -> int:
        """Register a wait on `barrier` at `location`; returns its site index."""
        self.barrier_index(barrier)
        self.sites.append(WaitSite(barrier, location))
        return len(self.sites) - 1


def _format_seconds(microseconds: int) -> str:
    seconds = microseconds / 1e6
    if seconds >= 0.1:
        return f"{seconds:.1f} s" if round(seconds, 1) == seconds else f"{seconds:g} s"
    return f"{microseconds / 1e3:g} ms"


def _xyz(values: tuple[int, int, int]) -> str:
    return str(values[0]) if values[1:] == (0, 0) else "(" + ", ".join(map(str, values)) + ")"


@dataclass(frozen=True)
class TimeoutRecord:
    """A decoded record: `claims` threads timed out; the fields are the first one's."""

    claims: int
    barrier: int
    stage: int
    parity: int
    site: int
    block: tuple[int, int, int]
    thread: tuple[int, int, int]
    timeout_us: int
    complete: bool = True

    def encode(self) -> bytes:
        """The 64 bytes the device writes (for tests and tools; the kernel writes the same)."""
        words = [self.claims, RECORD_MAGIC if self.complete else 0, self.barrier, self.stage,
                 self.parity, self.site, *self.block, *self.thread, self.timeout_us, 0, 0, 0]
        for name, value in zip(("claims", "magic", "barrier", "stage", "parity", "site",
                                "block.x", "block.y", "block.z", "thread.x", "thread.y",
                                "thread.z", "timeout_us"), words):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U32_MAX:
                raise DebugRecordError("must be an integer in 0..2^32-1 (a u32 record word)",
                                       thing=f"timeout record {name}", value=value)
        return struct.pack(f"<{RECORD_WORDS}I", *words)

    def message(self, table: DebugTable) -> str:
        """'mbarrier 'full' stage 2 waited for parity 0 for more than 2.0 s at f.py:57 (block
        3, thread 128)', plus how many other threads timed out."""
        if not self.complete:
            return (f"a bounded mbarrier wait in kernel '{table.kernel}' timed out, but the kernel "
                    "was killed before its record was complete (fields unknown)")
        if not 0 <= self.barrier < len(table.barriers) or not 0 <= self.site < len(table.sites):
            raise DebugRecordError(f"refers to barrier {self.barrier} / site {self.site}, but "
                                   f"kernel '{table.kernel}' has {len(table.barriers)} barrier(s) "
                                   f"and {len(table.sites)} wait site(s): wrong DebugTable?",
                                   thing="timeout record", value=(self.barrier, self.site))
        where = table.sites[self.site].location
        text = (f"mbarrier '{table.barriers[self.barrier]}' stage {self.stage} waited for parity "
                f"{self.parity} for more than {_format_seconds(self.timeout_us)}"
                f"{f' at {where}' if where is not None else ''} "
                f"(block {_xyz(self.block)}, thread {_xyz(self.thread)})")
        if self.claims > 1:
            text += f"; {self.claims - 1} more thread(s) timed out too"
        return text


def decode(data, table: DebugTable | None = None) -> TimeoutRecord | None:
    """The record in `data` (64 bytes, or 16 ints), or None when no wait timed out."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        if len(raw) < RECORD_BYTES:
            raise DebugRecordError(f"a timeout record is {RECORD_BYTES} bytes",
                                   thing="record length", value=len(raw))
        words = struct.unpack(f"<{RECORD_WORDS}I", raw[:RECORD_BYTES])
    else:
        words = tuple(int(w) for w in data)
        if len(words) < RECORD_WORDS:
            raise DebugRecordError(f"a timeout record is {RECORD_WORDS} u32 words",
                                   thing="record length", value=len(words))
    claims, magic = words[0], words[1]
    if claims == 0 and magic == 0:
        return None
    if magic not in (0, RECORD_MAGIC):
        raise DebugRecordError(f"the magic word must be 0 or 0x{RECORD_MAGIC:08X} (is the buffer "
                               "a layoutkit wait-error buffer, zeroed before the launch?)",
                               thing="record magic", value=hex(magic))
    return TimeoutRecord(max(claims, 1), words[2], words[3], words[4], words[5],
                         tuple(words[6:9]), tuple(words[9:12]), words[12],
                         complete=magic == RECORD_MAGIC)


def raise_if_timed_out(data, table: DebugTable) -> None:
    """Raise BarrierTimeoutError with the decoded message when `data` holds a record."""
    record = decode(data, table)
    if record is not None:
        raise BarrierTimeoutError(record.message(table), record)


__all__ = ["DebugTable", "ERROR_BUFFER_PARAM", "RECORD_BYTES", "RECORD_MAGIC", "RECORD_WORDS",
           "TimeoutRecord", "WaitSite", "decode", "raise_if_timed_out"]
