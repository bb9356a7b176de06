"""wgmma shared-memory operands: check a shared tile against the canonical K-major / MN-major
layouts (no swizzle, 32B, 64B, 128B) and derive the matrix descriptor of every instruction.

An operand is a rows x K tile (A: M x K, B: N x K). One instruction reads `block` rows
(A: 64, B: N) by 32 bytes of K: 16 columns of a 16-bit type, 32 of an 8-bit one (fp8, which
must be K-major: the transpose immediates of wgmma exist for f16/bf16 only). Relative to the
instruction's start, element (r, k) must sit at the canonical offset (PTX ISA "Shared memory
matrix layout"; CuTe make_gmma_desc; T = 16 bytes of elements, W = swizzle width in elements
(32/64/128 bytes)):

  K-major, no swizzle:  (r%8)*T + (r//8)*SBO + k%T + (k//T)*LBO     (8x16-byte core matrices)
  K-major, swizzled:    (r%8)*W + (r//8)*SBO + k                    (LBO unused)
  MN-major, no swizzle: r%T + (r//T)*SBO + (k%8)*T + (k//8)*LBO
  MN-major, swizzled:   r%W + (r//W)*LBO + (k%8)*W + (k//8)*SBO

and the tile's swizzle must be the mode's: Sw<B,log2(T),3> on element offsets, B = 1, 2, 3 for
32/64/128 bytes (the hardware XORs byte-address bits [4+B:4] with [7+B:7] of the absolute
address, so the buffer starts on the swizzle's repeat: 256/512/1024 bytes). An instruction's
start address is the tile's element offset plus the (unswizzled) offset of its first element;
inside a swizzle atom it may only move along the first 128/64/32-byte row (the k16 advance of a
K-major tile), since the descriptor's base-offset field is kept 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layoutkit.algebra import Layout, Swizzle, size
from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx.isa import smem_swizzle, wgmma_descriptor

from ...core.errors import SharedMemoryError, TraceError
from ...core.facts import provably_divisible
from ...lang.shared import SharedTensor
from ...core.types import DType
from .layouts import index_table, k_step, transposable

CHUNK_BYTES = smem_swizzle.CHUNK_BYTES          # 16: a core-matrix row, the swizzle's unit
SWIZZLED = tuple(b for b in smem_swizzle.MODES.values() if b)     # Swizzle bits 1, 2, 3
FIELD_ALIGN = wgmma_descriptor.FIELD_ALIGN      # a descriptor's LBO/SBO unit, in bytes


@dataclass(frozen=True)
class SharedOperand:
    """A checked shared operand: the descriptor constants and, per instruction, the element
    offset of its first element relative to the tile's origin (`tensor.offset`)."""

    role: str              # "A" or "B"
    tensor: SharedTensor
    layout: Layout         # rank 2: (rows, K)
    major: str             # "K" or "MN"
    mode: str              # "none", "32B", "64B", "128B"
    lbo: int               # bytes
    sbo: int               # bytes
    starts: tuple          # ((block, kstep, element offset), ...) in issue order

    @property
    def trans(self) -> int:
        """imm-trans of the instruction: 0 K-major, 1 MN-major."""
        return 0 if self.major == "K" else 1

    def attrs(self) -> dict:
        """What an interpreter or protocol checker needs: element (r, k) of the tile is element
        swizzle(origin + layout(r, k)) of buffer `buffer` (at byte `base` of shared memory)."""
        sw = self.tensor.swizzle
        return {"kind": "shared", "buffer": self.tensor.alloc.name,
                "base": self.tensor.alloc.offset, "layout": self.layout,
                "swizzle": None if sw is None else (sw.bits, sw.base, sw.shift),
                "major": self.major, "mode": self.mode, "lbo": self.lbo, "sbo": self.sbo,
                "starts": self.starts}


def rank2(what: str, operand: str, tensor) -> Layout:
    """The tile's layout as (rows, K): trailing modes of size 1 (a ring stage's) are dropped."""
    if not isinstance(tensor, SharedTensor):
        raise TraceError(f"{what}: {operand} is a shared tile (lk.shared_tensor or a tile/view "
                         f"of one), got {tensor!r}")
    if tensor.tv is not None:
        raise TraceError(f"{what}: {operand} is a whole tile, not a thread's partition "
                         f"(wgmma reads the tile for the whole warpgroup), got {tensor!r}")
    layout = tensor.layout
    modes = list(layout) if isinstance(layout.shape, tuple) else [layout]
    while len(modes) > 2 and size(modes[-1]) == 1:
        modes.pop()
    if len(modes) != 2:
        raise TraceError(f"{what}: {operand} is a rank-2 tile (rows, K), got layout {layout}")
    return Layout((modes[0].shape, modes[1].shape), (modes[0].stride, modes[1].stride))


