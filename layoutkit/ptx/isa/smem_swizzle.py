"""The shared-memory swizzle of TMA and wgmma (sm_90): one hardware pattern, named by its span.

A swizzle mode "nB" (n = 32, 64, 128) moves the 16-byte chunks of shared memory: byte-address
bits [4, 4+B) are XORed with bits [7, 7+B), B = 1, 2, 3 (PTX ISA "Tensor swizzling modes" and
"Matrix Descriptor"; cuTensorMapEncodeTiled's CU_TENSOR_MAP_SWIZZLE_nB). So a swizzled row is
n = 16 << B bytes and the pattern repeats every 8 rows, 8n bytes; the bits are those of the
absolute shared address, so a swizzled tile starts on that boundary. The tensor map
(layoutkit.ptx.tensormap) and the wgmma descriptor (wgmma_descriptor) encode a mode with enums
of their own; this module is the pattern they name.

>>> span("128B"), repeat("64B"), bits("32B"), mode_of_bits(3)
(128, 512, 1, '128B')
>>> [swizzle_address(a, "128B") for a in (0, 16, 128, 144, 1040)]
[0, 16, 144, 128, 1040]
"""
from __future__ import annotations

CHUNK_BYTES = 16           # the unit a swizzle moves: address bits 0..3 stay
CHUNK_SHIFT = 4            # log2(CHUNK_BYTES): the XOR's target bits start at address bit 4
ROW_SHIFT = 7              # the XOR's source bits start at address bit 7
XOR_SHIFT = ROW_SHIFT - CHUNK_SHIFT     # 3: source bits sit this far above their target bits
PERIOD_ROWS = 1 << XOR_SHIFT            # 8 rows of one swizzle period
MODES = {"none": 0, "32B": 1, "64B": 2, "128B": 3}     # mode -> B


def bits(mode: str) -> int:
    """B of `mode` (0 for "none"); a KeyError names the modes for an unknown one."""
    try:
        return MODES[mode]
    except KeyError:
        raise KeyError(f"swizzle mode {mode!r}: the modes are {', '.join(MODES)}") from None


def mode_of_bits(b: int) -> str:
    """The mode whose XOR spans `b` address bits."""
    for mode, value in MODES.items():
        if value == b:
            return mode
    raise KeyError(f"no swizzle mode XORs {b!r} address bits (0..{max(MODES.values())})")


def span(mode: str) -> int:
    """Bytes of one swizzled row (16 << B); 0 for "none"."""
    b = bits(mode)
    return CHUNK_BYTES << b if b else 0


def repeat(mode: str) -> int:
    """Bytes after which the pattern repeats (8 rows); 0 for "none"."""
    return PERIOD_ROWS * span(mode)


def swizzle_address(addresses, mode: str):
    """Shared byte `addresses` (an int or an integer numpy array) after the swizzle `mode`."""
    b = bits(mode)
    if not b:
        return addresses
    return addresses ^ (((addresses >> ROW_SHIFT) & ((1 << b) - 1)) << CHUNK_SHIFT)


__all__ = ["CHUNK_BYTES", "CHUNK_SHIFT", "MODES", "PERIOD_ROWS", "ROW_SHIFT", "XOR_SHIFT", "bits",
           "mode_of_bits", "repeat", "span", "swizzle_address"]
