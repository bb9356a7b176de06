"""Global and shared memory of a kernel run, byte-addressed, with typed access.

Global memory is the argument arrays themselves: a pointer argument's value is its array's host
address, and an access through it must stay inside that array (else `MemoryFaultError`), so
results land in the caller's arrays and aliasing arguments alias here too. Shared memory is one
byte array per CTA (the kernel's dynamic shared array); an access must stay inside the
allocation it names. Asynchronous operations (TMA copies, wgmma operand reads) `claim` byte
ranges of shared memory until they complete; a conflicting access meanwhile is a `RaceError`.

Shared memory starts undefined: every byte is poisoned until something writes it - a store or
stmatrix (`check_access` of a write), a cp.async or TMA load (its write `claim`, whose bytes
nothing may read until it completes) - and a read of a poisoned byte (`check_access` of a
read, `check_written`) is an `UnwrittenReadError` naming the read, the buffer and the bytes,
and the write that was relevant: the one of the buffer's nearest written bytes, or an op that
writes the buffer but had not run, or that none does.
"""
from __future__ import annotations

import bisect
import math
import re
import struct
from dataclasses import dataclass

import numpy as np

from layoutkit.algebra import Swizzle
from layoutkit.sync import kernel_model as km

from ..core.types import DType
from .errors import MemoryFaultError, RaceError, UnwrittenReadError
from . import float8
from .numerics import BF16_SCALARS, bf16_from_f32_bits

_NUMPY = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
          "i64": np.int64, "u32": np.uint32}


def decode(raw: np.ndarray, dtype: DType) -> list:
    """Register values of the little-endian bytes `raw` (uint8) read as dtype elements."""
    name = dtype.name
    if name == "bf16":
        halves = _HALVES.get(raw.size)
        if halves is None:
            halves = _HALVES[raw.size] = struct.Struct(f"<{raw.size // 2}H")
        return [BF16_SCALARS[h] for h in halves.unpack(raw.tobytes())]
    if name in float8.FORMATS:
        scalars = _FP8_SCALARS[name]
        return [scalars[b] for b in raw.tobytes()]
    values = raw.view(_NUMPY[name])
    if dtype.is_int or name == "f64":
        return values.tolist()          # Python ints, floats
    return list(values)


def encode(values, dtype: DType) -> np.ndarray:
    """The bytes (uint8) of register values of dtype (a bf16 value is a float32 that bf16
    represents exactly: its high half; an fp8 value one fp8 represents: its bit pattern)."""
    name = dtype.name
    if name == "bf16":
        try:
            return _bf16_bytes(values)
        except OverflowError:               # a value beyond float32: numpy's cast makes it inf
            bits = np.array(values, dtype=np.float32).view(np.uint32)
            return bf16_from_f32_bits(bits).view(np.uint8)
    if name in float8.FORMATS:
        found = _fp8_bytes(values, name)
        if found is not None:
            return found
        return float8.to_bits(np.array(values, dtype=np.float64), name)
    if dtype.is_int:
        values = [int(v) & ((1 << 8 * dtype.nbytes) - 1) for v in values]
        return np.array(values, dtype=np.uint32 if dtype.nbytes == 4 else np.uint64).view(
            np.uint8)
    return np.array(values, dtype=_NUMPY[name]).view(np.uint8)


_PACKS: dict = {}
_HALVES: dict = {}                  # byte count -> the Struct of its little-endian uint16s


def _bf16_bytes(values) -> np.ndarray:
    """encode for bf16, value by value (bf16_from_f32_bits' rounding; faster for the few
    values of one access than the array form)."""
    n = len(values)
    packs = _PACKS.get(n)
    if packs is None:
        packs = _PACKS[n] = (struct.Struct(f"<{n}f"), struct.Struct(f"<{n}I"),
                             struct.Struct(f"<{n}H"))
    as_f32, as_u32, as_u16 = packs
    out = [0x7FFF if (b & 0x7FFFFFFF) > 0x7F800000 else (b + 0x7FFF + ((b >> 16) & 1)) >> 16
           for b in as_u32.unpack(as_f32.pack(*values))]
    return np.frombuffer(bytearray(as_u16.pack(*out)), dtype=np.uint8)


