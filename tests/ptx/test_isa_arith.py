"""isa.arith and isa.bits: golden text, ptxas acceptance of every form, and every refusal."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXRangeError, PTXTypeError
from layoutkit.ptx.isa import arith, bits
from tests.ptx.ptxas_helper import assemble, requires_ptxas, written, written_regs


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k")


def test_golden_main_forms():
    m, k = kernel()
    f, g = k.reg("f32"), k.reg("f32")
    u, s = k.reg("u32"), k.reg("s32")
    arith.add(k, f, g, ftz=True)
    arith.fma(k, f, g, -1.5, ftz=True)
    arith.mul_wide(k, u, 4)
    arith.mul(k, s, s)
    arith.mad(k, u, u, u, mode="hi")
    arith.add(k, s, 1, sat=True)
    arith.div(k, f, g, rounding="full")
    arith.max_(k, f, g, nan=True)
    arith.neg(k, f)
    bits.shr(k, u, 5)
    bits.and_(k, u, 0xFFFF0000)
    bits.bfe(k, s, 3, 4)
    assert k.body_lines() == [
        "    add.ftz.f32 %f2, %f0, %f1;",
        "    fma.rn.ftz.f32 %f3, %f0, %f1, 0fBFC00000;",
        "    mul.wide.u32 %ud0, %u0, 4;",
        "    mul.lo.s32 %s1, %s0, %s0;",
        "    mad.hi.u32 %u1, %u0, %u0, %u0;",
        "    add.sat.s32 %s2, %s0, 1;",
        "    div.full.f32 %f4, %f0, %f1;",
        "    max.NaN.f32 %f5, %f0, %f1;",
        "    neg.f32 %f6, %f0;",
        "    shr.u32 %u2, %u0, 5;",
        "    and.b32 %u3, %u0, 0xFFFF0000;",
        "    bfe.s32 %s3, %s0, 3, 4;",
    ]


@requires_ptxas
def test_every_form_assembles():
    m, k = kernel()
    for t in arith.INT:
        a, b = written(k, t), written(k, t)
        arith.add(k, a, b); arith.sub(k, a, 7); arith.mul(k, a, b); arith.mul_hi(k, a, b)
        arith.mad(k, a, b, a); arith.div(k, a, b); arith.rem(k, a, b)
        arith.min_(k, a, b); arith.max_(k, a, 3)
        if t.startswith("s"):
            arith.neg(k, a); arith.abs_(k, a)
        if t in ("u16", "u32", "s16", "s32"):
            arith.mul_wide(k, a, b); arith.mad(k, a, b, arith.mul_wide(k, a, b), mode="wide")
        bits.shr(k, a, 3)
    s = written(k, "s32")
    arith.add(k, s, s, sat=True); arith.sub(k, s, s, sat=True); arith.mad(k, s, s, s, mode="hi", sat=True)
    for t in ("f32", "f64"):
        a, b = written(k, t), written(k, t)
        for r in (None,) + arith.ROUNDING:
            arith.add(k, a, b, rounding=r); arith.sub(k, a, 2.0, rounding=r); arith.mul(k, a, b, rounding=r)
        for r in arith.ROUNDING:
            arith.fma(k, a, b, a, rounding=r)
            arith.div(k, a, b, rounding=r)
        arith.min_(k, a, b); arith.max_(k, a, b); arith.neg(k, a); arith.abs_(k, a)
    f = written(k, "f32")
    arith.add(k, f, f, ftz=True, sat=True); arith.fma(k, f, f, f, ftz=True, sat=True)
    arith.div(k, f, f, rounding="approx", ftz=True); arith.min_(k, f, f, ftz=True, nan=True)
    arith.neg(k, f, ftz=True); arith.abs_(k, f, ftz=True)
    for t in arith.HALF:
        a = written(k, t)
        arith.add(k, a, a); arith.sub(k, a, a, rounding="rn"); arith.mul(k, a, a)
        arith.fma(k, a, a, a); arith.min_(k, a, a); arith.max_(k, a, a, nan=True)
        arith.neg(k, a); arith.abs_(k, a)
        if t.startswith("f16"):
            arith.add(k, a, a, ftz=True, sat=True); arith.fma(k, a, a, a, ftz=True, sat=True)
    for t in ("b16", "b32", "b64", "pred"):
        a = written(k, t)
        bits.and_(k, a, a); bits.or_(k, a, a); bits.xor(k, a, a); bits.not_(k, a)
        if t != "pred":
            bits.shl(k, a, 1); bits.shr(k, a, written(k, "u32"))
    for t in ("b32", "b64"):
        a = written(k, t)
        bits.popc(k, a); bits.clz(k, a); bits.brev(k, a); bits.bfi(k, a, a, 8, 4)
    for t in ("u32", "u64", "s32", "s64"):
        bits.bfe(k, written(k, t), 0, 8)
    assemble(m.text())


def test_inferred_result_types_follow_the_operands():
    m, k = kernel()
    u = k.reg("u32")
    assert bits.and_(k, u, 1).type.name == "u32"
    assert bits.popc(k, u).type.name == "u32"
    assert arith.mul_wide(k, k.reg("s16"), 3).type.name == "s32"


@pytest.mark.parametrize("build, error, message", [
    (lambda k: arith.add(k, 1, 2), PTXTypeError, "cannot be inferred from immediates alone"),
    (lambda k: arith.add(k, k.reg("b32"), 1), PTXTypeError, r"add: operand type = 'b32': the type must be one of .u16"),
    (lambda k: arith.add(k, k.reg("u32"), k.reg("f32")), PTXTypeError,
     r"add: operand b = %f0 \(.f32\): a .f32 register cannot be used as .u32"),
    (lambda k: arith.add(k, k.reg("u32"), 1 << 32), PTXRangeError, r"operand b = 4294967296: does not fit .u32"),
    (lambda k: arith.add(k, k.reg("u32"), 1.5), PTXTypeError, "a float immediate cannot be used as .u32"),
    (lambda k: arith.add(k, k.reg("f32"), 1e39), PTXRangeError, "overflows .f32"),
    (lambda k: arith.add(k, k.reg("f16"), 1.0), PTXTypeError, "PTX has no .f16 immediates"),
    (lambda k: arith.add(k, k.reg("u32"), 1, sat=True), PTXBuildError, ".sat on integers exists only"),
    (lambda k: arith.add(k, k.reg("u32"), 1, ftz=True), PTXBuildError, "apply to float types only"),
    (lambda k: arith.add(k, k.reg("f64"), 1.0, ftz=True), PTXBuildError, ".ftz exists only for .f32"),
    (lambda k: arith.add(k, k.reg("bf16"), k.reg("bf16"), rounding="rz"), PTXBuildError,
     r"add.bf16: operand rounding = 'rz': must be one of 'rn'"),
    (lambda k: arith.add(k, k.reg("bf16"), k.reg("bf16"), sat=True), PTXBuildError, ".sat exists only"),
    (lambda k: arith.add(k, k.reg("f32"), 1.0, ftz=1), PTXTypeError, "operand ftz = 1: must be True or False"),
    (lambda k: arith.mul(k, k.reg("u32"), 2, mode="middle"), PTXBuildError, "must be one of 'lo', 'hi', 'wide'"),
    (lambda k: arith.mul_wide(k, k.reg("u64"), 2), PTXBuildError, ".wide takes 16- or 32-bit sources"),
    (lambda k: arith.mul(k, k.reg("f32"), 2.0, mode="hi"), PTXBuildError, "apply to integer types only"),
    (lambda k: arith.mad(k, k.reg("f32"), 1.0, 1.0), PTXBuildError, "float multiply-add is fma"),
    (lambda k: arith.fma(k, k.reg("u32"), 1, 1), PTXBuildError, "fma is a float instruction"),
    (lambda k: arith.fma(k, k.reg("f32"), 1.0, 1.0, rounding=None), PTXBuildError, "fma.f32 needs a rounding mode"),
    (lambda k: arith.div(k, k.reg("f32"), 1.0), PTXBuildError, "div.f32 needs a rounding mode, one of approx, full"),
    (lambda k: arith.div(k, k.reg("f64"), 1.0, rounding="approx"), PTXBuildError, "must be one of 'rn'"),
    (lambda k: arith.div(k, k.reg("f16"), k.reg("f16")), PTXTypeError, "must be one of .f32, .f64"),
    (lambda k: arith.rem(k, k.reg("f32"), 1.0), PTXTypeError, "must be one of .u16"),
    (lambda k: arith.min_(k, k.reg("u32"), 1, nan=True), PTXBuildError, ".NaN exists only"),
    (lambda k: arith.neg(k, k.reg("u32")), PTXTypeError, "must be one of .s16, .s32"),
    (lambda k: bits.and_(k, k.reg("f32"), k.reg("f32")), PTXTypeError, "must be one of .pred, .b16"),
    (lambda k: bits.shl(k, k.reg("u32"), k.reg("u64")), PTXTypeError,
     r"shl: operand amount = %ud0 \(.u64\): a .u64 register cannot be used as .u32"),
    (lambda k: bits.bfe(k, k.reg("b32"), 0, 1), PTXTypeError, "must be one of .u32, .u64, .s32"),
    (lambda k: bits.popc(k, k.reg("u16")), PTXTypeError, "must be one of .b32, .b64"),
    (lambda k: arith.add(k, k.reg("f32"), 1.0, out=k.reg("u32")), PTXTypeError,
     "a .u32 register cannot receive a .f32 result"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_arith.py" in str(info.value)


def test_bf16_add_needs_sm90():
    m, k = kernel(target="sm_80")
    with pytest.raises(PTXBuildError, match="add.bf16: needs sm_90 or newer, the module targets sm_80"):
        arith.add(k, k.reg("bf16"), k.reg("bf16"))
    arith.fma(k, k.reg("bf16"), k.reg("bf16"), k.reg("bf16"))
