"""Lowering: index expressions with shared subexpressions (golden PTX), vector width choice,
and PTX of small kernels that ptxas assembles for sm_90a."""
import sympy

from layoutkit.algebra import symbol
from layoutkit.ptx import assemble
from layoutkit.ptx.builder import Module

from layoutkit.dsl.lower.index import IndexLowering

from .kernels import BF16, F32, axpb, axpb_bf16, row_sums

T = sympy.Symbol("tid", integer=True, nonnegative=True)
B = sympy.Symbol("bid_x", integer=True, nonnegative=True)


def lowered(*exprs, ptype="s32"):
    k = Module(line_info=False).kernel("k")
    ix = IndexLowering(k, {T: k.reg("s32"), B: k.reg("s32")})
    results = [ix.emit(e, ptype) for e in exprs]
    return "\n".join(line.strip() for line in k.body_lines()), results


def test_common_subexpressions_are_computed_once():
    text, (a, b, c) = lowered(512 * B + 4 * T, 512 * B + 4 * T + 3, sympy.floor(T / 32) * 4 + 4 * T)
    assert text == "\n".join([
        "shl.b32 %s2, %s1, 9;",           # 512*bid_x  (tid is %s0, bid_x %s1)
        "shl.b32 %s3, %s0, 2;",           # 4*tid
        "add.s32 %s4, %s2, %s3;",
        "add.s32 %s5, %s4, 3;",           # reuses 512*bid_x + 4*tid
        "shr.s32 %s6, %s0, 5;",           # floor(tid/32)
        "shl.b32 %s7, %s6, 2;",
        "add.s32 %s8, %s3, %s7;",         # reuses 4*tid
    ])
    assert str(a) == "%s4" and str(b) == "%s5" and str(c) == "%s8"


def test_non_power_of_two_coefficients_use_mad_and_constant_division_multiplies_high():
    text, _ = lowered(B + 48 * T + sympy.Mod(T, 3) + sympy.floor(T / 6))
    assert "mad.lo.s32" in text and text.count("mul.hi.u32") == 2   # T >= 0: no div / rem
    assert "rem.s32" not in text and "div.s32" not in text


def test_index_widens_32_bit_symbols_once_in_64_bit_expressions():
    text, _ = lowered(4 * T + 8 * T * B, ptype="s64")
    assert text.count("cvt.s64.s32") == 2 and text.count("%s0;") == 1   # each symbol once


def test_symbolic_extent_strides_multiply():
    n = symbol("n", 16)
    k = Module(line_info=False).kernel("k")
    ix = IndexLowering(k, {T: k.reg("s32"), n: k.reg("s32")})
    ix.emit(n * T + 5, "s32")
    assert [line.strip() for line in k.body_lines()] == ["mul.lo.s32 %s2, %s1, %s0;",
                                                         "add.s32 %s3, %s2, 5;"]


def test_f32_axpb_is_vectorized_when_n_is_divisible_by_16():
    ptx = axpb.ptx(F32, F32, 4096, 2.0, 1.0, VALUES=4)
    assert "ld.global.v4.f32" in ptx and "st.global.v4.f32" in ptx
    assert ptx.count("setp.lt.s32") == 1            # one bounds check, shared by load and store
    assemble(ptx)


def test_ragged_n_falls_back_to_masked_scalar_accesses():
    ptx = axpb.ptx(F32, F32, 4095, 2.0, 1.0, VALUES=4)
    assert "v4" not in ptx and ptx.count("ld.global.f32") == 4
    assemble(ptx)


def test_unaligned_pointer_limits_the_vector_to_the_element():
    import numpy as np
    base = np.zeros(64, np.float32)
    unaligned = base[1:] if base.ctypes.data % 16 == 0 else base[:]
    ptx = axpb.ptx(unaligned, F32, 4096, 2.0, 1.0, VALUES=4)
    assert "ld.global.f32" in ptx and "st.global.v4.f32" in ptx


def test_bf16_moves_16_bytes_as_packed_words():
    ptx = axpb_bf16.ptx(BF16, BF16, 8192, 2.0, 1.0)
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert ptx.count("cvt.rn.bf16.f32") == 8 and ptx.count("cvt.f32.bf16") == 8
    assemble(ptx)
    assemble(axpb_bf16.ptx(BF16, BF16, 8191, 2.0, 1.0))


def test_loop_with_carried_tensor_and_branch_assemble():
    ptx = row_sums.ptx(F32, F32, 64, 100)
    assert "$loop_0:" in ptx and "@!%p" in ptx and "bra $loop_0" in ptx
    assert row_sums.resources(F32, F32, 64, 100).registers > 0


def test_line_info_points_at_the_kernel_source():
    ptx = axpb.ptx(F32, F32, 4096, 2.0, 1.0, VALUES=4)
    assert 'kernels.py"' in ptx and ".loc 1 " in ptx