# per fp8 format: the register value (numpy float32) of every bit pattern, as decode gives
# it, and the bit pattern of every finite nonzero value (and e5m2's infinities)
_FP8_SCALARS = {name: list(float8.from_bits(np.arange(256, dtype=np.uint8), name))
                for name in float8.FORMATS}
_FP8_CODES = {name: {float(v): code for code, v in enumerate(_FP8_SCALARS[name])
                     if v == v and v != 0.0}
              for name in float8.FORMATS}


def _fp8_bytes(values, name: str) -> np.ndarray | None:
    """encode for fp8, value by value (float8.to_bits' patterns; faster for the few values of
    one access than the array form); None where a value is none of the table's (a NaN, one
    the format cannot hold): the array form decides."""
    codes = _FP8_CODES[name]
    out = bytearray(len(values))
    for i, v in enumerate(values):
        x = float(v)                    # an unavailable value refuses here, as in np.array
        code = codes.get(x)
        if code is None:
            if x != 0.0:
                return None
            code = 0x80 if math.copysign(1.0, x) < 0 else 0
        out[i] = code
    return np.frombuffer(out, dtype=np.uint8)


@dataclass
class Region:
    """One argument array in global memory: [start, start + nbytes) holds `data` (uint8)."""

    name: str
    start: int
    nbytes: int
    data: np.ndarray
    dtype: DType


