"""isa.convert's fp8 forms: cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 and cvt.rn.f16x2.{e4m3x2,e5m2x2}
(operand order, the .b16 pair, ptxas), the .b8 pair moves, and the refusals."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXTypeError
from layoutkit.ptx.isa import convert
from tests.ptx.ptxas_helper import assemble, requires_ptxas, written


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k")


def test_golden():
    m, k = kernel()
    x0, x1 = k.reg("f32"), k.reg("f32")
    pair = convert.cvt_pack_fp8(k, hi=x1, lo=x0)
    lo, hi = convert.unpack(k, pair, 2)
    halves = convert.cvt_unpack_fp8(k, convert.pack(k, (lo, hi)), "e5m2x2")
    convert.cvt_pack_fp8(k, x0, x1, "e5m2x2", relu=True)
    assert k.body_lines() == [
        "    cvt.rn.satfinite.e4m3x2.f32 %rs0, %f1, %f0;",
        "    mov.b16 {%bc0, %bc1}, %rs0;",
        "    mov.b16 %rs1, {%bc0, %bc1};",
        "    cvt.rn.f16x2.e5m2x2 %hh0, %rs1;",
        "    cvt.rn.satfinite.relu.e5m2x2.f32 %rs2, %f0, %f1;",
    ]
    assert (pair.type.name, lo.type.name, halves.type.name) == ("b16", "b8", "f16x2")


@requires_ptxas
def test_every_form_assembles():
    m, k = kernel()
    f = written(k, "f32")
    for pair in convert.FP8X2:
        p = convert.cvt_pack_fp8(k, f, f, pair)
        convert.cvt_pack_fp8(k, f, f, pair, relu=True)
        convert.unpack(k, convert.cvt_unpack_fp8(k, p, pair), 2, part_type="f16")
        convert.pack(k, convert.unpack(k, p, 2))
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: convert.cvt_pack_fp8(k, k.reg("f32"), k.reg("f32"), "e4m3"), PTXBuildError,
     r"operand dtype = 'e4m3': must be one of 'e4m3x2', 'e5m2x2'"),
    (lambda k: convert.cvt_pack_fp8(k, k.reg("f32"), k.reg("f16")), PTXTypeError,
     r"operand lo = %h0 \(.f16\): a .f16 register cannot be used as .f32"),
    (lambda k: convert.cvt_unpack_fp8(k, k.reg("b32")), PTXTypeError,
     r"a .b32 register cannot be used as .b16"),
    (lambda k: convert.cvt_unpack_fp8(k, k.reg("b16"), "bf16x2"), PTXBuildError,
     r"operand src_type = 'bf16x2': must be one of 'e4m3x2', 'e5m2x2'"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_convert_fp8.py" in str(info.value)


def test_fp8_needs_sm89():
    m, k = kernel("sm_80")
    with pytest.raises(PTXBuildError, match="needs sm_89 or newer, the module targets sm_80"):
        convert.cvt_pack_fp8(k, k.reg("f32"), k.reg("f32"))
