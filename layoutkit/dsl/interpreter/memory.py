"""Global and shared memory of a kernel run, byte-addressed, with typed access.

Global memory is the argument arrays themselves: a pointer argument's value is its array's host
address, and an access through it must stay inside that array (else `MemoryFaultError`), so
results land in the caller's arrays and aliasing arguments alias here too. Shared memory is one
byte array per CTA (the kernel's dynamic shared array); an access must stay inside the
allocation it names. Asynchronous operations (TMA copies, wgmma operand reads) `claim` byte
ranges of shared memory until they complete; a conflicting access meanwhile is a `RaceError`.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from layoutkit.algebra import Swizzle

from ..core.types import DType
from .errors import MemoryFaultError, RaceError
from .numerics import bf16_from_f32_bits

_NUMPY = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
          "i64": np.int64, "u32": np.uint32}


def decode(raw: np.ndarray, dtype: DType) -> list:
    """Register values of the little-endian bytes `raw` (uint8) read as dtype elements."""
    name = dtype.name
    if name == "bf16":
        return list((raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32))
    values = raw.view(_NUMPY[name])
    if dtype.is_int:
        return [int(v) for v in values]
    if name == "f64":
        return [float(v) for v in values]
    return list(values)


def encode(values, dtype: DType) -> np.ndarray:
    """The bytes (uint8) of register values of dtype (a bf16 value is a float32 that bf16
    represents exactly: its high half)."""
    name = dtype.name
    if name == "bf16":
        bits = np.array(values, dtype=np.float32).view(np.uint32)
        return bf16_from_f32_bits(bits).view(np.uint8)
    if dtype.is_int:
        values = [int(v) & ((1 << 8 * dtype.nbytes) - 1) for v in values]
        return np.array(values, dtype=np.uint32 if dtype.nbytes == 4 else np.uint64).view(
            np.uint8)
    return np.array(values, dtype=_NUMPY[name]).view(np.uint8)


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

    def add(self, name: str, array: np.ndarray, dtype: DType) -> int:
        """Map a C-contiguous array; returns its address (the pointer argument's value)."""
        data = array.reshape(-1).view(np.uint8)
        start = int(array.__array_interface__["data"][0])
        region = Region(name, start, data.size, data, dtype)
        at = bisect.bisect_right(self._starts, start)
        self._starts.insert(at, start)
        self.regions.insert(at, region)
        return start

    def region(self, pointer: int, what: str, op) -> Region:
        """The argument array that `pointer` (a pointer argument's value) points into."""
        at = bisect.bisect_right(self._starts, pointer) - 1
        while at >= 0:
            region = self.regions[at]
            if region.start <= pointer < region.start + max(region.nbytes, 1):
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


@dataclass
class Claim:
    """Bytes [start, end) of shared memory that an asynchronous operation still writes
    (`writes`) or reads; `owner` says which ('the TMA load issued at line 40 into full[2]')."""

    start: int
    end: int
    writes: bool
    owner: str
    advice: str


class SharedMemory:
    """One CTA's dynamic shared memory (`nbytes` bytes) and its allocations by name."""

    def __init__(self, fn):
        self.data = np.zeros(fn.shared_bytes, dtype=np.uint8)
        self.allocations = {a.name: a for a in fn.shared}
        self.claims: list[Claim] = []

    def check_range(self, start: int, nbytes: int, align: int, what: str, op,
                    buffer: str | None = None) -> None:
        """Raise unless [start, start + nbytes) lies inside `buffer` (or the whole dynamic
        shared array) and is `align`-aligned."""
        if buffer is not None and buffer in self.allocations:
            alloc = self.allocations[buffer]
            lo, hi, name = alloc.offset, alloc.offset + alloc.nbytes, f"buffer {alloc.name}"
        else:
            lo, hi, name = 0, self.data.size, "the kernel's dynamic shared memory"
        if start < lo or start + nbytes > hi:
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
        self.claims.append(claim)
        return claim

    def release(self, claim: Claim) -> None:
        self.claims.remove(claim)

    def check_claims(self, start: int, nbytes: int, writes: bool, what: str, op) -> None:
        """RaceError when an access overlaps a claim it conflicts with."""
        end = start + nbytes
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
        self.check_range(start, nbytes, align, what, op, buffer)
        if self.claims:
            self.check_claims(start, nbytes, writes, what, op)

    def view(self, start: int, nbytes: int) -> np.ndarray:
        return self.data[start:start + nbytes]


__all__ = ["decode", "encode", "GlobalMemory", "Region", "SharedMemory", "Claim",
           "swizzle_function", "shared_byte_offset"]


# ---- addressing of the shared ops (as layoutkit.dsl.lower.shared emits it) ---------------
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
