"""The register fragments of the warp-level matrix instructions as TV layouts (thread = lane).

mma.sync.aligned.m16n8k{8,16} (PTX ISA 9.7.13.4.8, "Matrix Fragments for mma.m16n8k16 with
floating point type"): with groupID = lane / 4 and threadID_in_group = lane % 4,

  A (M x K), a_i:  row = groupID + 8 * (i/2 % 2),  col = 2 * threadID_in_group + i%2 + 8 * (i/4)
  B (K x N), b_i:  row = 2 * threadID_in_group + i%2 + 8 * (i/2),  col = groupID
  C (M x N), c_i:  row = groupID + 8 * (i/2),       col = 2 * threadID_in_group + i%2

The TV layouts map (lane, value i) to the column-major index of that coordinate in the atom's
tile: A over (M, K), B over (N, K) (both operands with K as their second mode, as CuTe does),
C over (M, N). Values 2j and 2j+1 share one 32-bit register (a packed pair).

ldmatrix (PTX ISA "ldmatrix"): lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of an 8x8
b16 matrix (its register for that matrix), so one matrix is the TV layout (4,8):(16,1) x (2):(8)
over (rows, cols) = (8, 8) (`LDMATRIX_FRAGMENT`); `.trans` delivers the transpose.

>>> atoms = mma_sync_layouts("m16n8k16")
>>> print(atoms.a); print(atoms.b); print(atoms.c)
((4,8),(2,2,2)):((32,1),(16,8,128)) over tile (16,16)
((4,8),(2,2)):((16,1),(8,64)) over tile (8,16)
((4,8),(2,2)):((32,1),(16,8)) over tile (16,8)
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.algebra import Layout

from ..core.errors import TraceError
from ..core.types import DType, bf16, f16, f32
from ..core.values import TVLayout

LANES = (4, 8)                           # (threadID_in_group, groupID): lane = t + 4 * g

# shape -> (M, N, K) of one instruction
MMA_SHAPES = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8)}
AB_TYPES = (bf16, f16)
ACC_TYPES = (f32,)

LDMATRIX_FRAGMENT = TVLayout((8, 8), Layout((LANES, 2), ((16, 1), 8)))


@dataclass(frozen=True)
class MmaLayouts:
    """The fragment TV layouts of one mma.sync shape: `a` over (M, K), `b` over (N, K), `c`
    over (M, N); `ab` and `acc` the element types; `shape` the PTX name (m16n8k16)."""

    shape: str
    ab: DType
    acc: DType
    a: TVLayout
    b: TVLayout
    c: TVLayout

    @property
    def mnk(self) -> tuple:
        return MMA_SHAPES[self.shape]

    def __str__(self) -> str:
        return (f"mma.sync {self.shape} {self.acc}+={self.ab}*{self.ab}: A {self.a}, "
                f"B {self.b}, C {self.c}")


def _layouts(shape: str) -> tuple:
    m, n, k = MMA_SHAPES[shape]
    # index strides of one column (m), one row, on each tile
    c = TVLayout((m, n), Layout((LANES, (2, 2)), ((2 * m, 1), (m, 8))))
    if k == 16:
        a = TVLayout((m, k), Layout((LANES, (2, 2, 2)), ((2 * m, 1), (m, 8, 8 * m))))
        b = TVLayout((n, k), Layout((LANES, (2, 2)), ((2 * n, 1), (n, 8 * n))))
    else:
        a = TVLayout((m, k), Layout((LANES, (2, 2)), ((2 * m, 1), (m, 8))))
        b = TVLayout((n, k), Layout((LANES, 2), ((2 * n, 1), n)))
    return a, b, c


def mma_sync_layouts(shape: str = "m16n8k16", ab: DType = bf16, acc: DType = f32) -> MmaLayouts:
    """The fragment TV layouts of `mma.sync.aligned.<shape>.row.col.<acc>.<ab>.<ab>.<acc>`
    (32 lanes each; see the module docstring). Tile them over warps and repeats with the
    layout algebra to make a warp's or a block's operand layouts."""
    if shape not in MMA_SHAPES:
        raise TraceError(f"lk.sm80.mma_sync_layouts: shape {shape!r} is not an mma.sync shape this "
                         f"DSL lowers; choose one of {', '.join(MMA_SHAPES)}")
    if ab not in AB_TYPES:
        raise TraceError(f"lk.sm80.mma_sync_layouts: operand type {ab!r}: mma.sync {shape} "
                         "multiplies bf16 or f16 operands here")
    if acc not in ACC_TYPES:
        raise TraceError(f"lk.sm80.mma_sync_layouts: accumulator type {acc!r}: the {ab} mma.sync "
                         "accumulates in f32 here")
    return MmaLayouts(shape, ab, acc, *_layouts(shape))


__all__ = ["MmaLayouts", "mma_sync_layouts", "LDMATRIX_FRAGMENT", "MMA_SHAPES"]
