"""Integer and floating-point arithmetic: add sub mul mad fma div rem min max neg abs.

Rules (PTX ISA, "Integer/Floating-point arithmetic instructions"): integer forms take
.u16..s64 (`.sat` only on .s32 add/sub and mad.hi.s32); `mul`/`mad` need `.lo`, `.hi` or
`.wide` (wide for 16/32-bit sources, doubling the result). Float rounding is `.rn .rz .rm
.rp` on .f32/.f64 (optional for add/sub/mul, required for fma and f64 div), only `.rn` on
f16/bf16 and their x2 forms; `.ftz` on .f32 and f16 forms, `.sat` on .f32 and f16 forms;
bf16 add/sub/mul need sm_90 (PTX 7.8).
"""
from __future__ import annotations

from ..builder import KernelBuilder, PTXBuildError, PTXType, Reg, Requirement
from .checks import (check_type, choose, dest, flag, infer_type, mods, result_type, source)

INT = ("u16", "u32", "u64", "s16", "s32", "s64")
SIGNED = ("s16", "s32", "s64")
HALF = ("f16", "f16x2", "bf16", "bf16x2")
FLOAT = ("f32", "f64") + HALF
ROUNDING = ("rn", "rz", "rm", "rp")
BF16_ARITH = Requirement(version=(7, 8), sm=90)


def _float_modifiers(instr: str, t: PTXType, rounding, ftz, sat, *, required: bool) -> tuple:
    """Validated (rounding, ftz, sat) suffixes for float type t."""
    flag(instr, "ftz", ftz)
    flag(instr, "sat", sat)
    allowed = ("rn",) if t.name in HALF else ROUNDING
    if rounding is None and required:
        raise PTXBuildError(f"{instr}.{t} needs a rounding mode, one of {', '.join(allowed)}",
                            instruction=instr, operand="rounding", value=None)
    if rounding is not None:
        choose(f"{instr}.{t}", "rounding", rounding, allowed)
    if ftz and t.name not in ("f32", "f16", "f16x2"):
        raise PTXBuildError(".ftz exists only for .f32, .f16 and .f16x2", instruction=instr,
                            operand="ftz", value=f".{t}")
    if sat and t.name not in ("f32", "f16", "f16x2"):
        raise PTXBuildError(".sat exists only for .f32, .f16 and .f16x2 here", instruction=instr,
                            operand="sat", value=f".{t}")
    return rounding or "", "ftz" if ftz else "", "sat" if sat else ""


def _requires(instr: str, t: PTXType) -> Requirement:
    if t.name.startswith("bf16") and instr in ("add", "sub", "mul"):
        return BF16_ARITH
    return Requirement()


def _binary(k: KernelBuilder, instr: str, a, b, c, *, dtype, rounding, ftz, sat, out, pred,
            int_modes=(), mode=None, rounding_required=False):
    operands = (a, b) if c is None else (a, b, c)
    t = check_type(instr, infer_type(instr, dtype, *operands), INT + FLOAT)
    d_type = t
    if t.is_int:
        if rounding is not None or flag(instr, "ftz", ftz):
            raise PTXBuildError("rounding and .ftz apply to float types only", instruction=instr,
                                operand="rounding" if rounding is not None else "ftz",
                                value=f".{t}")
        if int_modes:
            choose(f"{instr}.{t}", "mode", mode, int_modes)
            if mode == "wide":
                if t.bits == 64:
                    raise PTXBuildError(".wide takes 16- or 32-bit sources", instruction=instr,
                                        operand="type", value=f".{t}")
                d_type = check_type(instr, f"{t.name[0]}{t.bits * 2}", INT)
        sat_ok = t.name == "s32" and (instr in ("add", "sub") or (instr == "mad" and mode == "hi"))
        if flag(instr, "sat", sat) and not sat_ok:
            raise PTXBuildError(".sat on integers exists only for add/sub.s32 and mad.hi.s32",
                                instruction=instr, operand="sat", value=f".{t}")
        suffix = (mode if int_modes else "", "sat" if sat else "")
    else:
        if mode is not None:
            raise PTXBuildError(".lo/.hi/.wide apply to integer types only", instruction=instr,
                                operand="mode", value=mode)
        suffix = _float_modifiers(instr, t, rounding, ftz, sat, required=rounding_required)
    # mad.wide adds a c of the wide (destination) type
    types = (t, t, d_type)
    srcs = [source(k, instr, name, v, st) for name, v, st in zip("abc", operands, types)]
    d = dest(k, instr, out, d_type) if out is not None or d_type != t else\
        dest(k, instr, None, result_type(t, *operands))
    k.emit(mods(instr, *suffix, t.name), (d, *srcs), defs=(d,), pred=pred,
           requires=_requires(instr, t))
    return d


