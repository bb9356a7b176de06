"""lk.sm80.cp_async, lk.sm80.ldmatrix, lk.sm80.mma_sync: the PTX and IR they make, and every mistake
as a specific error with the user's source line."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle, make_layout
from layoutkit.ptx import assemble

from . import source_lines
from .mma_kernels import ATOMS, COPY_MK, one_mma, ragged_copy

BF16, F32 = lk.Pointer[lk.bf16], lk.Pointer[lk.f32]
THIS_FILE = __file__


def line_of(text: str) -> int:
    return source_lines.line_of(THIS_FILE, text)


def ops(fn, name):
    found = []

    def walk(block):
        for op in block.ops:
            if op.name == name:
                found.append(op)
            for inner in op.blocks:
                walk(inner)
    walk(fn.body)
    return found


def test_one_mma_ptx_ldmatrix_trans_derived_from_the_b_tile():
    text = one_mma.ptx(BF16, BF16, F32, False)
    assert "cp.async.cg.shared.global" in text            # a: 16-byte rows
    assert "cp.async.ca.shared.global" in text            # b: 8-byte rows of 8 columns
    assert "cp.async.commit_group;" in text and "cp.async.wait_group 0;" in text
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in text
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in text     # b is n-contiguous
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in text
    kmajor = one_mma.ptx(BF16, BF16, F32, True)
    assert "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in kmajor          # k-contiguous: no .trans
    for t in (text, kmajor):
        usage = assemble(t).resources["one_mma"]
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0


def test_mma_operands_are_the_ldmatrix_registers_unrepacked():
    text = one_mma.ptx(BF16, BF16, F32, False)
    body = [line.strip() for line in text.splitlines()]
    ld = next(line for line in body if line.startswith("ldmatrix") and ".x4" in line)
    mma = next(line for line in body if line.startswith("mma.sync"))
    a_regs = ld[ld.index("{"):ld.index("}") + 1]
    assert a_regs in mma                                   # the same 4 registers, in order


def test_ir_records_bank_conflicts_and_zero_fill():
    fn = one_mma.ir(BF16, BF16, F32, False)
    assert [op.attrs["bank_ways"] for op in ops(fn, "ldmatrix")] == [1, 1]
    copies = ops(fn, "cp_async")
    assert [op.attrs["bytes"] for op in copies] == [16, 8]
    assert all(op.attrs["masked"] is False or op.operands[-1].type == lk.bool_ for op in copies)
    # the k-major (8, 16) b tile has 32-byte rows: 8 rows of one ldmatrix phase hit 4 bank
    # groups twice each
    fn = one_mma.ir(BF16, BF16, F32, True)
    assert [op.attrs["bank_ways"] for op in ops(fn, "ldmatrix")] == [1, 2]


def test_mma_sync_pairs_every_accumulator_atom_with_its_operands():
    fn = one_mma.ir(BF16, BF16, F32, False)
    (mma,) = ops(fn, "mma_sync")
    assert len(mma.operands) == 16 and len(mma.results) == 4
    assert str(mma.attrs["c_layout"]) == "((4,8),(2,2)):((32,1),(16,8))"


def test_ragged_and_narrow_copies():
    # n a multiple of 16: 16-byte cp.async, masked by src-size (zero-fill)
    text = ragged_copy.ptx(BF16, BF16, 20, 32)
    assert "cp.async.cg.shared.global" in text and "selp.u32" in text
    # n odd: rows are only 2-byte aligned; cp.async copies 4 bytes at least -> ld + st.shared
    fn = ragged_copy.ir(BF16, BF16, 20, 21)
    assert not ops(fn, "cp_async") and len(ops(fn, "load")) == 8
    assemble(ragged_copy.ptx(BF16, BF16, 20, 21))


# ---- mistakes ----------------------------------------------------------------------------------

@lk.kernel(num_warps=1)
def acc_in_the_wrong_layout(c: lk.Pointer[lk.f32]):
    sa = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    sb = lk.shared_tensor(Layout((8, 16), (16, 1)), lk.bf16)
    wrong = lk.TVLayout((16, 8), Layout((32, 4), (4, 1)))
    lk.sm80.mma_sync(lk.full(wrong, 0.0), lk.sm80.ldmatrix(sa.partition(ATOMS.a)),  # WRONG ACC
                     lk.sm80.ldmatrix(sb.partition(ATOMS.b)))


def test_mma_sync_accumulator_layout_mismatch_shows_both_layouts():
    with pytest.raises(lk.LayoutMismatchError) as info:
        acc_in_the_wrong_layout.ptx(F32)
    text = str(info.value)
    assert "operand c's values 0..3 in warp 0 are not the m16n8k16 C fragment" in text
    assert "(32,4):(4,1) over tile (16,8)" in text
    assert "((4,8),(2,2)):((32,1),(16,8)) over tile (16,8)" in text
    assert info.value.location.line == line_of("# WRONG ACC")


@lk.kernel(num_warps=1)
def operands_swapped(c: lk.Pointer[lk.f32]):
    sa = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    sb = lk.shared_tensor(Layout((8, 16), (16, 1)), lk.bf16)
    a = lk.sm80.ldmatrix(sa.partition(ATOMS.a))
    b = lk.sm80.ldmatrix(sb.partition(ATOMS.b))
    lk.sm80.mma_sync(lk.full(ATOMS.c, 0.0), b, a)  # SWAPPED


def test_mma_sync_operand_tiles_must_chain():
    with pytest.raises(lk.LayoutMismatchError, match=r"acc over \(M, N\), a over \(M, K\)") \
            as info:
        operands_swapped.ptx(F32)
    assert info.value.location.line == line_of("# SWAPPED")


@lk.kernel(num_warps=1)
def bf16_accumulator(c: lk.Pointer[lk.f32]):
    sa = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    sb = lk.shared_tensor(Layout((8, 16), (16, 1)), lk.bf16)
    lk.sm80.mma_sync(lk.full(ATOMS.c, 0.0, lk.bf16),                                # BF16 ACC
                     lk.sm80.ldmatrix(sa.partition(ATOMS.a)),
                     lk.sm80.ldmatrix(sb.partition(ATOMS.b)))


def test_mma_sync_accumulates_in_f32():
    with pytest.raises(lk.TraceError, match="the accumulator is f32, got bf16") as info:
        bf16_accumulator.ptx(F32)
    assert info.value.location.line == line_of("# BF16 ACC")


@lk.kernel(num_warps=2)
def missing_b_columns(c: lk.Pointer[lk.f32]):
    # two warps, each an (16, 8) accumulator atom: warp w at columns 8w; but b gives both
    # warps columns 0..7
    sa = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    sb = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    acc = lk.TVLayout((16, 16), make_layout(make_layout(ATOMS.c.layout[0], Layout(2, 128)),
                                               ATOMS.c.layout[1]))
    a = lk.TVLayout((16, 16), make_layout(make_layout(ATOMS.a.layout[0], Layout(2, 0)),
                                             ATOMS.a.layout[1]))
    b = lk.TVLayout((16, 16), Layout(((4, 8, 2), (2, 2)), ((32, 1, 0), (16, 128))))
    fa, fb = lk.sm80.ldmatrix(sa.partition(a)), lk.sm80.ldmatrix(sb.partition(b))
    lk.sm80.mma_sync(lk.full(acc, 0.0), fa, fb)  # NO B COLUMNS


def test_mma_sync_needs_every_warps_operands():
    with pytest.raises(lk.LayoutMismatchError, match=r"needs operand b at origins") as info:
        missing_b_columns.ptx(F32)
    assert "[(0, 0), (8, 0)]" in str(info.value)
    assert info.value.location.line == line_of("# NO B COLUMNS")


@lk.kernel(num_warps=1)
def ldmatrix_strided_rows(c: lk.Pointer[lk.f32]):
    sa = lk.shared_tensor(Layout((16, 16), (32, 2)), lk.bf16)     # every other element
    lk.sm80.ldmatrix(sa.partition(ATOMS.a))  # STRIDED


def test_ldmatrix_rejects_a_partition_that_is_no_matrix():
    with pytest.raises(lk.LayoutMismatchError) as info:
        ldmatrix_strided_rows.ptx(F32)
    text = str(info.value)
    assert "values 0 and 1 of the partition are not one register of an 8x8 b16 matrix" in text
    assert "((4,8),(2,2,2)):((32,1),(16,8,128)) over tile (16,16)" in text
    assert "(4,8),2):((16,1),8) over tile (8,8)" in text
    assert info.value.location.line == line_of("# STRIDED")


@lk.kernel(num_warps=1)
def ldmatrix_forced_form(c: lk.Pointer[lk.f32]):
    sa = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    lk.sm80.ldmatrix(sa.partition(ATOMS.a), trans=True)  # FORCED TRANS


def test_ldmatrix_trans_given_must_fit():
    with pytest.raises(lk.LayoutMismatchError, match=r"\(\.trans\) in warp 0") as info:
        ldmatrix_forced_form.ptx(F32)
    assert info.value.location.line == line_of("# FORCED TRANS")


@lk.kernel(num_warps=1)
def ldmatrix_f32(c: lk.Pointer[lk.f32]):
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.f32)
    lk.sm80.ldmatrix(s.partition(ATOMS.a))  # F32 TILE


@lk.kernel(num_warps=1)
def ldmatrix_narrow_swizzle(c: lk.Pointer[lk.f32]):
    s = lk.shared_tensor(ComposedLayout(Swizzle(2, 2, 3), 0, Layout((16, 16), (16, 1))),
                         lk.bf16)
    lk.sm80.ldmatrix(s.partition(ATOMS.a))  # NARROW SWIZZLE


@lk.kernel(num_warps=1)
def ldmatrix_global(a: lk.Pointer[lk.bf16]):
    lk.sm80.ldmatrix(lk.global_tensor(a, Layout((16, 16), (16, 1))).partition(ATOMS.a))  # GLOBAL


@lk.kernel(num_warps=1)
def ldmatrix_x3(c: lk.Pointer[lk.f32]):
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    lk.sm80.ldmatrix(s.partition(ATOMS.a), num=3)  # X3


@lk.kernel(num_warps=1)
def ldmatrix_misaligned_tile(c: lk.Pointer[lk.f32]):
    s = lk.shared_tensor(Layout((16, 20), (20, 1)), lk.bf16)       # 40-byte rows
    lk.sm80.ldmatrix(s.tile((16, 16), (0, 0)).partition(ATOMS.a))  # MISALIGNED


@pytest.mark.parametrize("kernel, arg, marker, error, message", [
    (ldmatrix_f32, F32, "# F32 TILE", lk.TraceError, "16-bit elements .b16.; the tile holds f32"),
    (ldmatrix_narrow_swizzle, F32, "# NARROW SWIZZLE", lk.TraceError,
     r"the tile's swizzle Sw<2,2,3> moves elements inside 16-byte rows"),
    (ldmatrix_global, BF16, "# GLOBAL", lk.TraceError, "partition of a shared tile"),
    (ldmatrix_x3, F32, "# X3", lk.TraceError, r"num=3 matrices per instruction"),
    (ldmatrix_misaligned_tile, F32, "# MISALIGNED", lk.TraceError,
     "not a multiple of 8 elements: matrix rows start at 16-byte boundaries"),
])
def test_ldmatrix_errors(kernel, arg, marker, error, message):
    with pytest.raises(error, match=message) as info:
        kernel.ptx(arg)
    assert info.value.location.line == line_of(marker)


@lk.kernel(num_warps=1)
def copy_layouts_differ(a: lk.Pointer[lk.bf16]):
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    A = lk.global_tensor(a, Layout((16, 16), (16, 1)))
    lk.sm80.cp_async(s.partition(COPY_MK), A.partition(ATOMS.a))  # COPY MISMATCH


@lk.kernel(num_warps=1)
def copy_converts(a: lk.Pointer[lk.f16]):
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    A = lk.global_tensor(a, Layout((16, 16), (16, 1)))
    lk.sm80.cp_async(s.partition(COPY_MK), A.partition(COPY_MK))  # COPY DTYPE


@lk.kernel(num_warps=1)
def wait_too_many(a: lk.Pointer[lk.bf16]):
    lk.sm80.cp_async_wait(256)  # WAIT 256


@lk.kernel(num_warps=1)
def copy_bad_mask(a: lk.Pointer[lk.bf16]):
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    A = lk.global_tensor(a, Layout((16, 16), (16, 1)))
    lk.sm80.cp_async(s.partition(COPY_MK), A.partition(COPY_MK), mask=True)  # BAD MASK


@pytest.mark.parametrize("kernel, arg, marker, error, message", [
    (copy_layouts_differ, BF16, "# COPY MISMATCH", lk.LayoutMismatchError,
     r"different TV layouts\n      dst \(shared\): \(\(2,16\),8\):\(\(128,1\),16\)"),
    (copy_converts, lk.Pointer[lk.f16], "# COPY DTYPE", lk.TraceError,
     "a f16 tile into bf16 shared memory"),
    (wait_too_many, BF16, "# WAIT 256", lk.TraceError, r"pending=256 is the number of groups"),
    (copy_bad_mask, BF16, "# BAD MASK", lk.TraceError, "mask is a bool scalar"),
])
def test_cp_async_errors(kernel, arg, marker, error, message):
    with pytest.raises(error, match=message) as info:
        kernel.ptx(arg)
    assert info.value.location.line == line_of(marker)


def test_ops_outside_a_kernel():
    with pytest.raises(lk.TraceError, match="lk.sm80.cp_async_commit.. is a kernel operation"):
        lk.sm80.cp_async_commit()


@lk.kernel(num_warps=1)
def copy_when(a: lk.Pointer[lk.bf16], n: lk.i32):
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    A = lk.global_tensor(a, Layout((16, 16), (16, 1)), bounds=None)
    lk.sm80.cp_async(s.partition(COPY_MK), A.partition(COPY_MK), mask=lk.cast(n, lk.i32) > 8)
    lk.sm80.cp_async_commit()


def test_cp_async_user_mask_selects_the_source_size():
    fn = copy_when.ir(BF16, 20)
    (copy,) = ops(fn, "cp_async")
    assert copy.attrs["masked"] and copy.operands[-1].type == lk.bool_
    text = copy_when.ptx(BF16, 20)
    assert "selp.u32" in text and "cp.async.cg.shared.global" in text
    assemble(text)
