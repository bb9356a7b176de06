"""What one wgmma op computes, as the hardware does it (PTX ISA "wgmma.mma_async", sm_90a):
the register fragments of the accumulator and of a register A operand, the shared-memory
element addresses a matrix descriptor makes the tensor cores read, and the products.

Fragments (PTX ISA "Register fragments", figures for .m64nNk16): thread T = 32w + 4g + t of
the warpgroup holds element i of a 16-row block at row 16w + g + 8*((i>>1)&1), column
8*(i>>2) + 2t + (i&1). Register order (the lowering, sm90/wgmma/ops.py): accumulator value v is
d[v mod N/2] of the instruction for rows 64*(v div N/2)..; register-A value v is element
v mod K/2 of k16 steps over rows 64*(v div K/2)...

Descriptors (PTX ISA "Matrix Descriptor", "Shared memory matrix layout"): an instruction's
block of rows x 32 bytes (16 elements of e = 2 bytes, 32 of an fp8's 1) starts at byte
S = buffer base + (origin + start) * e and element (r, k) lies at S + the canonical offset of
its major-ness and swizzle mode (T = 16 bytes = u elements, W = the swizzle span in bytes,
LBO/SBO the descriptor's byte offsets; fp8 is K-major only):

  K-major, no swizzle:  (r%8)*16 + (r//8)*SBO + (k%u)*e + (k//u)*LBO
  K-major, swizzled:    (r%8)*W + (r//8)*SBO + k*e
  MN-major, no swizzle: (r%8)*2 + (r//8)*SBO + (k%8)*16 + (k//8)*LBO
  MN-major, swizzled:   (r%(W/2))*2 + (r//(W/2))*LBO + (k%8)*W + (k//8)*SBO

then the swizzle moves 16-byte chunks by the address bits, exactly as TMA writes them
(layoutkit.ptx.isa.smem_swizzle). Products of bf16/f16/fp8 values are exact; each instruction
adds its 16 (32) products to the f32 accumulator in float64 and rounds the sum to f32 once.
For fp8 the tensor cores keep fewer bits of that sum than f32 has (NVIDIA does not document
how many; about 14 significant bits is reported, DeepSeek-V3 report section 3.3): the model
truncates each fp8 instruction's sum toward zero to FP8_ACCUMULATOR_BITS significant bits, so
an error that grows with K, as on the GPU, shows here too (the exact GPU bits differ).

>>> rows, cols = fragment(64, 8)
>>> rows[5].tolist(), cols[5].tolist()       # thread 5: g = 1, t = 1
([1, 1, 9, 9], [2, 3, 2, 3])
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.isa import wgmma as isa
from layoutkit.ptx.isa.smem_swizzle import CHUNK_BYTES
from layoutkit.ptx.isa.smem_swizzle import span as swizzle_span
from layoutkit.ptx.isa.smem_swizzle import swizzle_address
from layoutkit.sync import WARPGROUP_THREADS as WARPGROUP

from ..core.types import DTYPES
from . import float8

M_BLOCK = isa.M
FP8_ACCUMULATOR_BITS = 14     # significant bits of the modelled fp8 accumulator (f32: 24)


def k_step(dtype: str) -> int:
    """The K of one instruction for operands of `dtype` (16 for 16-bit types, 32 for fp8)."""
    return isa.INPUTS[dtype][0]


def fragment(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) arrays of shape (128, rows*cols/128): where value v of thread T of the
    warpgroup sits in a (rows, cols) accumulator or register-A tile."""
    per_block = cols // 2
    count = rows // M_BLOCK * per_block
    T = np.arange(WARPGROUP)[:, None]
    v = np.arange(count)[None, :]
    w, g, t = T // 32, (T % 32) // 4, T % 4
    b, i = v // per_block, v % per_block
    row = M_BLOCK * b + 16 * w + g + 8 * ((i >> 1) & 1)
    col = 8 * (i >> 2) + 2 * t + (i & 1)
    return np.broadcast_to(row, (WARPGROUP, count)), np.broadcast_to(col, (WARPGROUP, count))