def add(k: KernelBuilder, a, b, *, dtype=None, rounding=None, ftz=False, sat=False, out=None,
        pred=None) -> Reg:
    """d = a + b (`add{.rnd}{.ftz}{.sat}.type`). Type from dtype or the first register.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x = k.reg("f32")
    >>> _ = add(k, x, 1.0, ftz=True); k.body_lines()[-1]
    '    add.ftz.f32 %f1, %f0, 0f3F800000;'
    """
    return _binary(k, "add", a, b, None, dtype=dtype, rounding=rounding, ftz=ftz, sat=sat,
                   out=out, pred=pred)


def sub(k: KernelBuilder, a, b, *, dtype=None, rounding=None, ftz=False, sat=False, out=None,
        pred=None) -> Reg:
    """d = a - b (`sub{.rnd}{.ftz}{.sat}.type`)."""
    return _binary(k, "sub", a, b, None, dtype=dtype, rounding=rounding, ftz=ftz, sat=sat,
                   out=out, pred=pred)


def mul(k: KernelBuilder, a, b, *, mode=None, dtype=None, rounding=None, ftz=False, sat=False, out=None,
        pred=None) -> Reg:
    """d = a * b. Integers: `mode` 'lo' (default), 'hi' or 'wide' (result twice as wide)."""
    t = infer_type("mul", dtype, a, b)
    if t.is_int and mode is None:
        mode = "lo"
    return _binary(k, "mul", a, b, None, dtype=dtype, rounding=rounding, ftz=ftz, sat=sat,
                   out=out, pred=pred, int_modes=("lo", "hi", "wide"), mode=mode)


def mul_wide(k: KernelBuilder, a, b, *, dtype=None, out=None, pred=None) -> Reg:
    """`mul.wide.{u,s}{16,32}`: the full 32/64-bit product of two 16/32-bit integers."""
    return mul(k, a, b, mode="wide", dtype=dtype, out=out, pred=pred)


def mul_hi(k: KernelBuilder, a, b, *, dtype=None, out=None, pred=None) -> Reg:
    """`mul.hi.type`: the upper half of the integer product."""
    return mul(k, a, b, mode="hi", dtype=dtype, out=out, pred=pred)


def mad(k: KernelBuilder, a, b, c, *, mode="lo", dtype=None, sat=False, out=None, pred=None) -> Reg:
    """Integer d = a * b + c (`mad.{lo,hi,wide}{.sat}.type`); for floats use `fma`."""
    t = infer_type("mad", dtype, a, b, c)
    if t.is_float:
        raise PTXBuildError("float multiply-add is fma (mad.f32 is only an alias of fma.rn)",
                            instruction="mad", operand="type", value=f".{t}")
    return _binary(k, "mad", a, b, c, dtype=dtype, rounding=None, ftz=False, sat=sat, out=out,
                   pred=pred, int_modes=("lo", "hi", "wide"), mode=mode)


def fma(k: KernelBuilder, a, b, c, *, rounding="rn", dtype=None, ftz=False, sat=False, out=None,
        pred=None) -> Reg:
    """Float d = a * b + c, rounded once (`fma.rnd{.ftz}{.sat}.type`; rounding required)."""
    t = infer_type("fma", dtype, a, b, c)
    if t.is_int:
        raise PTXBuildError("fma is a float instruction; integers use mad", instruction="fma",
                            operand="type", value=f".{t}")
    return _binary(k, "fma", a, b, c, dtype=dtype, rounding=rounding, ftz=ftz, sat=sat, out=out,
                   pred=pred, rounding_required=True)


