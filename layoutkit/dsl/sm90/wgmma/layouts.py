"""The register layouts of wgmma (sm_90a) as TV layouts: the f32 accumulator of an m64nN
instruction (and M = 64*b rows per warpgroup as b stacked m64 blocks), and the 16-bit A operand
held in registers. Thread index = the thread's index in its warpgroup (%tid.x mod 128).

PTX ISA "wgmma: register fragments" (hopper-ptx.md §5): thread T = 32w + 4g + t of the
warpgroup holds accumulator register d[i] at row 16w + g + 8*((i>>1)&1), column 8*(i>>2) + 2t +
(i&1); the bf16/f16 A fragment of a k16 step is the same figure over 16 columns (register a_q =
values 2q (low half) and 2q+1 (high half)). So the accumulator of an m64nN tile *is* the A
fragment of an m64kN operand, value for value: a converted S accumulator feeds the next wgmma
with no data movement (FlashAttention's P = softmax(S) as the A operand of P*V).

>>> str(wgmma_accumulator_layout(64))
'((4,8,4),(2,2,8)):((128,1,16),(64,8,512)) over tile (64,64)'
>>> same_function(wgmma_accumulator_layout(32), wgmma_a_layout(32))
True
"""
from __future__ import annotations

import numpy as np

from layoutkit.algebra import Layout, flatten
from layoutkit.ptx.isa import wgmma as isa
from layoutkit.sync import WARPGROUP_THREADS as WARPGROUP   # threads that issue one wgmma

from ...core.errors import LayoutMismatchError, TraceError
from ...core.values import TVLayout

M_BLOCK = isa.M                        # rows of one wgmma instruction
N_STEP, N_MAX = isa.N_STEP, isa.N_MAX  # its N
K_STEP = isa.INPUTS["bf16"][0]         # its K for f16/bf16 (the same for both)


def k_step(dtype) -> int:
    """The K of one wgmma instruction for operands of `dtype` (16 for f16/bf16, 32 for fp8:
    32 bytes of each row either way).

    >>> from layoutkit.dsl.core.types import bf16, e4m3
    >>> k_step(bf16), k_step(e4m3)
    (16, 32)
    """
    return isa.INPUTS[dtype.name][0]


def transposable(dtype) -> bool:
    """Whether shared operands of `dtype` may be MN-major (the imm-trans operands of wgmma
    exist for f16/bf16 only; 8-bit and tf32 operands are read K-major)."""
    return isa.INPUTS[dtype.name][2]


