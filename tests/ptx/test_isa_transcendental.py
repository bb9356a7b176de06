"""isa.transcendental: ex2/lg2/rcp/sqrt/rsqrt/tanh forms and their .ftz/.f64 rules."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXTargetError, PTXTypeError
from layoutkit.ptx.isa import transcendental as tm
from tests.ptx.ptxas_helper import assemble, written, written_regs


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k")


def test_golden():
    m, k = kernel()
    x, h = k.reg("f32"), k.reg("bf16x2")
    tm.ex2(k, x, ftz=True); tm.ex2(k, h, ftz=True); tm.rcp(k, x, ftz=True); tm.rcp(k, x, rounding="rn")
    tm.sqrt(k, x); tm.rsqrt(k, x, ftz=True); tm.lg2(k, x)
    assert k.body_lines() == [
        "    ex2.approx.ftz.f32 %f1, %f0;",
        "    ex2.approx.ftz.bf16x2 %bff1, %bff0;",
        "    rcp.approx.ftz.f32 %f2, %f0;",
        "    rcp.rn.f32 %f3, %f0;",
        "    sqrt.approx.f32 %f4, %f0;",
        "    rsqrt.approx.ftz.f32 %f5, %f0;",
        "    lg2.approx.f32 %f6, %f0;",
    ]


def test_every_form_assembles():
    m, k = kernel()
    for instr, forms in tm.FORMS.items():
        fn = getattr(tm, instr)
        for t, roundings in forms.items():
            a = written(k, t)
            if instr == "tanh":              # tanh.approx.f32 only: no rounding, no .ftz
                fn(k, a)
                continue
            for r in roundings:
                for ftz in (False, True):
                    kwargs = {} if instr in ("ex2", "lg2", "rsqrt") else {"rounding": r}
                    try:
                        fn(k, a, ftz=ftz, **kwargs)
                    except PTXBuildError:
                        continue  # refused forms are covered by test_refusals
    tm.ex2(k, 1.0, dtype="f32")
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: tm.ex2(k, k.reg("f64")), PTXTypeError, r"ex2: operand type = 'f64'"),
    (lambda k: tm.ex2(k, k.reg("bf16")), PTXBuildError, "ex2.approx on bf16 exists only with .ftz"),
    (lambda k: tm.ex2(k, k.reg("f16"), ftz=True), PTXBuildError, ".ftz does not exist for f16 ex2"),
    (lambda k: tm.rcp(k, k.reg("f32"), rounding="full"), PTXBuildError, r"rcp.f32: operand rounding = 'full'"),
    (lambda k: tm.rcp(k, k.reg("f64")), PTXBuildError, "rcp.approx.f64 exists only with .ftz"),
    (lambda k: tm.rcp(k, k.reg("f64"), rounding="rn", ftz=True), PTXBuildError, ".ftz on .f64 exists only"),
    (lambda k: tm.sqrt(k, k.reg("f64")), PTXBuildError, r"sqrt.f64: operand rounding = 'approx'"),
    (lambda k: tm.lg2(k, k.reg("u32")), PTXTypeError, "operand type = 'u32'"),
    (lambda k: tm.ex2(k, k.reg("f32"), ftz="yes"), PTXTypeError, "must be True or False"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_transcendental.py" in str(info.value)


def test_bf16x2_ex2_needs_sm90():
    m, k = kernel("sm_80")
    with pytest.raises(PTXTargetError, match="ex2.approx.ftz.bf16x2: needs sm_90"):
        tm.ex2(k, k.reg("bf16x2"), ftz=True)
