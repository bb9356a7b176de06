"""Bank conflicts of shared-memory access patterns: hand-worked examples, invariants, errors."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, strategies as st

from layoutkit.algebra import (BankReport, ComposedLayout, Layout, LayoutError, Swizzle,
                               bank_conflicts, make_layout_tv, symbol)
from layoutkit.algebra.banks import banks_touched, lanes_per_phase, warp_phases
from tests.algebra.strategies import settings_for

PROPS = settings_for(200)

BF16_TILE = Layout((8, 64), (64, 1))                       # 8 rows of 128 bytes
SW128 = ComposedLayout(Swizzle(3, 3, 3), 0, BF16_TILE)      # the 128-byte swizzle, on elements
SW128_BYTES = ComposedLayout(Swizzle(3, 4, 3), 0, Layout((8, 64), (128, 2)))  # ... on bytes
# 64 threads, 16 bytes (8 bf16) each, over the (8, 64) tile:
_, BY_COLUMNS = make_layout_tv(Layout((8, 8), (1, 8)), Layout((1, 8)))   # t: row t%8, chunk t//8
_, BY_ROWS = make_layout_tv(Layout((8, 8), (8, 1)), Layout((1, 8)))      # t: row t//8, chunk t%8


# ---- hand-worked examples ------------------------------------------------------------------------

def test_f32_32x32_row_major_read_by_column_is_32_way():
    # Thread t holds row t; access v reads column v: word 32t + v, bank v for every thread.
    report = bank_conflicts(Layout((32, 32), (32, 1)), Layout((32, 32), (1, 32)), dtype_bytes=4)
    assert (report.degree, report.wavefronts, report.ideal_wavefronts) == (32, 32 * 32, 32)
    for v, phase in enumerate(report.phases):
        assert (phase.access, phase.threads) == (v, tuple(range(32)))
        assert phase.words == tuple(32 if b == v else 0 for b in range(32))
        assert phase.banks[v] == tuple(range(32)) and phase.conflicts == (v,)


def test_f32_32x32_padded_by_one_is_conflict_free():
    # Row stride 33 words: thread t's column v is word 33t + v, bank (t + v) % 32.
    report = bank_conflicts(Layout((32, 32), (33, 1)), Layout((32, 32), (1, 32)), dtype_bytes=4)
    assert report.conflict_free and report.wavefronts == report.ideal_wavefronts == 32
    for v, phase in enumerate(report.phases):
        assert phase.banks == tuple(((b - v) % 32,) for b in range(32))


def test_f32_32x32_row_major_read_by_row_is_conflict_free():
    # tv(t, v) = v + 32 t: thread t holds column t, access v reads row v: bank t.
    report = bank_conflicts(Layout((32, 32), (32, 1)), Layout((32, 32), (32, 1)), dtype_bytes=4)
    assert report.degree == 1
    assert all(p.banks == tuple((b,) for b in range(32)) for p in report.phases)


def test_bf16_plain_tile_read_by_columns_16_bytes_a_thread_is_8_way():
    # Quarter-warp p reads chunk p of rows 0..7: 8 rows 128 bytes apart, all on banks 4p..4p+3.
    report = bank_conflicts(BF16_TILE, BY_COLUMNS, dtype_bytes=2, access_bytes=16)
    assert (report.degree, report.wavefronts, report.ideal_wavefronts) == (8, 64, 8)
    for phase in report.phases:
        p = phase.index + 4 * phase.warp
        assert phase.conflicts == tuple(range(4 * p, 4 * p + 4))
        assert all(phase.words[b] == 8 for b in phase.conflicts)


@pytest.mark.parametrize("smem, in_bytes", [(SW128, False), (SW128_BYTES, True)])
def test_bf16_128_byte_swizzle_is_conflict_free_by_rows_and_by_columns(smem, in_bytes):
    for tv in (BY_ROWS, BY_COLUMNS):
        report = bank_conflicts(smem, tv, dtype_bytes=2, access_bytes=16, offsets_in_bytes=in_bytes)
        assert (report.degree, report.wavefronts) == (1, 8)
    # By columns, thread 8p + r reads chunk p of row r, which the swizzle puts at chunk p ^ r.
    report = bank_conflicts(smem, BY_COLUMNS, dtype_bytes=2, access_bytes=16,
                            offsets_in_bytes=in_bytes)
    for phase in report.phases:
        p = phase.index + 4 * phase.warp
        for r in range(8):
            for i in range(4):
                assert phase.banks[4 * (p ^ r) + i] == (8 * p + r,)


def test_bf16_plain_tile_read_by_rows_is_conflict_free():
    assert bank_conflicts(BF16_TILE, BY_ROWS, dtype_bytes=2, access_bytes=16).degree == 1


def test_the_byte_swizzle_on_element_offsets_is_not_the_128_byte_swizzle():
    # Sw<3,4,3> XORs bits 7..9 into 4..6: on bf16 element offsets it moves 32-byte halves by
    # row // 2, so rows 2k and 2k+1 collide: 2-way. On element offsets the swizzle is Sw<3,3,3>.
    wrong = ComposedLayout(Swizzle(3, 4, 3), 0, BF16_TILE)
    assert bank_conflicts(wrong, BY_COLUMNS, dtype_bytes=2, access_bytes=16).degree == 2


def test_8_byte_accesses_are_served_by_half_warps():
    assert lanes_per_phase(8) == 16
    dense = warp_phases([8 * t for t in range(32)], 8)         # 2 x 128 contiguous bytes
    assert [(p.threads[0], p.degree) for p in dense] == [(0, 1), (16, 1)]
    spread = warp_phases([16 * t for t in range(32)], 8)       # each half-warp spans 256 bytes
    assert [p.degree for p in spread] == [2, 2]


def test_narrow_accesses_share_words_and_do_not_conflict():
    assert warp_phases(list(range(32)), 1)[0].degree == 1      # 32 bytes: 8 words, 4 lanes each
    phase = warp_phases([2 * t for t in range(32)], 2)[0]
    assert phase.degree == 1 and phase.banks[0] == (0, 1) and phase.words[:17] == (1,) * 16 + (0,)
    assert warp_phases([128 * t for t in range(32)], 2)[0].degree == 32


def test_inactive_lanes_and_partial_warps():
    phases = warp_phases([0, None, 128, None], 4)
    assert len(phases) == 1 and phases[0].threads == (0, 2) and phases[0].degree == 2
    assert warp_phases([None] * 8, 16) == ()
    report = bank_conflicts(Layout(8, 32), Layout((8, 1), (1, 0)), dtype_bytes=4)  # 8 threads
    assert report.threads == 8 and report.degree == 8 and len(report.phases) == 1


def test_banks_touched_by_one_access():
    assert banks_touched(124, 4) == ((31, 31),)
    assert banks_touched(112, 16) == ((28, 28), (29, 29), (30, 30), (31, 31))
    assert banks_touched(128 + 8, 8) == ((2, 34), (3, 35))
    assert banks_touched(7, 1) == ((1, 1),)


def test_a_tv_object_with_a_layout_attribute_is_accepted():
    class TV:
        layout = BY_COLUMNS
        tile = (8, 64)
    assert bank_conflicts(SW128, TV(), dtype_bytes=2, access_bytes=16).degree == 1


def test_table_lists_phases_and_the_conflicted_banks():
    report = bank_conflicts(BF16_TILE, BY_COLUMNS, dtype_bytes=2, access_bytes=16)
    text = report.table()
    assert str(report) == text
    lines = text.splitlines()
    assert lines[0] == ("bank conflicts of (8,64):(64,1) (2-byte elements) under TV layout "
                        "((8,8),8):((1,64),8)")
    assert "phases of 8 threads" in lines[1] and "worst 8-way bank conflict" in lines[1]
    assert "64 wavefronts (ideal 8)" in lines[1]
    assert lines[3].split() == ["0", "0", "0", "0-7", "8", "8888" + "." * 28]
    assert lines[4].split() == ["banks", "0-3:", "8", "words", "each,", "threads", "0-7"]
    short = report.table(max_phases=2, detail=False)
    assert short.splitlines()[-1] == "... 6 more phases (table(max_phases=8) lists all)"
    assert report.phases[0].describe().splitlines() == [
        "access 0, warp 0, phase 0 (threads 0-7): 8-way",
        "  banks 0-3:    8 words each, threads 0-7"]
    free = bank_conflicts(SW128, BY_COLUMNS, dtype_bytes=2, access_bytes=16)
    assert free.phases[1].describe().splitlines()[1:3] == [
        "  banks 0-3:    1 word each, thread 9", "  banks 4-7:    1 word each, thread 8"]
    broadcast = bank_conflicts(Layout(32, 1), Layout((32, 1), (0, 0)), dtype_bytes=4)
    assert broadcast.phases[0].describe().splitlines()[1] == "  bank 0:       1 word, threads 0-31"
    wide = bank_conflicts(Layout((32, 32), (32, 1)), Layout((32, 32), (1, 32)), dtype_bytes=4)
    assert wide.table().splitlines()[3].split()[-1] == "w" + "." * 31   # w = 32 words


# ---- invariants ----------------------------------------------------------------------------------

WIDTHS = st.sampled_from([1, 2, 4, 8, 16])


@st.composite
def warp_requests(draw):
    """(access_bytes, addresses of up to 32 lanes): aligned byte addresses in a 4 KiB buffer."""
    width = draw(WIDTHS)
    lanes = draw(st.integers(1, 32))
    slots = draw(st.lists(st.integers(0, 4096 // width - 1), min_size=lanes, max_size=lanes))
    return width, [s * width for s in slots]


def reference_degree(addresses, width) -> int:
    """Most distinct words of one bank, counted straight from the bank rule."""
    words = {w for a in addresses for w in range(a // 4, a // 4 + max(1, width // 4))}
    return max(sum(1 for w in words if w % 32 == b) for b in range(32))


@PROPS
@given(warp_requests())
def test_each_phase_degree_is_between_1_and_its_lanes_and_follows_the_rule(request):
    width, addresses = request
    per = lanes_per_phase(width)
    phases = warp_phases(addresses, width)
    assert len(phases) == -(-len(addresses) // per)
    for p, start in zip(phases, range(0, len(addresses), per)):
        group = addresses[start:start + per]
        # a lane's words are consecutive, so each lane adds at most one word to a bank
        assert 1 <= p.degree <= per <= 32
        assert p.degree == reference_degree(group, width)
        assert p.threads == tuple(range(start, start + len(group)))


@PROPS
@given(warp_requests(), st.randoms(use_true_random=False))
def test_permuting_threads_within_a_phase_keeps_its_degree(request, rnd):
    width, addresses = request
    per = lanes_per_phase(width)
    shuffled = []
    for start in range(0, len(addresses), per):
        group = addresses[start:start + per]
        rnd.shuffle(group)
        shuffled += group
    before = [p.degree for p in warp_phases(addresses, width)]
    after = [p.degree for p in warp_phases(shuffled, width)]
    assert before == after


@PROPS
@given(WIDTHS, st.integers(0, 1023), st.integers(1, 32), st.data())
def test_reads_within_one_word_are_a_broadcast(width, word, lanes, data):
    # Every lane reads the same 4-byte word (at any aligned byte of it, for narrow accesses), or
    # the same 8/16-byte vector.
    base = word * 4 if width <= 4 else word * 16
    offsets = st.sampled_from(range(0, 4, width)) if width <= 4 else st.just(0)
    addresses = [base + data.draw(offsets) for _ in range(lanes)]
    assert all(p.degree == 1 for p in warp_phases(addresses, width))


@PROPS
@given(st.integers(1, 32), st.integers(0, 5))
def test_a_power_of_two_word_stride_conflicts_as_the_rule_predicts(lanes, log_stride):
    # 4-byte accesses at a stride of 2**k words: the lanes fold onto 32 / 2**k banks.
    stride = 1 << log_stride
    phase = warp_phases([4 * stride * t for t in range(lanes)], 4)[0]
    assert phase.degree == -(-lanes // (32 // stride))


@PROPS
@given(st.integers(0, 3), st.sampled_from([4, 8, 16]), st.integers(1, 4))
def test_report_totals_add_up_over_phases(log_rows, width, accesses):
    rows = 1 << log_rows
    dtype = 4
    vec = width // dtype
    smem = Layout((rows * 8, 32), (32, 1))                     # row-major f32
    tv = Layout((rows * 8, vec * accesses), (1, rows * 8))     # thread t: row t, columns 0, 1, ...
    report = bank_conflicts(smem, tv, dtype_bytes=dtype, access_bytes=width)
    assert isinstance(report, BankReport)
    assert report.wavefronts == sum(p.degree for p in report.phases) >= report.ideal_wavefronts
    assert report.degree == max(p.degree for p in report.phases)
    assert len(report.phases) == accesses * -(-(rows * 8) // lanes_per_phase(width))


# ---- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: bank_conflicts(BF16_TILE, BY_ROWS, dtype_bytes=2, access_bytes=12),
     r"access_bytes must be one of \(1, 2, 4, 8, 16\).*got 12"),
    (lambda: bank_conflicts(BF16_TILE, BY_ROWS, dtype_bytes=3), r"dtype_bytes must be 1, 2, 4, 8 or 16, got 3"),
    (lambda: bank_conflicts(BF16_TILE, BY_ROWS, dtype_bytes=4, access_bytes=2),
     r"access_bytes 2 is less than one 4-byte element"),
    (lambda: bank_conflicts(BF16_TILE, Layout((8, 12), (1, 8)), dtype_bytes=2, access_bytes=16),
     r"each thread holds 12 values, not a multiple of the 8 elements"),
    (lambda: bank_conflicts(Layout((8, 64)), BY_ROWS, dtype_bytes=2, access_bytes=16),
     r"thread 0's values 0..7 lie at byte offsets \[0, 16, 32.*not 8 consecutive 2-byte elements"),
    (lambda: bank_conflicts(ComposedLayout(Layout(64, 1), 4, Layout(8, 1)), Layout((1, 8), (0, 1)),
                            dtype_bytes=2, access_bytes=16),
     r"thread 0's access 0 at byte offset 8 is not 16-byte aligned"),
    (lambda: bank_conflicts(Layout(8), Layout((4, 4), (1, 4)), dtype_bytes=4),
     r"maps \(thread 0, value 2\) to index 8, outside smem 8:1 of 8 elements"),
    (lambda: bank_conflicts(Layout((symbol("M", 8), 8)), Layout((4, 4)), dtype_bytes=4),
     r"size of \(M,8\):\(1,M\) is symbolic.*subs"),
    (lambda: bank_conflicts(Layout(64), Layout((4, 4), (symbol("K", 4), 1)), dtype_bytes=4),
     r"strides of \(4,4\):\(K,1\) is symbolic"),
    (lambda: bank_conflicts(Layout(64), Layout(16), dtype_bytes=4), r"tv must be a rank-2 Layout"),
    (lambda: bank_conflicts((8, 8), Layout((4, 4)), dtype_bytes=4), r"smem must be a Layout"),
    (lambda: banks_touched(8, 16), r"16-byte access at byte address 8 is misaligned"),
    (lambda: banks_touched(-4, 4), r"non-negative int, got -4"),
    (lambda: warp_phases([0] * 33, 4), r"32 lanes, got 33 addresses"),
    (lambda: warp_phases([0, 4], 4, threads=[1]), r"1 thread ids for 2 addresses"),
    (lambda: lanes_per_phase(32), r"access_bytes must be one of"),
])
def test_errors_name_the_argument_and_the_rule(call, message):
    with pytest.raises(LayoutError, match=message):
        call()


def test_randomised_phase_membership_matches_warp_split():
    rng = random.Random(7)
    addresses = [rng.randrange(0, 1024) * 16 for _ in range(32)]
    phases = warp_phases(addresses, 16, warp=3)
    assert [p.threads for p in phases] == [tuple(range(96 + 8 * k, 104 + 8 * k)) for k in range(4)]
    assert all(p.warp == 3 for p in phases)