def canonical_offsets(major: str, mode: str, rows: int, lbo: int, sbo: int,
                      dtype: str = "bf16") -> np.ndarray:
    """Byte offsets (rows, k_step) of an instruction block's elements from its start address."""
    e, span = DTYPES[dtype].nbytes, swizzle_span(mode)
    unit = CHUNK_BYTES // e
    r = np.arange(rows)[:, None]
    k = np.arange(k_step(dtype))[None, :]
    if major == "K":
        if not span:
            return (r % 8) * 16 + (r // 8) * sbo + (k % unit) * e + (k // unit) * lbo
        return (r % 8) * span + (r // 8) * sbo + k * e
    if not span:
        return (r % 8) * e + (r // 8) * sbo + (k % 8) * 16 + (k // 8) * lbo
    width = span // e
    return (r % width) * e + (r // width) * lbo + (k % 8) * span + (k // 8) * sbo


def operand_addresses(spec: dict, origin: int, rows: int, dtype: str = "bf16") -> dict:
    """(block, kstep) -> byte addresses (rows, k_step) in shared memory of each instruction's
    elements of the shared operand `spec` (a wgmma op's "a"/"b" attrs) at element `origin`."""
    offsets = canonical_offsets(spec["major"], spec["mode"], rows, spec["lbo"], spec["sbo"],
                                dtype)
    out = {}
    for block, kstep, start in spec["starts"]:
        address = spec["base"] + (origin + start) * DTYPES[dtype].nbytes
        out[(block, kstep)] = swizzle_address(address + offsets, spec["mode"])
    return out


def read_elements(shared: np.ndarray, addresses: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values of the `dtype` elements at byte `addresses` of `shared` (uint8)."""
    if dtype in float8.FORMATS:
        return float8.from_bits(shared[addresses], dtype).astype(np.float64)
    bits = shared[addresses].astype(np.uint16) | (shared[addresses + 1].astype(np.uint16) << 8)
    if dtype == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def truncated(values: np.ndarray, bits: int) -> np.ndarray:
    """float32 `values` rounded toward zero to `bits` significant bits (24: unchanged)."""
    drop = np.uint32((1 << (24 - bits)) - 1)
    return (np.asarray(values, np.float32).view(np.uint32) & ~drop).view(np.float32)


def multiply(d: np.ndarray | None, a_blocks: dict, b_steps: dict, blocks: int,
             ksteps: int, bits: int = 24) -> np.ndarray:
    """The accumulator after the op's instructions, in the lowering's order (k-step outer,
    row block inner): D_b = fl32(D_b + A(b, j) @ B(j)^T) with D_b taken as 0 for the first
    k-step when `d` is None (scale-d = 0), each sum then truncated to `bits` significant
    bits (module docstring). a_blocks[(b, j)]: (64, k); b_steps[j]: (N, k)."""
    n = b_steps[0].shape[0]
    out = np.zeros((blocks * M_BLOCK, n), dtype=np.float64) if d is None else d.copy()
    for j in range(ksteps):
        for b in range(blocks):
            rows = slice(M_BLOCK * b, M_BLOCK * (b + 1))
            out[rows] = truncated(out[rows] + a_blocks[(b, j)] @ b_steps[j].T, bits)
    return out


def accumulator_bits(dtype: str) -> int:
    """Significant bits the accumulator of a wgmma on `dtype` operands keeps (the model)."""
    return FP8_ACCUMULATOR_BITS if dtype in float8.FORMATS else 24


def byte_runs(addresses, element_bytes: int = 2) -> list[tuple[int, int]]:
    """(start, nbytes) runs covering the `element_bytes`-byte elements at `addresses` (any
    shape)."""
    first = np.concatenate([np.ravel(a) for a in addresses])
    covered = np.zeros(int(first.max()) + element_bytes, dtype=bool)
    for i in range(element_bytes):
        covered[first + i] = True
    touched = np.flatnonzero(covered)
    breaks = np.flatnonzero(np.diff(touched) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [touched.size - 1]])
    return [(int(touched[s]), int(touched[e] - touched[s] + 1)) for s, e in zip(starts, ends)]


__all__ = ["fragment", "canonical_offsets", "operand_addresses", "read_elements", "multiply",
           "byte_runs", "k_step", "WARPGROUP"]