def _mode_of(what: str, operand: str, tensor: SharedTensor) -> tuple[str, int]:
    """(mode, swizzle bits) of the tile's swizzle for its element size."""
    dtype: DType = tensor.dtype
    unit = CHUNK_BYTES // dtype.nbytes                      # elements per 16 bytes
    base = unit.bit_length() - 1
    sw = tensor.swizzle
    if sw is None:
        return "none", 0
    shift = smem_swizzle.XOR_SHIFT
    if sw.bits in SWIZZLED and sw.base == base and sw.shift == shift:
        return smem_swizzle.mode_of_bits(sw.bits), sw.bits
    allowed = ", ".join(f"{str(Swizzle(b, base, shift))} ({smem_swizzle.mode_of_bits(b)})"
                        for b in SWIZZLED)
    raise SharedMemoryError(f"{what}: {operand}'s swizzle {sw} is not a wgmma swizzle; for "
                            f"{dtype} the forms are no swizzle, {allowed}")


def _form(major: str, mode: str, unit: int, width: int) -> str:
    if major == "K":
        if mode == "none":
            return (f"K-major, no swizzle: 8x16-byte core matrices, element (r, k) at "
                    f"(r%8)*{unit} + (r//8)*SBO + k%{unit} + (k//{unit})*LBO")
        return (f"K-major, {mode} swizzle: rows of {width} elements, element (r, k) at "
                f"(r%8)*{width} + (r//8)*SBO + k")
    if mode == "none":
        return (f"MN-major, no swizzle: element (r, k) at r%{unit} + (r//{unit})*SBO + "
                f"(k%8)*{unit} + (k//8)*LBO")
    return (f"MN-major, {mode} swizzle: element (r, k) at r%{width} + (r//{width})*LBO + "
            f"(k%8)*{width} + (k//8)*SBO")


