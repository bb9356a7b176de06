"""The mma.sync fragment TV layouts against the PTX ISA's per-lane formulas (hand-computed
coordinates), the ldmatrix matrix fragment, and the shared-address helpers."""
import pytest
import sympy

import layoutkit.dsl as lk
from layoutkit.algebra import Swizzle
from layoutkit.dsl.sm80.mma_layouts import LDMATRIX_FRAGMENT
from layoutkit.dsl.sm80.smem_address import bank_ways, bit_expr, bit_fit, split_swizzled


def coordinate(tv, lane, value):
    """(row, col) of tile index tv(lane, value), column-major."""
    index = tv.layout(lane, value)
    return index % tv.tile[0], index // tv.tile[0]


def ptx_a(lane, i):
    """PTX ISA, 'Matrix Fragments for mma.m16n8k16', A (.bf16/.f16): (row, col)."""
    group, tig = lane >> 2, lane % 4
    row = group if i < 2 or 4 <= i < 6 else group + 8
    col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def ptx_b(lane, i):
    """B: (row = k, col = n)."""
    group, tig = lane >> 2, lane % 4
    return tig * 2 + (i & 1) + (8 if i >= 2 else 0), group


def ptx_c(lane, i):
    group, tig = lane >> 2, lane % 4
    return group + (8 if i >= 2 else 0), tig * 2 + (i & 1)


def test_m16n8k16_fragments_match_the_ptx_isa():
    atoms = lk.sm80.mma_sync_layouts("m16n8k16", lk.bf16, lk.f32)
    assert (atoms.a.tile, atoms.b.tile, atoms.c.tile) == ((16, 16), (8, 16), (16, 8))
    for lane in range(32):
        for i in range(8):
            assert coordinate(atoms.a, lane, i) == ptx_a(lane, i), (lane, i)
        for i in range(4):
            k, n = ptx_b(lane, i)
            assert coordinate(atoms.b, lane, i) == (n, k), (lane, i)   # B over (N, K)
            assert coordinate(atoms.c, lane, i) == ptx_c(lane, i), (lane, i)


def test_fragments_cover_their_tiles_once():
    for shape in ("m16n8k16", "m16n8k8"):
        atoms = lk.sm80.mma_sync_layouts(shape, lk.f16)
        for tv in (atoms.a, atoms.b, atoms.c):
            indices = sorted(tv.layout(t, v) for t in range(32) for v in range(tv.num_values))
            assert indices == list(range(tv.tile[0] * tv.tile[1])), (shape, str(tv))


def test_m16n8k8_fragments():
    atoms = lk.sm80.mma_sync_layouts("m16n8k8")
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for i in range(4):          # a_i: row group + 8*(i/2), col 2 tig + i%2
            assert coordinate(atoms.a, lane, i) == (group + 8 * (i // 2), 2 * tig + i % 2)
        for i in range(2):          # b_i: k = 2 tig + i, n = group
            assert coordinate(atoms.b, lane, i) == (group, 2 * tig + i)


def test_ldmatrix_fragment_is_row_lane_over_4_columns_2_lane_mod_4():
    for lane in range(32):
        for j in range(2):
            assert coordinate(LDMATRIX_FRAGMENT, lane, j) == (lane // 4, 2 * (lane % 4) + j)


def test_a_register_pair_is_one_ldmatrix_matrix():
    """a0a1, a2a3, a4a5, a6a7 are the 8x8 matrices (rows 0-7|8-15) x (cols 0-7|8-15)."""
    atoms = lk.sm80.mma_sync_layouts()
    for j, (r0, c0) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
        for lane in range(32):
            for h in range(2):
                r, c = coordinate(LDMATRIX_FRAGMENT, lane, h)
                assert coordinate(atoms.a, lane, 2 * j + h) == (r0 + r, c0 + c)


@pytest.mark.parametrize("args, message", [
    (("m16n8k32",), "shape 'm16n8k32' is not an mma.sync shape"),
    (("m16n8k16", lk.f32), "operand type f32"),
    (("m16n8k16", lk.bf16, lk.bf16), "accumulates in f32"),
])
def test_mma_sync_layouts_rejects_what_it_does_not_lower(args, message):
    with pytest.raises(lk.TraceError, match=message):
        lk.sm80.mma_sync_layouts(*args)


def test_split_swizzled_keeps_whole_periods_out_of_the_swizzle():
    s, t = sympy.symbols("s t", integer=True, nonnegative=True)
    sw = Swizzle(2, 3, 3)                                 # period 256 elements
    inner, outer, disp = split_swizzled(4096 * s + 256 * t + 8 * t + 300, sw)
    assert (inner, outer, disp) == (8 * t + 44, 4096 * s + 256 * t, 256)
    for sv in range(3):
        for tv in range(4):
            x = int(inner.subs(t, tv))
            assert sw(x + int(outer.subs({s: sv, t: tv})) + disp) == \
                sw(x) + int(outer.subs({s: sv, t: tv})) + disp
    assert split_swizzled(5 * t + 7, None) == (5 * t, 0, 7)


def test_bit_fit_reproduces_the_table_and_rejects_carries():
    table = [32 * (t % 16) + 8 * ((t // 16) % 2) + 2048 * (t // 32) for t in range(128)]
    fit = bit_fit(table)
    assert fit == (0, ((0, 4, 32), (4, 1, 8), (5, 2, 2048)))
    tid = sympy.Symbol("tid", integer=True, nonnegative=True)
    expr = bit_expr(tid, fit, 128)
    assert [int(expr.subs(tid, t)) for t in range(128)] == table
    assert bit_fit([0, 1, 2, 4]) is None                 # 3 = 1 + 2 would need a carry-free 3


def test_bank_ways_counts_distinct_words_per_bank():
    assert bank_ways([r * 32 for r in range(8)], 16) == 2     # 8 rows 32 B apart, 16 B each
    assert bank_ways([r * 64 for r in range(8)], 16) == 4
    assert bank_ways([r * 128 for r in range(8)], 16) == 8
    assert bank_ways([r * 16 for r in range(8)], 16) == 1
    assert bank_ways([0] * 8, 16) == 1                   # the same address is a broadcast
