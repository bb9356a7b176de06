"""wgmma register layouts against the PTX ISA fragment figures (hopper-ptx.md §5), written out
per thread and register: the f32 accumulator of m64nN, stacked m64 blocks, the bf16 A fragment,
and the accumulator/A-fragment identity FlashAttention's P = bf16(S) relies on."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.sm90.wgmma.layouts import index_table, same_function


def figure_accumulator(T: int, i: int, m: int = 64):
    """(row, col) of accumulator register d[i] of thread T, rows 64b.. for block b = i // (N/2)
    (PTX ISA "Matrix fragments for wgmma.mma_async .m64nNk16", D, f32)."""
    w, lane = divmod(T, 32)
    g, t = divmod(lane, 4)
    return 16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)


def figure_a(T: int, q: int, half: int):
    """(row, col) of the `half` (0 = low) 16 bits of A register a_q of thread T (k16, bf16)."""
    w, lane = divmod(T, 32)
    g, t = divmod(lane, 4)
    row = 16 * w + g + (8 if q in (1, 3) else 0)
    col = 2 * t + half + (8 if q in (2, 3) else 0)
    return row, col


def coordinate(tv: lk.TVLayout, t: int, v: int):
    index = tv.layout(t, v)
    rows = tv.tile[0]
    return index % rows, index // rows


@pytest.mark.parametrize("n", [8, 16, 64, 136, 256])
def test_accumulator_layout_is_the_ptx_figure(n):
    tv = lk.sm90.wgmma_accumulator_layout(n)
    assert tv.tile == (64, n) and tv.num_threads == 128 and tv.num_values == n // 2
    for T in range(128):
        for i in range(n // 2):
            assert coordinate(tv, T, i) == figure_accumulator(T, i)


def test_stacked_blocks_are_consecutive_instructions():
    tv = lk.sm90.wgmma_accumulator_layout(32, m=128)
    assert tv.tile == (128, 32) and tv.num_values == 32
    for T in range(128):
        for i in range(32):
            block, reg = divmod(i, 16)          # value i = register reg of block `block`
            row, col = figure_accumulator(T, reg)
            assert coordinate(tv, T, i) == (row + 64 * block, col)


def test_a_fragment_is_the_ptx_figure_per_k_step():
    k = 48
    tv = lk.sm90.wgmma_a_layout(k)
    assert tv.tile == (64, k) and tv.num_values == 8 * (k // 16)
    for T in range(128):
        for j in range(k // 16):                # values 8j..8j+7 are the step's a0..a3 pairs
            for q in range(4):
                for half in range(2):
                    row, col = figure_a(T, q, half)
                    assert coordinate(tv, T, 8 * j + 2 * q + half) == (row, col + 16 * j)


@pytest.mark.parametrize("n, m", [(16, 64), (64, 64), (128, 128), (256, 64)])
def test_accumulator_of_n_columns_is_the_a_fragment_of_k_n(n, m):
    acc, frag = lk.sm90.wgmma_accumulator_layout(n, m), lk.sm90.wgmma_a_layout(n, m)
    assert same_function(acc, frag)
    assert (index_table(acc.layout) == index_table(frag.layout)).all()


def test_same_function_sees_through_representation_and_catches_differences():
    acc = lk.sm90.wgmma_accumulator_layout(16)
    blocked = lk.TVLayout(acc.tile, lk.tv_layout(Layout(128), Layout(8)).layout)
    assert not same_function(acc, blocked)
    nested = Layout(((4, (8, 4)), (2, (2, 2))), ((128, (1, 16)), (64, (8, 512))))
    flat = lk.TVLayout(acc.tile, nested)        # the same function, nested differently
    assert flat != acc and same_function(acc, flat)


def test_warpgroup_stack_moves_each_warpgroup_down_by_its_tile():
    acc = lk.sm90.wgmma_accumulator_layout(64)
    stacked = lk.sm90.warpgroup_stack(acc, 3)
    assert stacked.tile == (192, 64) and stacked.num_threads == 384
    for T in range(384):
        for i in range(0, 32, 5):
            index = stacked.layout(T, i)
            row, col = figure_accumulator(T % 128, i)
            assert (index % 192, index // 192) == (row + 64 * (T // 128), col)


@pytest.mark.parametrize("call, message", [
    (lambda: lk.sm90.wgmma_accumulator_layout(12), "n is 8..256 in steps of 8, got 12"),
    (lambda: lk.sm90.wgmma_accumulator_layout(264), "got 264"),
    (lambda: lk.sm90.wgmma_accumulator_layout(64, m=96), "positive multiple of 64"),
    (lambda: lk.sm90.wgmma_a_layout(24), "k is a positive multiple of 16"),
    (lambda: lk.sm90.warpgroup_stack(lk.sm90.wgmma_accumulator_layout(8), 0), "positive int"),
])
def test_bad_shapes_name_the_rule(call, message):
    with pytest.raises(lk.TraceError, match=message):
        call()