class GlobalMemory:
    """The kernel's global memory: the pointer arguments' arrays (see the module docstring)."""

    def __init__(self):
        self.regions: list[Region] = []
        self._starts: list[int] = []
        self._found: dict = {}          # pointer -> its region (region() is a pure lookup)

    def add(self, name: str, array: np.ndarray, dtype: DType) -> int:
        """Map a C-contiguous array; returns its address (the pointer argument's value)."""
        data = array.reshape(-1).view(np.uint8)
        start = int(array.__array_interface__["data"][0])
        region = Region(name, start, data.size, data, dtype)
        at = bisect.bisect_right(self._starts, start)
        self._starts.insert(at, start)
        self.regions.insert(at, region)
        self._found.clear()
        return start

    def region(self, pointer: int, what: str, op) -> Region:
        """The argument array that `pointer` (a pointer argument's value) points into."""
        found = self._found.get(pointer)
        if found is not None:
            return found
        at = bisect.bisect_right(self._starts, pointer) - 1
        while at >= 0:
            region = self.regions[at]
            if region.start <= pointer < region.start + max(region.nbytes, 1):
                self._found[pointer] = region
                return region
            at -= 1
        raise MemoryFaultError(f"{what}: the pointer {pointer:#x} is not inside any argument "
                               "array of this launch", op.location)

    def access(self, pointer: int, offset: int, nbytes: int, align: int, what: str,
               op) -> np.ndarray:
        """The bytes [pointer + offset, + nbytes) (a writable view), checked against the
        array `pointer` belongs to and for `align`-byte alignment."""
        region = self.region(pointer, what, op)
        start = pointer - region.start + offset
        elements = region.nbytes // region.dtype.nbytes
        if start < 0 or start + nbytes > region.nbytes:
            first = start // region.dtype.nbytes
            last = first + max(nbytes // region.dtype.nbytes, 1) - 1
            raise MemoryFaultError(
                f"{what} touches {region.name}[{first}..{last}] "
                f"(bytes {start}..{start + nbytes - 1}), outside the argument array "
                f"{region.name} of {elements} {region.dtype} elements ({region.nbytes} bytes): "
                "the GPU would fault or touch other data; mask the access (bounds) or fix "
                "the index", op.location)
        if (pointer + offset) % align:
            raise MemoryFaultError(
                f"{what}: the address {pointer + offset:#x} ({region.name} + {start} bytes) is "
                f"not a multiple of {align} bytes, the width of the access (PTX requires "
                "naturally aligned vector accesses)", op.location)
        return region.data[start:start + nbytes]


@dataclass(eq=False)
class Claim:
    """Bytes [start, end) of shared memory that an asynchronous operation still writes
    (`writes`) or reads; `owner` says which ('the TMA load issued at line 40 into full[2]').
    Claims are equal only to themselves (an open one is released by identity)."""

    start: int
    end: int
    writes: bool
    owner: str
    advice: str


class SharedMemory:
    """One CTA's dynamic shared memory (`nbytes` bytes) and its allocations by name."""

    def __init__(self, fn):
        self.fn = fn
        self.data = np.zeros(fn.shared_bytes, dtype=np.uint8)
        self.allocations = {a.name: a for a in fn.shared}
        self.claims: dict[Claim, None] = {}     # the open claims, in the order made
        # per byte: how many open claims cover it, and how many of those write it (with many
        # claims open, as cp.async rings have, check_claims tests these before its scan)
        self._claimed = np.zeros(fn.shared_bytes, dtype=np.int32)
        self._write_claimed = np.zeros(fn.shared_bytes, dtype=np.int32)
        # per byte: 1 once written (the reads' fast test), and who wrote it last (an index
        # into `writers`, descriptions like "the TMA load issued at line 40 (...)"; -1: never)
        self.written = bytearray(fn.shared_bytes)
        self.written_by = np.full(fn.shared_bytes, -1, dtype=np.int32)
        self.writers: list[str] = []
        self._writer_ids: dict = {}
        self.poisoned = None            # the first read of unwritten bytes, reported by finish
        # buffer name -> its bytes [lo, hi) (check_access's test; other names: the whole array)
        self._bounds = {a.name: (a.offset, a.offset + a.nbytes) for a in fn.shared}
        self._whole = (0, fn.shared_bytes)

    def check_range(self, start: int, nbytes: int, align: int, what: str, op,
                    buffer: str | None = None) -> None:
        """Raise unless [start, start + nbytes) lies inside `buffer` (or the whole dynamic
        shared array) and is `align`-aligned."""
        alloc = self.allocations.get(buffer) if buffer is not None else None
        if alloc is not None:
            lo, hi = alloc.offset, alloc.offset + alloc.nbytes
        else:
            lo, hi = 0, self.data.size
        if start < lo or start + nbytes > hi:
            name = f"buffer {alloc.name}" if alloc is not None else \
                "the kernel's dynamic shared memory"
            raise MemoryFaultError(
                f"{what} touches shared bytes {start}..{start + nbytes - 1}, outside {name} "
                f"(bytes {lo}..{hi - 1}): the GPU would fault or corrupt another buffer",
                op.location)
        if start % align:
            raise MemoryFaultError(f"{what}: shared byte offset {start} is not a multiple of "
                                   f"{align} bytes, the width of the access", op.location)

    def claim(self, start: int, nbytes: int, writes: bool, owner: str, advice: str) -> Claim:
        """Mark bytes as in use by an asynchronous operation until `release(claim)`."""
        claim = Claim(start, start + nbytes, writes, owner, advice)
        self.claims[claim] = None
        self._claimed[start:start + nbytes] += 1
        if writes:       # its bytes land later; until then the claim refuses every access
            self._write_claimed[start:start + nbytes] += 1
            self.mark_written(start, nbytes, owner)
        return claim

    def release(self, claim: Claim) -> None:
        del self.claims[claim]
        self._claimed[claim.start:claim.end] -= 1
        if claim.writes:
            self._write_claimed[claim.start:claim.end] -= 1

    def check_claims(self, start: int, nbytes: int, writes: bool, what: str, op) -> None:
        """RaceError when an access overlaps a claim it conflicts with (the first such claim
        made)."""
        end = start + nbytes
        if len(self.claims) > _FEW_CLAIMS and start >= 0:
            covered = self._claimed if writes else self._write_claimed
            if not covered[start:end].any():
                return                  # no claim it conflicts with covers these bytes
        for claim in self.claims:
            if claim.start < end and start < claim.end and (claim.writes or writes):
                verb = "writes" if writes else "reads"
                doing = "still writes" if claim.writes else "still reads"
                first, last = max(start, claim.start), min(end, claim.end) - 1
                raise RaceError(
                    f"{what} {verb} shared bytes {first}..{last}, which {claim.owner} {doing}: "
                    f"the result would depend on timing; {claim.advice}", op.location)

    def check_access(self, start: int, nbytes: int, align: int, writes: bool, what: str, op,
                     buffer: str | None = None) -> None:
        """check_range, then check_claims when any claim is open: what every shared access
        runs before it touches the bytes."""
        lo, hi = self._bounds.get(buffer, self._whole)
        if start < lo or start + nbytes > hi or start % align:
            self.check_range(start, nbytes, align, what, op, buffer)     # it raises
        if self.claims:
            self.check_claims(start, nbytes, writes, what, op)
        if writes:
            self.mark_written(start, nbytes, what, op)
        elif 0 in self.written[start:start + nbytes]:
            self.check_written(start, nbytes, what, op, buffer)

    # ---- poison: bytes nothing wrote ----------------------------------------------------------
    def mark_written(self, start: int, nbytes: int, writer: str, op=None) -> None:
        """Bytes [start, start + nbytes) now hold data written by `writer` (a description;
        with the op of a synchronous write, 'at line N' is added)."""
        key = (writer, id(op))
        index = self._writer_ids.get(key)
        if index is None:
            index = self._writer_ids[key] = len(self.writers)
            self.writers.append(writer if op is None else f"{writer} at {_line(op)}")
        self.written[start:start + nbytes] = _ONES.get(nbytes) or b"\x01" * nbytes
        self.written_by[start:start + nbytes] = index

    def check_written(self, start: int, nbytes: int, what: str, op,
                      buffer: str | None = None) -> None:
        """Note a read of [start, start + nbytes) that finds bytes nothing wrote: an
        UnwrittenReadError now when nothing in the kernel writes the buffer; otherwise the run
        goes on (a later write of the bytes by another thread, unordered, is the race detector's
        RaceError) and `finish` reports the read (module docstring)."""
        if 0 not in self.written[start:start + nbytes] or self.poisoned is not None:
            return
        unwritten = np.flatnonzero(self.written_by[start:start + nbytes] < 0) + start
        first, last = int(unwritten[0]), int(unwritten[-1])
        alloc = self._allocation(first, buffer)
        read = (what, op, first, last, alloc)
        if alloc is None or self._written_somewhere(alloc):
            self.poisoned = read
            return
        writer = static_writer(self.fn, alloc.name)
        if writer is not None:
            self.poisoned = read
            return
        raise UnwrittenReadError(
            f"{self._read_text(read)}, but no op of the kernel writes {alloc.name}: shared "
            "memory starts undefined, so the read sees garbage; write the buffer (lk.store, "
            "lk.sm90.tma_load, lk.sm80.cp_async) and synchronise before reading it", op.location)

    def finish(self, where: str = "") -> None:
        """At the end of the run: UnwrittenReadError for the first read that found unwritten
        bytes, if any (`where`: 'CTA (0, 0, 0): ')."""
        if self.poisoned is None:
            return
        read, self.poisoned = self.poisoned, None
        what, op, first, last, alloc = read
        head = where + self._read_text(read)
        advice = ("shared memory starts undefined, so the read saw garbage; order the write "
                  "before the read (lk.barrier(), or an mbarrier wait on the phase a copy "
                  "completes)")
        later = self.written_by[first:last + 1]
        if (later >= 0).any():
            writer = self.writers[int(later[later >= 0][0])]
            raise UnwrittenReadError(f"{head}, which nothing had written yet: {writer} wrote "
                                     f"them only after the read; {advice}", op.location)
        if alloc is not None and self._written_somewhere(alloc):
            lo, hi = alloc.offset, alloc.offset + alloc.nbytes
            done = np.flatnonzero(self.written_by[lo:hi] >= 0) + lo
            near = int(done[np.argmin(np.abs(done - first))])
            writer = int(self.written_by[near])
            same = np.flatnonzero(self.written_by[lo:hi] == writer) + lo
            raise UnwrittenReadError(
                f"{head}, which nothing in the run wrote: {self.writers[writer]} wrote "
                f"{alloc.name} bytes {int(same[0]) - lo}..{int(same[-1]) - lo}, not these; "
                "shared memory starts undefined, so the read saw garbage; write every byte "
                "that is read (or read only the bytes written)", op.location)
        writer = static_writer(self.fn, alloc.name) if alloc is not None else None
        raise UnwrittenReadError(
            f"{head}, which nothing in the run wrote"
            + (f" ({writer} writes {alloc.name}, but never these bytes in this run)"
               if writer else "")
            + ": shared memory starts undefined, so the read saw garbage; write the bytes "
            "before reading them", op.location)

    @staticmethod
    def _read_text(read) -> str:
        what, op, first, last, alloc = read
        where = f"shared bytes {first}..{last}" if alloc is None else \
            f"{alloc.name} bytes {first - alloc.offset}..{last - alloc.offset}"
        line = _line(op)
        named = re.search(rf"{line}\b", what) is not None      # 'the wgmma at line 68'
        return f"{what if named else f'{what} at {line}'} reads {where}"

    def _allocation(self, byte: int, buffer: str | None):
        if buffer is not None and buffer in self.allocations:
            return self.allocations[buffer]
        return next((a for a in self.allocations.values()
                     if a.offset <= byte < a.offset + a.nbytes), None)

    def _written_somewhere(self, alloc) -> bool:
        return 1 in self.written[alloc.offset:alloc.offset + alloc.nbytes]

    def view(self, start: int, nbytes: int) -> np.ndarray:
        return self.data[start:start + nbytes]


_ONES = {n: b"\x01" * n for n in (1, 2, 4, 8, 16)}
_FEW_CLAIMS = 8         # open claims that check_claims scans without testing the counts first


def _line(op) -> str:
    location = None if op is None else op.location
    return f"line {location.line}" if location is not None else "an unknown line"


_STATIC: dict[int, tuple] = {}      # id(fn) -> (fn, {buffer: first write's description})


def static_writer(fn, buffer: str) -> str | None:
    """'the TMA load into s at line 40': the first write of `buffer` in program order that the
    static protocol check's extraction finds in `fn`; None when it finds none, 'an op of the
    kernel' when the extraction cannot run (kept per IR function)."""
    known = _STATIC.get(id(fn))
    if known is None or known[0] is not fn:
        writers: dict = {}
        try:
            from ..check.extract import extract
            protocol = extract(fn)
        except Exception:       # noqa: BLE001 - only a message's detail depends on it
            writers = None
        else:
            for c in protocol.classes:
                for e in c.events:
                    if isinstance(e, km.Copy) and e.dst is not None:
                        writers.setdefault(e.dst.buffer, f"the {e.what} at {e.site.text()}")
                    elif isinstance(e, (km.SharedWrite, km.AsyncWrite)):
                        kind = "store" if isinstance(e, km.SharedWrite) else "cp.async"
                        writers.setdefault(e.bytes.buffer, f"the {kind} at {e.site.text()}")
        if len(_STATIC) > 64:
            _STATIC.clear()
        known = _STATIC[id(fn)] = (fn, writers)
    if known[1] is None:
        return "an op of the kernel"
    return known[1].get(buffer)


__all__ = ["decode", "encode", "GlobalMemory", "Region", "SharedMemory", "Claim",
           "swizzle_function", "shared_byte_offset", "split_address", "static_writer"]


# ---- addressing of the shared ops (as layoutkit.dsl.lower.function.Lowering.shared_address emits it) ---------------
_U32 = 0xFFFFFFFF


def swizzle_function(swizzle):
    """The element-offset swizzle of a shared access's attrs (None: identity), on u32 values."""
    if swizzle is None:
        return None
    sw = Swizzle(*swizzle)
    mask, shift = sw.yyy_mask, sw.shift
    if shift >= 0:
        return lambda x: x ^ ((x & mask) >> shift)
    return lambda x: x ^ ((x & mask) << -shift)


def shared_byte_offset(op, dtype):
    """A function of the element offset giving the access's byte offset in shared memory."""
    swizzle = swizzle_function(op.attrs["swizzle"])
    n = dtype.nbytes
    constant = op.attrs["base"] + op.attrs["disp"] * n
    if swizzle is None:
        return lambda offset: (constant + ((offset & _U32) * n & _U32)) & _U32
    return lambda offset: (constant + (swizzle(offset & _U32) * n & _U32)) & _U32


def split_address(op, nbytes: int, disp_key: str):
    """A function of (inner, outer) element offsets giving the byte offset in shared memory of
    Sw(inner) + outer + disp (the split addresses of ldmatrix, stmatrix, cp.async:
    sm80/smem_address.py)."""
    swizzle = swizzle_function(op.attrs["swizzle"]) or (lambda x: x)
    constant = op.attrs["base"] + op.attrs[disp_key] * nbytes
    return lambda inner, outer: (constant + (swizzle(inner & _U32) + outer) * nbytes) & _U32