def _fragment(rows: int, cols: int) -> TVLayout:
    """The per-warpgroup fragment over a (rows, cols) tile: rows/64 stacked m64 blocks of the
    PTX figure (tile index = row + rows*col, column-major like every TV layout here)."""
    threads = ((4, 8, 4), (2 * rows, 1, 16))          # t: column 2t; g: row g; w: row 16w
    values_shape, values_stride = [2, 2, cols // 8], [rows, 8, 8 * rows]   # col+1, row+8, col+8
    if rows > M_BLOCK:
        values_shape.append(rows // M_BLOCK)            # block b: row + 64b
        values_stride.append(M_BLOCK)
    layout = Layout((threads[0], tuple(values_shape)), (threads[1], tuple(values_stride)))
    return TVLayout((rows, cols), layout)


def _check_rows(what: str, m) -> None:
    if isinstance(m, bool) or not isinstance(m, int) or m <= 0 or m % M_BLOCK:
        raise TraceError(f"{what}: m (rows per warpgroup) is a positive multiple of {M_BLOCK} "
                         f"(each wgmma instruction covers {M_BLOCK} rows), got {m!r}")


def wgmma_accumulator_layout(n: int, m: int = M_BLOCK) -> TVLayout:
    """The TV layout of a warpgroup's f32 accumulator of an (m, n) tile: m/64 m64nN blocks,
    n = 8..256 in steps of 8; m*n/128 values per thread (value i of block b is d[i] of the
    instruction for rows 64b..64b+63).

    >>> acc = wgmma_accumulator_layout(256, m=128)
    >>> acc.num_threads, acc.num_values, acc.tile
    (128, 256, (128, 256))
    """
    what = "lk.sm90.wgmma_accumulator_layout"
    if isinstance(n, bool) or not isinstance(n, int) or not (N_STEP <= n <= N_MAX and
                                                             n % N_STEP == 0):
        raise TraceError(f"{what}: n is {N_STEP}..{N_MAX} in steps of {N_STEP} (the N of one "
                         f"wgmma instruction), got {n!r}")
    _check_rows(what, m)
    return _fragment(m, n)


def wgmma_a_layout(k: int, m: int = M_BLOCK) -> TVLayout:
    """The TV layout of a warpgroup's 16-bit (bf16/f16) A operand in registers over an (m, k)
    tile: k/16 k16 steps of m/64 blocks; 8 values per thread per step and block.

    >>> str(wgmma_a_layout(16))
    '((4,8,4),(2,2,2)):((128,1,16),(64,8,512)) over tile (64,16)'
    """
    what = "lk.sm90.wgmma_a_layout"
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0 or k % K_STEP:
        raise TraceError(f"{what}: k is a positive multiple of {K_STEP} (the K of one bf16/f16 "
                         f"wgmma), got {k!r}")
    _check_rows(what, m)
    return _fragment(m, k)


def warpgroup_stack(layout: TVLayout, warpgroups: int) -> TVLayout:
    """The CTA-wide TV layout of `warpgroups` per-warpgroup (m, n) tiles stacked along M: thread
    T holds what thread T % 128 holds in `layout`, moved down by m * (T // 128) rows.
    For epilogues of warpgroups that each own rows of one block tile (wrap the values with
    lk.RegisterTensor(acc.dtype, stacked, acc.values)).

    >>> str(warpgroup_stack(wgmma_accumulator_layout(8), 2))
    '(((4,8,4),2),(2,2,1)):(((256,1,16),64),(128,8,1024)) over tile (128,8)'
    """
    if isinstance(warpgroups, bool) or not isinstance(warpgroups, int) or warpgroups < 1:
        raise TraceError("lk.sm90.warpgroup_stack: warpgroups is a positive int, got "
                         f"{warpgroups!r}")
    if not isinstance(layout, TVLayout) or len(layout.tile) != 2 or \
            layout.num_threads != WARPGROUP:
        raise TraceError(f"lk.sm90.warpgroup_stack: stacks a 128-thread TV layout over a 2-D tile, "
                         f"got {layout}")
    m, n = layout.tile
    rows = m * warpgroups

    def restride(mode_shape, mode_stride):   # index r + m*c -> r + rows*c
        if isinstance(mode_shape, tuple):
            return tuple(restride(s, d) for s, d in zip(mode_shape, mode_stride))
        return mode_stride % m + rows * (mode_stride // m)
    threads, values = layout.layout[0], layout.layout[1]
    shape = ((threads.shape, warpgroups), values.shape)
    stride = ((restride(threads.shape, threads.stride), m), restride(values.shape, values.stride))
    return TVLayout((rows, n), Layout(shape, stride))


def index_table(layout: Layout) -> np.ndarray:
    """layout(i) for every flat index i of an integer layout (colexicographic), as int64."""
    flat = flatten(layout)
    shapes = flat.shape if isinstance(flat.shape, tuple) else (flat.shape,)
    strides = flat.stride if isinstance(flat.stride, tuple) else (flat.stride,)
    size = int(np.prod(shapes, dtype=np.int64))
    index = np.arange(size, dtype=np.int64)
    out = np.zeros(size, dtype=np.int64)
    step = 1
    for s, d in zip(shapes, strides):
        out += (index // step) % s * d
        step *= s
    return out


def same_function(a: TVLayout, b: TVLayout) -> bool:
    """Whether two TV layouts assign every (thread, value) the same tile coordinate (same tile,
    thread and value counts): the check that makes a register reinterpretation exact."""
    if a == b:
        return True
    if tuple(a.tile) != tuple(b.tile) or a.num_threads != b.num_threads \
            or a.num_values != b.num_values:
        return False
    return bool(np.array_equal(index_table(a.layout), index_table(b.layout)))


def check_fragment(what: str, operand: str, got: TVLayout, expected: TVLayout) -> None:
    """Raise LayoutMismatchError unless `got` is the same function as `expected`."""
    if not isinstance(got, TVLayout) or not same_function(got, expected):
        raise LayoutMismatchError(
            f"{what}: {operand} must have the wgmma register layout of its tile\n"
            f"      expected: {expected}\n      got:      {got}\n"
            "  (PTX ISA wgmma register fragments; make it with lk.sm90.wgmma_accumulator_layout / "
            "lk.sm90.wgmma_a_layout, or lk.convert_layout to it)")


__all__ = ["wgmma_accumulator_layout", "wgmma_a_layout", "warpgroup_stack", "same_function",
           "index_table", "k_step", "transposable",
           "check_fragment", "WARPGROUP", "M_BLOCK", "K_STEP", "N_STEP", "N_MAX"]
