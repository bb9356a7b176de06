"""The 64-bit wgmma shared-memory matrix descriptor: encoded from its fields in Python (constant
fields) or emitted as PTX for a runtime start address.

Bit layout (hopper-ptx.md §5), with enc(x) = (x & 0x3FFFF) >> 4:
bits 0-13 enc(start address) (shared::cta byte offset), 16-29 enc(LBO), 32-45 enc(SBO),
49-51 base offset, 62-63 swizzle: none 0, 128B 1, 64B 2, 32B 3 -- NOT the TMA enum (where
128B is 3). Addresses and offsets are multiples of 16 below 2^18. Which LBO/SBO/swizzle a shared
layout needs is the DSL's job (it derives them from the layout); this module only encodes.
"""
from __future__ import annotations

from ..builder import KernelBuilder, PTXRangeError, PTXTypeError, Reg
from .arith import add
from .bits import bfe, or_
from .convert import cvt

INSTR = "wgmma descriptor"
FIELD_ALIGN = 16
ADDRESS_LIMIT = 1 << 18
ADDRESS_FIELD_BITS = 14
LBO_SHIFT, SBO_SHIFT, BASE_OFFSET_SHIFT, SWIZZLE_SHIFT = 16, 32, 49, 62
MAX_BASE_OFFSET = 7
SWIZZLE_CODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}


def encode_field(operand: str, value: int) -> int:
    """enc(x) = x >> 4 for a byte offset x that is a multiple of 16 in 0..2^18-16.

    >>> encode_field("sbo", 1024)
    64
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise PTXTypeError("must be an integer byte offset", instruction=INSTR, operand=operand,
                           value=value)
    if not 0 <= value < ADDRESS_LIMIT:
        raise PTXRangeError(f"must be in 0..{ADDRESS_LIMIT - FIELD_ALIGN} (a 14-bit field of "
                            "16-byte units)", instruction=INSTR, operand=operand, value=value)
    if value % FIELD_ALIGN:
        raise PTXRangeError(f"must be a multiple of {FIELD_ALIGN} bytes", instruction=INSTR,
                            operand=operand, value=value)
    return value >> 4


def _swizzle_code(swizzle: str) -> int:
    if swizzle not in SWIZZLE_CODES:
        raise PTXRangeError(f"must be one of {', '.join(SWIZZLE_CODES)}", instruction=INSTR,
                            operand="swizzle", value=swizzle)
    return SWIZZLE_CODES[swizzle]


def descriptor(start_address: int = 0, *, lbo: int, sbo: int, swizzle: str = "none",
               base_offset: int = 0) -> int:
    """The descriptor of a tile at shared offset `start_address` (bytes).

    >>> hex(descriptor(0x400, lbo=16, sbo=1024, swizzle="128B"))   # K-major SW128
    '0x4000004000010040'
    """
    if isinstance(base_offset, bool) or not isinstance(base_offset, int)\
            or not 0 <= base_offset <= MAX_BASE_OFFSET:
        raise PTXRangeError(f"must be in 0..{MAX_BASE_OFFSET} (a 3-bit field)", instruction=INSTR,
                            operand="base_offset", value=base_offset)
    return (encode_field("start_address", start_address)
            | encode_field("lbo", lbo) << LBO_SHIFT
            | encode_field("sbo", sbo) << SBO_SHIFT
            | base_offset << BASE_OFFSET_SHIFT
            | _swizzle_code(swizzle) << SWIZZLE_SHIFT)


def make_descriptor(k: KernelBuilder, start_address, *, lbo: int, sbo: int, swizzle: str = "none",
                    base_offset: int = 0, out=None, pred=None) -> Reg:
    """Emit the descriptor for a runtime 32-bit shared offset `start_address`: extract
    enc(addr) with bfe, widen, or in the constant fields.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); a = k.reg("u32")
    >>> _ = make_descriptor(k, a, lbo=16, sbo=1024, swizzle="128B")
    >>> print("\\n".join(k.body_lines()))
        bfe.u32 %u1, %u0, 4, 14;
        cvt.u64.u32 %ud0, %u1;
        or.b64 %ud1, %ud0, 0x4000004000010000;
    """
    constant = descriptor(0, lbo=lbo, sbo=sbo, swizzle=swizzle, base_offset=base_offset)
    if not isinstance(start_address, Reg) or start_address.type.bits != 32\
            or start_address.type.is_float:
        raise PTXTypeError("a runtime start address is a 32-bit shared::cta offset register "
                           "(use descriptor() for a constant address)", instruction=INSTR,
                           operand="start_address", value=start_address)
    field = bfe(k, start_address, 4, ADDRESS_FIELD_BITS, dtype="u32", pred=pred)
    return or_(k, cvt(k, field, "u64", pred=pred), constant, dtype="b64", out=out, pred=pred)


def advance_descriptor(k: KernelBuilder, desc, byte_offset: int, *, out=None, pred=None) -> Reg:
    """desc with its start address moved by `byte_offset` (a multiple of 16; e.g. +32 per k16
    step inside a 128B-swizzled K-major row): `add.u64 d, desc, byte_offset >> 4`. The caller
    keeps the address inside its tile (the 14-bit field must not carry)."""
    if isinstance(byte_offset, bool) or not isinstance(byte_offset, int)\
            or byte_offset % FIELD_ALIGN or not -ADDRESS_LIMIT < byte_offset < ADDRESS_LIMIT:
        raise PTXRangeError(f"must be a multiple of {FIELD_ALIGN} bytes with magnitude below "
                            f"{ADDRESS_LIMIT}", instruction=INSTR, operand="byte_offset",
                            value=byte_offset)
    return add(k, desc, byte_offset // FIELD_ALIGN, dtype="s64" if byte_offset < 0 else "u64",
               out=out, pred=pred)


__all__ = ["SWIZZLE_CODES", "advance_descriptor", "descriptor", "encode_field",
           "make_descriptor"]