def div(k: KernelBuilder, a, b, *, dtype=None, rounding=None, ftz=False, out=None, pred=None) -> Reg:
    """d = a / b. Integers: no modifiers. .f32: rounding one of 'approx', 'full', rn/rz/rm/rp
    (required); .f64: rn/rz/rm/rp (required). f16/bf16 have no div."""
    t = infer_type("div", dtype, a, b)
    if t.is_float:
        t = check_type("div", t, ("f32", "f64"))
        allowed = ("approx", "full") + ROUNDING if t.name == "f32" else ROUNDING
        if rounding is None:
            raise PTXBuildError(f"div.{t} needs a rounding mode, one of {', '.join(allowed)}",
                                instruction="div", operand="rounding", value=None)
        choose(f"div.{t}", "rounding", rounding, allowed)
        if flag("div", "ftz", ftz) and t.name != "f32":
            raise PTXBuildError(".ftz exists only for .f32", instruction="div", operand="ftz",
                                value=f".{t}")
        srcs = [source(k, "div", n, v, t) for n, v in (("a", a), ("b", b))]
        d = dest(k, "div", out, result_type(t, a, b)) if out is None else dest(k, "div", out, t)
        k.emit(mods("div", rounding, "ftz" if ftz else "", t.name), (d, *srcs), defs=(d,),
               pred=pred)
        return d
    return _binary(k, "div", a, b, None, dtype=dtype, rounding=rounding, ftz=ftz, sat=False,
                   out=out, pred=pred)


def rem(k: KernelBuilder, a, b, *, dtype=None, out=None, pred=None) -> Reg:
    """Integer remainder d = a % b (sign of a for signed types)."""
    t = check_type("rem", infer_type("rem", dtype, a, b), INT)
    return _binary(k, "rem", a, b, None, dtype=t, rounding=None, ftz=False, sat=False, out=out,
                   pred=pred)


def _minmax(k: KernelBuilder, instr: str, a, b, dtype, ftz, nan, out, pred) -> Reg:
    t = check_type(instr, infer_type(instr, dtype, a, b), INT + FLOAT)
    flag(instr, "ftz", ftz)
    flag(instr, "nan", nan)
    if ftz and t.name not in ("f32", "f16", "f16x2"):
        raise PTXBuildError(".ftz exists only for .f32, .f16 and .f16x2", instruction=instr,
                            operand="ftz", value=f".{t}")
    if nan and (t.is_int or t.name == "f64"):
        raise PTXBuildError(".NaN exists only for .f32 and the f16/bf16 forms", instruction=instr,
                            operand="nan", value=f".{t}")
    srcs = [source(k, instr, n, v, t) for n, v in (("a", a), ("b", b))]
    d = dest(k, instr, out, t) if out is not None else dest(k, instr, None, result_type(t, a, b))
    k.emit(mods(instr, "ftz" if ftz else "", "NaN" if nan else "", t.name), (d, *srcs),
           defs=(d,), pred=pred)
    return d


def min_(k: KernelBuilder, a, b, *, dtype=None, ftz=False, nan=False, out=None, pred=None) -> Reg:
    """d = min(a, b) (`min{.ftz}{.NaN}.type`; .NaN propagates NaN instead of dropping it)."""
    return _minmax(k, "min", a, b, dtype, ftz, nan, out, pred)


def max_(k: KernelBuilder, a, b, *, dtype=None, ftz=False, nan=False, out=None, pred=None) -> Reg:
    """d = max(a, b) (`max{.ftz}{.NaN}.type`)."""
    return _minmax(k, "max", a, b, dtype, ftz, nan, out, pred)


def _unary(k: KernelBuilder, instr: str, a, dtype, ftz, out, pred) -> Reg:
    t = check_type(instr, infer_type(instr, dtype, a), SIGNED + FLOAT)
    if flag(instr, "ftz", ftz) and t.name not in ("f32", "f16", "f16x2"):
        raise PTXBuildError(".ftz exists only for .f32, .f16 and .f16x2", instruction=instr,
                            operand="ftz", value=f".{t}")
    src = source(k, instr, "a", a, t)
    d = dest(k, instr, out, t) if out is not None else dest(k, instr, None, result_type(t, a))
    k.emit(mods(instr, "ftz" if ftz else "", t.name), (d, src), defs=(d,), pred=pred)
    return d


def neg(k: KernelBuilder, a, *, dtype=None, ftz=False, out=None, pred=None) -> Reg:
    """d = -a (`neg{.ftz}.type`; signed integers and floats)."""
    return _unary(k, "neg", a, dtype, ftz, out, pred)


def abs_(k: KernelBuilder, a, *, dtype=None, ftz=False, out=None, pred=None) -> Reg:
    """d = |a| (`abs{.ftz}.type`; signed integers and floats)."""
    return _unary(k, "abs", a, dtype, ftz, out, pred)
