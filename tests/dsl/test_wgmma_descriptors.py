"""wgmma shared operands: the canonical form found, LBO/SBO and per-instruction start offsets
against values computed by hand from the PTX ISA's canonical layouts, the descriptors in the
PTX, and every refusal (non-canonical strides, foreign swizzles, starts inside a swizzle atom)."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.core.ir import SharedAllocation
from layoutkit.dsl.lang.shared import SharedTensor, swizzle_alignment
from layoutkit.dsl.sm90.wgmma.operands import shared_operand
from layoutkit.ptx.isa.wgmma_descriptor import descriptor

from .wgmma_kernels import ss_gemm


def tile(layout, dtype=lk.bf16, offset=0, align=None, at=0):
    swizzle = layout.outer if isinstance(layout, ComposedLayout) else None
    inner = layout.inner if isinstance(layout, ComposedLayout) else layout
    nbytes = (layout.cosize() if swizzle else inner.cosize()) * dtype.nbytes
    align = align or swizzle_alignment(swizzle, dtype)
    alloc = SharedAllocation("smem0", nbytes, align, at, "test", None)
    return SharedTensor(alloc, dtype, swizzle, inner, offset)


def sw(bits, layout):
    return ComposedLayout(Swizzle(bits, 3, 3), 0, layout)


# (name, role, tile, rows, block, major, mode, LBO bytes, SBO bytes, start bytes per k-step)
CASES = [
    ("K-major 128B A", "A", sw(3, Layout((64, 64), (64, 1))), 64, 64,
     "K", "128B", 16, 1024, [0, 32, 64, 96]),
    ("K-major 64B A, two atom columns", "A", sw(2, Layout((64, (32, 2)), (32, (1, 2048)))), 64,
     64, "K", "64B", 16, 512, [0, 32, 4096, 4128]),
    ("K-major 32B B", "B", sw(1, Layout((32, (16, 2)), (16, (1, 512)))), 32, 32,
     "K", "32B", 16, 256, [0, 1024]),
    ("K-major no swizzle (core matrices)", "A",
     Layout(((8, 8), (8, 2)), ((8, 128), (1, 64))), 64, 64, "K", "none", 128, 256, [0]),
    ("MN-major 128B B (N=128: two 64-wide chunks)", "B",
     sw(3, Layout(((64, 2), 64), ((1, 4096), 64))), 128, 128, "MN", "128B", 8192, 1024,
     [0, 2048, 4096, 6144]),
    ("MN-major 64B A", "A", sw(2, Layout(((32, 2), (8, 2)), ((1, 512), (32, 256)))), 64, 64,
     "MN", "64B", 1024, 512, [0]),
    ("MN-major no swizzle B", "B", Layout(((8, 2), (8, 2)), ((1, 64), (8, 128))), 16, 16,
     "MN", "none", 256, 128, [0]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_descriptor_fields_match_the_hand_computed_canonical_form(case):
    _, role, layout, rows, block, major, mode, lbo, sbo, starts = case
    op = shared_operand("lk.sm90.wgmma", role, tile(layout), rows, block)
    assert (op.major, op.mode, op.lbo, op.sbo) == (major, mode, lbo, sbo)
    got = [2 * start for b, j, start in op.starts if b == 0]
    assert got == starts
    assert op.trans == (0 if major == "K" else 1)


def test_m128_a_tile_has_one_start_per_block_and_k_step():
    op = shared_operand("lk.sm90.wgmma", "A", tile(sw(3, Layout((128, 64), (64, 1)))), 128, 64)
    assert [(b, j, 2 * s) for b, j, s in op.starts] == [
        (0, 0, 0), (1, 0, 8192), (0, 1, 32), (1, 1, 8224), (0, 2, 64), (1, 2, 8256),
        (0, 3, 96), (1, 3, 8288)]


def test_a_ring_stage_is_a_whole_swizzle_period_away():
    import sympy
    s = sympy.Symbol("s", integer=True, nonnegative=True)
    ring = tile(sw(3, Layout((64, 64, 4), (64, 1, 4096))))
    stage = ring.tile((64, 64, 1), (0, 0, s))
    op = shared_operand("lk.sm90.wgmma", "A", stage, 64, 64)
    assert (op.lbo, op.sbo) == (16, 1024) and op.layout.shape == (64, 64)


def test_descriptor_constants_in_the_ptx():
    """K-major 128B: 0x4000004000010000 (SBO 1024, LBO 16, code 1), k16 steps +2 (32 bytes);
    MN-major 128B with N = 256: LBO 8192 -> 0x4000004002000000, k16 steps +128 (2048 bytes)."""
    P = lk.Pointer
    assert descriptor(0, lbo=16, sbo=1024, swizzle="128B") == 0x4000004000010000
    ptx = ss_gemm.ptx(P[lk.bf16], P[lk.bf16], P[lk.f32], 256, M=64, N=256, B_MAJOR="N")
    assert ptx.count("0x4000004000010000;") == 1 and ptx.count("0x4000004002000000;") == 1
    for step in (2, 4, 6, 128, 256, 384):
        assert f", {step};" in ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") == 4
    assert ", 1, 1, 0, 1;" in ptx                                # imm-trans-b = 1 (N-major)


# ---- refusals ----------------------------------------------------------------------------------
def refused(role, tensor, rows, block, kdim=None):
    with pytest.raises(lk.DSLError) as info:
        shared_operand("lk.sm90.wgmma", role, tensor, rows, block, kdim)
    return str(info.value)


def test_padded_rows_are_not_canonical_and_the_form_is_named():
    text = refused("A", tile(Layout((64, 64), (72, 1))), 64, 64)
    assert "element (r=1, k=0) is 72 elements" in text
    assert "K-major, no swizzle: 8x16-byte core matrices" in text and "puts it at 8" in text


def test_rows_wider_than_the_swizzle_row_are_refused():
    text = refused("B", tile(sw(3, Layout((64, 128), (128, 1)))), 64, 64)
    assert "K-major, 128B swizzle: rows of 64 elements" in text
    assert "element (r=1, k=0) is 128 elements" in text


def test_a_foreign_swizzle_lists_the_wgmma_swizzles_of_the_type():
    text = refused("A", tile(ComposedLayout(Swizzle(3, 4, 3), 0, Layout((64, 64), (64, 1)))),
                   64, 64)
    assert "swizzle Sw<3,4,3> is not a wgmma swizzle" in text
    assert "Sw<1,3,3> (32B), Sw<2,3,3> (64B), Sw<3,3,3> (128B)" in text


def test_a_start_inside_a_swizzle_atom_is_refused():
    whole = tile(sw(3, Layout((72, 64), (64, 1))))
    shifted = SharedTensor(whole.alloc, lk.bf16, whole.swizzle, Layout((64, 64), (64, 1)), 64)
    text = refused("A", shifted, 64, 64)
    assert "starts at element 64 of smem0" in text and "multiple of 512 elements" in text


def test_a_swizzled_view_of_an_unaligned_buffer_is_refused():
    text = refused("A", tile(sw(3, Layout((64, 64), (64, 1))), align=16, at=16), 64, 64)
    assert "aligned to 16 bytes; the 128B swizzle repeats every 1024 bytes" in text


def test_neither_k_nor_mn_major():
    text = refused("A", tile(Layout((64, 16), (2, 128))), 64, 64)
    assert "neither K-major" in text and "element (0, 1) is 128" in text


def test_shapes_must_match_the_accumulator_and_the_other_operand():
    assert "must be a (128, 64) tile (N x K), got (64, 64)" in \
        refused("B", tile(sw(3, Layout((64, 64), (64, 1)))), 128, 128, 64)
    assert "is a rank-2 tile" in refused("A", tile(Layout((8, 8, 4), (1, 8, 64))), 8, 8)
