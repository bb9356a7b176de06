"""isa.compare: setp/selp golden text, ptxas acceptance of all comparison forms, refusals."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXTypeError
from layoutkit.ptx.isa import compare
from tests.ptx.ptxas_helper import assemble, written, written_regs


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k")


def test_golden():
    m, k = kernel()
    u, f = k.reg("u32"), k.reg("f32")
    p = compare.setp(k, "lt", u, 128)
    q = compare.setp(k, "eq", f, float("-inf"), combine="or", c=~p)
    p2, p3 = compare.setp(k, "ge", u, u, complement=True)
    compare.selp(k, 0.0, f, q)
    compare.selp(k, u, 7, ~p2)
    assert k.body_lines() == [
        "    setp.lt.u32 %p0, %u0, 128;",
        "    setp.eq.or.f32 %p1, %f0, 0fFF800000, !%p0;",
        "    setp.ge.u32 %p2|%p3, %u0, %u0;",
        "    selp.f32 %f1, 0f00000000, %f0, %p1;",
        "    selp.u32 %u1, %u0, 7, !%p2;",
    ]


def test_every_form_assembles():
    m, k = kernel()
    c = compare.setp(k, "eq", written(k, "u32"), 0)
    for t in compare.SETP_TYPES:
        a = written(k, t)
        for cmp in compare._comparisons(written(k, t).type.kind):
            compare.setp(k, cmp, a, a)
        compare.setp(k, "ne", a, a, combine="xor", c=c, complement=t not in ("f16", "bf16"))
    compare.setp(k, "lt", written(k, "f32"), 1.0, ftz=True)
    for t in compare.SELP_TYPES:
        a = written(k, t)
        compare.selp(k, a, a, c)
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: compare.setp(k, "lt", k.reg("b32"), 0), PTXBuildError,
     r"setp.b32: operand cmp = 'lt': must be one of 'eq', 'ne'"),
    (lambda k: compare.setp(k, "lo", k.reg("s32"), 0), PTXBuildError, r"operand cmp = 'lo'"),
    (lambda k: compare.setp(k, "nan", k.reg("u32"), 0), PTXBuildError, r"operand cmp = 'nan'"),
    (lambda k: compare.setp(k, "lt", k.reg("f64"), 0.0, ftz=True), PTXBuildError, ".ftz exists only"),
    (lambda k: compare.setp(k, "lt", k.reg("u32"), 0, combine="and"), PTXBuildError,
     "combine= and c= go together"),
    (lambda k: compare.setp(k, "lt", k.reg("u32"), 0, combine="nand", c=k.reg("pred")), PTXBuildError,
     r"operand combine = 'nand'"),
    (lambda k: compare.setp(k, "lt", k.reg("u32"), 0, combine="and", c=1), PTXTypeError,
     r"operand c = 1: must be a register of type .pred"),
    (lambda k: compare.setp(k, "lt", k.reg("f16"), k.reg("f16"), complement=True), PTXBuildError,
     "the p|q form does not exist for .f16"),
    (lambda k: compare.setp(k, "lt", k.reg("pred"), 0), PTXTypeError, "the type must be one of"),
    (lambda k: compare.selp(k, k.reg("u32"), 1, k.reg("u32")), PTXTypeError,
     r"selp.u32: operand c = %u1 \(.u32\): a .u32 register cannot be used as .pred"),
    (lambda k: compare.selp(k, k.reg("u32"), 1, True), PTXTypeError, "the selector is a .pred register"),
    (lambda k: compare.selp(k, k.reg("f16"), k.reg("f16"), k.reg("pred")), PTXTypeError,
     "the type must be one of .b16"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_compare.py" in str(info.value)


def test_setp_bf16_needs_sm90():
    m, k = kernel("sm_80")
    with pytest.raises(PTXBuildError, match="needs sm_90"):
        compare.setp(k, "lt", k.reg("bf16"), k.reg("bf16"))
