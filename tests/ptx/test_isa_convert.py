"""isa.convert: cvt rules, packed bf16x2 operand order, mov/pack/unpack; ptxas and refusals."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXTypeError
from layoutkit.ptx.isa import convert
from tests.ptx.ptxas_helper import assemble, written, written_regs


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k")


def test_golden():
    m, k = kernel()
    smem = m.extern_shared()
    x0, x1 = k.reg("f32"), k.reg("f32")
    s = k.reg("s32")
    convert.cvt_pack(k, hi=x1, lo=x0)
    convert.cvt(k, s, "f32", rounding="rn")
    convert.cvt(k, x0, "s32", rounding="rzi")
    convert.cvt(k, x0, "bf16", rounding="rn", relu=True)
    convert.cvt(k, s, "u64")
    convert.mov(k, smem)
    convert.mov(k, x0, dtype="b32")
    lo, hi = convert.unpack(k, convert.pack(k, (k.reg("u32"), k.reg("u32"))))
    assert k.body_lines() == [
        "    cvt.rn.bf16x2.f32 %bff0, %f1, %f0;",
        "    cvt.rn.f32.s32 %f2, %s0;",
        "    cvt.rzi.s32.f32 %s1, %f0;",
        "    cvt.rn.relu.bf16.f32 %bf0, %f0;",
        "    cvt.u64.s32 %ud0, %s0;",
        "    mov.u32 %u0, smem;",
        "    mov.b32 %r0, %f0;",
        "    mov.b64 %rd0, {%u1, %u2};",
        "    mov.b64 {%r1, %r2}, %rd0;",
    ]
    assert (lo.type.name, hi.type.name) == ("b32", "b32")


def test_every_form_assembles():
    m, k = kernel()
    for src in convert.CVT_INT + convert.CVT_FLOAT:
        a = written(k, src)
        for dst in convert.CVT_INT + convert.CVT_FLOAT:
            allowed, required = convert._rounding_rule(a.type, written(k, dst).type)
            for rounding in allowed + (() if required else (None,)):
                convert.cvt(k, a, dst, rounding=rounding)
    f = written(k, "f32")
    convert.cvt(k, f, "f32", rounding="rni", ftz=True, sat=True)
    convert.cvt(k, f, "f16", rounding="rn", relu=True)
    convert.cvt(k, f, "s32", rounding="rmi", ftz=True)
    convert.cvt_pack(k, f, f, "bf16x2", rounding="rz", relu=True)
    convert.cvt_pack(k, f, f, "f16x2")
    convert.cvt(k, written(k, "b32"), "f32", src_type="s32", rounding="rn")
    for t in convert.MOV_TYPES:
        a = written(k, t)
        convert.mov(k, a)
    convert.mov(k, 3, dtype="u64"); convert.mov(k, -1.0, dtype="f64"); convert.mov(k, 0x3C00, dtype="b16")
    convert.mov(k, written(k, "bf16x2"))
    h = convert.pack(k, (written(k, "f16"), written(k, "bf16")))
    convert.unpack(k, h, part_type="f16")
    convert.unpack(k, written(k, "b64"), 4)
    convert.pack(k, written_regs(k, "b16", 4))
    convert.pack(k, convert.unpack(k, written(k, "b32"), 4))
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: convert.cvt(k, k.reg("s32"), "f32"), PTXBuildError,
     r"cvt.f32.s32: operand rounding = None: needs a rounding mode, one of rn, rz, rm, rp"),
    (lambda k: convert.cvt(k, k.reg("f32"), "s32", rounding="rn"), PTXBuildError,
     r"cvt.s32.f32: operand rounding = 'rn': must be one of 'rni'"),
    (lambda k: convert.cvt(k, k.reg("f16"), "f32", rounding="rn"), PTXBuildError,
     "takes no rounding mode"),
    (lambda k: convert.cvt(k, k.reg("f64"), "f16"), PTXBuildError, "needs a rounding mode"),
    (lambda k: convert.cvt(k, k.reg("f64"), "f16", rounding="rn", ftz=True), PTXBuildError,
     ".ftz applies only when the source or destination is .f32"),
    (lambda k: convert.cvt(k, k.reg("f32"), "f64", relu=True), PTXBuildError, ".relu exists only"),
    (lambda k: convert.cvt(k, k.reg("b32"), "f32", rounding="rn"), PTXTypeError,
     "the type must be one of .u8"),
    (lambda k: convert.cvt(k, 3, "f32", rounding="rn", src_type="s32"), PTXTypeError,
     "must be a register of type .s32"),
    (lambda k: convert.cvt_pack(k, k.reg("f32"), k.reg("f16")), PTXTypeError,
     r"operand lo = %h0 \(.f16\): a .f16 register cannot be used as .f32"),
    (lambda k: convert.cvt_pack(k, k.reg("f32"), k.reg("f32"), "f16x2", rounding="rz"), PTXBuildError,
     "must be one of 'rn'"),
    (lambda k: convert.mov(k, 1), PTXTypeError, "cannot be inferred"),
    (lambda k: convert.mov(k, k.reg("u8")), PTXTypeError, "the type must be one of .pred"),
    (lambda k: convert.pack(k, (k.reg("u32"),)), PTXTypeError, "packs 2 or 4 registers"),
    (lambda k: convert.pack(k, (k.reg("u32"), k.reg("u16"))), PTXTypeError,
     r"operand parts\[1\] = %us0 \(.u16\): a .u16 register cannot be used as .b32"),
    (lambda k: convert.unpack(k, k.reg("b32"), 3), PTXBuildError, "operand count = 3"),
    (lambda k: convert.unpack(k, k.reg("b32"), 2, part_type="f32"), PTXTypeError,
     "2 parts of .f32 do not make .b32"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_convert.py" in str(info.value)


def test_mov_param_symbol_is_64bit():
    m, k = kernel()
    p = k.tensormap_param("tmap")
    with pytest.raises(PTXTypeError, match="the address of a .param symbol is 64-bit"):
        convert.mov(k, p.symbol, dtype="u32")
