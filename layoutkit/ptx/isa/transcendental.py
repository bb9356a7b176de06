"""Special-function-unit math: ex2, lg2, rcp, sqrt, rsqrt, tanh (approximate and IEEE-rounded).

Rules (PTX ISA "Floating-point instructions"): ex2.approx{.ftz}.f32, also ex2.approx.ftz
.bf16/.bf16x2 (sm_90, PTX 7.8) and ex2.approx.f16/.f16x2; lg2.approx{.ftz}.f32;
rcp.approx{.ftz}.{f32,f64} (f64 approx only with .ftz) and rcp.{rn,rz,rm,rp}{.ftz}.f32/.f64;
sqrt.approx{.ftz}.f32 and sqrt.{rn,...}.f32/.f64; rsqrt.approx{.ftz}.f32/.f64. `.ftz` is
never allowed on .f64 except rcp.approx.ftz.f64. tanh.approx.f32 (sm_75, PTX 7.0; maximum
relative error 2^-10.987 per the ISA) has no .ftz.
"""
from __future__ import annotations

from ..builder import KernelBuilder, PTXBuildError, Reg, Requirement
from .checks import check_type, choose, dest, flag, infer_type, mods, result_type, source

IEEE = ("rn", "rz", "rm", "rp")
# instruction -> {type: allowed rounding modes}
FORMS = {
    "ex2": {"f32": ("approx",), "f16": ("approx",), "f16x2": ("approx",),
            "bf16": ("approx",), "bf16x2": ("approx",)},
    "lg2": {"f32": ("approx",)},
    "rcp": {"f32": ("approx",) + IEEE, "f64": ("approx",) + IEEE},
    "sqrt": {"f32": ("approx",) + IEEE, "f64": IEEE},
    "rsqrt": {"f32": ("approx",), "f64": ("approx",)},
    "tanh": {"f32": ("approx",)},
}


def _sfu(k: KernelBuilder, instr: str, a, rounding, ftz, dtype, out, pred) -> Reg:
    forms = FORMS[instr]
    t = check_type(instr, infer_type(instr, dtype, a), forms)
    choose(f"{instr}.{t}", "rounding", rounding, forms[t.name])
    flag(instr, "ftz", ftz)
    if t.name.startswith("bf16") and not ftz:
        raise PTXBuildError("ex2.approx on bf16 exists only with .ftz", instruction=f"ex2.{t}",
                            operand="ftz", value=False)
    if ftz and t.name in ("f16", "f16x2"):
        raise PTXBuildError(".ftz does not exist for f16 ex2", instruction=f"ex2.{t}",
                            operand="ftz", value=True)
    if ftz and t.name == "f64" and not (instr == "rcp" and rounding == "approx"):
        raise PTXBuildError(".ftz on .f64 exists only for rcp.approx", instruction=f"{instr}.{t}",
                            operand="ftz", value=True)
    if instr == "rcp" and t.name == "f64" and rounding == "approx" and not ftz:
        raise PTXBuildError("rcp.approx.f64 exists only with .ftz", instruction="rcp.f64",
                            operand="ftz", value=False)
    requires = Requirement((7, 8), 90) if t.name.startswith("bf16") else \
        Requirement((7, 0), 75) if instr == "tanh" else Requirement()
    s = source(k, instr, "a", a, t, imm=t.name in ("f32", "f64"))
    d = dest(k, instr, out, t) if out is not None else dest(k, instr, None, result_type(t, a))
    k.emit(mods(instr, rounding, "ftz" if ftz else "", t.name), (d, s), defs=(d,), pred=pred,
           requires=requires)
    return d


def ex2(k: KernelBuilder, a, *, ftz=False, dtype=None, out=None, pred=None) -> Reg:
    """d = 2**a (`ex2.approx{.ftz}.type`).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x = k.reg("f32")
    >>> _ = ex2(k, x, ftz=True); k.body_lines()[-1]
    '    ex2.approx.ftz.f32 %f1, %f0;'
    """
    return _sfu(k, "ex2", a, "approx", ftz, dtype, out, pred)


def lg2(k: KernelBuilder, a, *, ftz=False, dtype=None, out=None, pred=None) -> Reg:
    """d = log2(a) (`lg2.approx{.ftz}.f32`)."""
    return _sfu(k, "lg2", a, "approx", ftz, dtype, out, pred)


def rcp(k: KernelBuilder, a, *, rounding="approx", ftz=False, dtype=None, out=None, pred=None) -> Reg:
    """d = 1/a: 'approx' (MUFU) or IEEE-rounded rn/rz/rm/rp (`rcp.rn.f32`)."""
    return _sfu(k, "rcp", a, rounding, ftz, dtype, out, pred)


def sqrt(k: KernelBuilder, a, *, rounding="approx", ftz=False, dtype=None, out=None, pred=None) -> Reg:
    """d = sqrt(a): 'approx' (.f32 only) or IEEE-rounded."""
    return _sfu(k, "sqrt", a, rounding, ftz, dtype, out, pred)


def rsqrt(k: KernelBuilder, a, *, ftz=False, dtype=None, out=None, pred=None) -> Reg:
    """d = 1/sqrt(a) (`rsqrt.approx{.ftz}.f32`, `rsqrt.approx.f64`)."""
    return _sfu(k, "rsqrt", a, "approx", ftz, dtype, out, pred)


def tanh(k: KernelBuilder, a, *, dtype=None, out=None, pred=None) -> Reg:
    """d = tanh(a) (`tanh.approx.f32`: one MUFU.TANH, maximum relative error 2^-10.987).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x = k.reg("f32")
    >>> _ = tanh(k, x); k.body_lines()[-1]
    '    tanh.approx.f32 %f1, %f0;'
    """
    return _sfu(k, "tanh", a, "approx", False, dtype, out, pred)