def _canonical(major: str, mode: str, rows: int, kdim: int, unit: int, width: int,
               rel: np.ndarray) -> tuple[np.ndarray, int | None, int | None]:
    """(canonical table, LBO, SBO) in elements, the free strides read off `rel` (None: unused
    by this instruction shape)."""
    r = np.arange(rows)[:, None]
    k = np.arange(kdim)[None, :]
    if major == "K":
        sbo = int(rel[8, 0]) if rows > 8 else None
        if mode == "none":
            lbo = int(rel[0, unit]) if kdim > unit else None
            table = (r % 8) * unit + (r // 8) * (sbo or 0) + k % unit + (k // unit) * (lbo or 0)
        else:
            lbo = None
            table = (r % 8) * width + (r // 8) * (sbo or 0) + k
        return table, lbo, sbo
    if mode == "none":
        sbo = int(rel[unit, 0]) if rows > unit else None
        lbo = int(rel[0, 8]) if kdim > 8 else None
        table = r % unit + (r // unit) * (sbo or 0) + (k % 8) * unit + (k // 8) * (lbo or 0)
    else:
        lbo = int(rel[width, 0]) if rows > width else None
        sbo = int(rel[0, 8]) if kdim > 8 else None
        table = r % width + (r // width) * (lbo or 0) + (k % 8) * width + (k // 8) * (sbo or 0)
    return table, lbo, sbo


def shared_operand(what: str, role: str, tensor, rows: int, block: int,
                   kdim: int | None = None) -> SharedOperand:
    """Check `tensor` (rows x K, `block` rows per instruction) and derive its descriptors.
    `kdim`: the K the other operand fixed (None for A, which fixes it)."""
    operand = f"operand {role} ({tensor!r})" if isinstance(tensor, SharedTensor) else role
    layout = rank2(what, f"operand {role}", tensor)
    got_rows, got_k = size(layout[0]), size(layout[1])
    if got_rows != rows or (kdim is not None and got_k != kdim):
        want = f"({rows}, {kdim if kdim is not None else 'K'})"
        raise TraceError(f"{what}: {operand} must be a {want} tile ({'M' if role == 'A' else 'N'}"
                         f" x K), got ({got_rows}, {got_k})")
    kstep = k_step(tensor.dtype)
    if not isinstance(got_k, int) or got_k % kstep:
        raise TraceError(f"{what}: {operand}: K = {got_k} is not a multiple of {kstep} (the K "
                         f"of one {tensor.dtype} wgmma)")
    mode, bits = _mode_of(what, f"operand {role}", tensor)
    e = tensor.dtype.nbytes
    unit = CHUNK_BYTES // e
    width = smem_swizzle.span(mode) // e if bits else unit     # swizzle row, in elements
    repeat = smem_swizzle.repeat(mode) // e if bits else unit  # elements per swizzle period
    table = index_table(layout).reshape(got_k, rows).T          # table[r, k] = layout(r, k)
    first = table[:block, :kstep] - table[0, 0]
    major = "K" if first[0, 1] == 1 else "MN" if block > 1 and first[1, 0] == 1 else None
    if major is None:
        raise SharedMemoryError(
            f"{what}: {operand} is neither K-major (consecutive k adjacent) nor MN-major "
            f"(consecutive {'m' if role == 'A' else 'n'} adjacent): element (0, 1) is "
            f"{int(first[0, 1])} and (1, 0) is {int(first[1, 0]) if block > 1 else '-'} elements "
            f"from (0, 0); wgmma reads canonical K-major or MN-major layouts")
    if major == "MN" and not transposable(tensor.dtype):
        raise SharedMemoryError(
            f"{what}: {operand} is MN-major (consecutive {'m' if role == 'A' else 'n'} "
            f"adjacent), but {tensor.dtype} operands must be K-major: wgmma transposes only "
            f"f16/bf16 tiles (PTX ISA wgmma: no imm-trans operands for 8-bit types). Store the "
            f"tile with K contiguous, e.g. B as an N x K tensor (torch._scaled_mm's b.t())")
    starts, found = [], None
    for j in range(got_k // kstep):
        for b in range(rows // block):
            r0, k0 = b * block, j * kstep
            rel = table[r0:r0 + block, k0:k0 + kstep] - table[r0, k0]
            canon, lbo, sbo = _canonical(major, mode, block, kstep, unit, width, rel)
            if not np.array_equal(rel, canon):
                r, k = (int(x[0]) for x in np.nonzero(rel != canon))
                raise SharedMemoryError(
                    f"{what}: {operand} with layout {tensor.swizzle or 'no swizzle'} o "
                    f"{layout} is not a canonical wgmma layout: in the {block}x{kstep} block of "
                    f"instruction (k-step {j}, block {b}), element (r={r}, k={k}) is "
                    f"{int(rel[r, k])} elements from the block's start; the expected form, "
                    f"{_form(major, mode, unit, width)}, puts it at {int(canon[r, k])}")
            if found is not None and (lbo, sbo) != found:
                raise SharedMemoryError(
                    f"{what}: {operand}: the instructions of one tile need one LBO/SBO, but "
                    f"k-step {j}, block {b} has (LBO, SBO) = {(lbo, sbo)} elements and the first "
                    f"{found}")
            found = (lbo, sbo)
            start = int(table[r0, k0])
            _check_start(what, operand, tensor, mode, start, unit, width, repeat, j, b)
            starts.append((b, j, start))
    lbo, sbo = found
    lbo_bytes = FIELD_ALIGN if lbo is None else lbo * e
    sbo_bytes = (8 * width * e if major == "K" else FIELD_ALIGN) if sbo is None else sbo * e
    for name, value in (("LBO", lbo_bytes), ("SBO", sbo_bytes)):
        if not 0 <= value < wgmma_descriptor.ADDRESS_LIMIT or value % FIELD_ALIGN:
            raise SharedMemoryError(
                f"{what}: {operand}: the descriptor's {name} would be {value} bytes; it is a "
                f"multiple of {FIELD_ALIGN} in 0..{wgmma_descriptor.ADDRESS_LIMIT - FIELD_ALIGN} "
                f"({_form(major, mode, unit, width)})")
    return SharedOperand(role, tensor, layout, major, mode, lbo_bytes, sbo_bytes, tuple(starts))


def _check_start(what, operand, tensor: SharedTensor, mode: str, start: int, unit: int,
                 width: int, repeat: int, j: int, b: int) -> None:
    """An instruction's start: 16-byte aligned; with a swizzle, inside the first row of a swizzle
    period of an aligned buffer (the descriptor's base offset stays 0)."""
    origin = sympy.sympify(tensor.offset)
    e = tensor.dtype.nbytes
    if mode == "none":
        if start % unit or not provably_divisible(origin, unit):
            raise SharedMemoryError(
                f"{what}: {operand}: instruction (k-step {j}, block {b}) starts at element "
                f"{origin + start} of {tensor.alloc.name}, not provably a multiple of {unit} "
                f"(16 bytes, the descriptor's address unit)")
        return
    repeat_bytes = repeat * e
    if tensor.alloc.align % repeat_bytes or tensor.alloc.offset % repeat_bytes:
        raise SharedMemoryError(
            f"{what}: {operand}: buffer {tensor.alloc.name} is aligned to {tensor.alloc.align} "
            f"bytes; the {mode} swizzle repeats every {repeat_bytes} bytes and wgmma needs the "
            f"buffer on that boundary (allocate it with the swizzled layout)")
    if not provably_divisible(origin, repeat) or start % repeat >= width or start % unit:
        raise SharedMemoryError(
            f"{what}: {operand}: instruction (k-step {j}, block {b}) starts at element "
            f"{origin + start} of {tensor.alloc.name}; with the {mode} swizzle a start must be a "
            f"multiple of {repeat} elements ({repeat_bytes} bytes, one swizzle period) plus a "
            f"16-byte step along its first {width}-element row")


__all__ = ["SharedOperand", "shared_operand", "rank2"]
