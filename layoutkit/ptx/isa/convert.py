"""Conversions and moves: cvt (int<->int, int<->float, float<->float, packed f32 pairs), mov,
pack/unpack through vector moves.

cvt rules (PTX ISA "cvt", checked with ptxas 13.0): int->float and narrowing float->float need
a float rounding (.rn .rz .rm .rp; f32->bf16 also, bf16 targets from int need sm_90);
float->int needs an integer rounding (.rni .rzi .rmi .rpi); widening float->float and
int->int take none; same-type float cvt may round to integral (.rni ...). `.ftz` only when
source or destination is .f32; `.relu` only for f16/bf16 destinations. Packed
`cvt.rn.bf16x2.f32 d, hi, lo`: the FIRST source lands in the UPPER half (hopper-ptx.md §10),
so `cvt_pack(k, hi=, lo=)` names them.

fp8 (sm_89+, PTX 7.8; ptxas 13.0): e4m3/e5m2 values move in pairs. `cvt.rn.satfinite.e4m3x2.f32
d, hi, lo` (d a .b16; `.satfinite` is required: NaN stays NaN, anything beyond the largest
finite value, infinities included, becomes it with its sign) and `cvt.rn.f16x2.e4m3x2 d, a` (d a
.f16x2/.b32, a the .b16 pair; exact: f16 holds every fp8 value). sm_90 has no fp8 <-> bf16 or
fp8 <-> f32 form; those go through f16 (`cvt.f32.f16`, `cvt.rn.bf16.f16`, both exact here).
"""
from __future__ import annotations

from ..builder import (TYPES, KernelBuilder, PTXBuildError, PTXType, PTXTypeError, Reg, Requirement,
                       SpecialReg, Symbol, Vector, ptx_type)
from .checks import check_type, choose, dest, flag, infer_type, mods, regs_of, source

CVT_INT = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64")
CVT_FLOAT = ("f16", "bf16", "f32", "f64")
FLOAT_ROUNDING = ("rn", "rz", "rm", "rp")
INT_ROUNDING = ("rni", "rzi", "rmi", "rpi")
# mov has no .f16/.bf16/.x2 forms (ptxas: "Unexpected instruction types"): those move as .bN.
MOV_TYPES = ("pred", "b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64")
SM90_CVT = Requirement((7, 8), 90)
FP8X2 = ("e4m3x2", "e5m2x2")          # the packed fp8 pair types of cvt (no register type)
FP8_CVT = Requirement((7, 8), 89)


def _rounding_rule(src: PTXType, dst: PTXType) -> tuple[tuple[str, ...], bool]:
    """(allowed roundings, required?) for cvt.dst.src."""
    if src.is_int and dst.is_int:
        return (), False
    if src.is_int:
        return FLOAT_ROUNDING, True
    if dst.is_int:
        return INT_ROUNDING, True
    if src == dst:
        return INT_ROUNDING, False
    if dst.bits > src.bits:
        return (), False
    return FLOAT_ROUNDING, True


def cvt(k: KernelBuilder, a, dtype, *, rounding=None, ftz=False, sat=False, relu=False, src_type=None,
        out=None, pred=None) -> Reg:
    """d = a converted to `dtype` (`cvt{.rnd}{.ftz}{.sat}{.relu}.dtype.atype`). The source
    type is a's register type, or `src_type` for a .bN register.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); i = k.reg("s32")
    >>> _ = cvt(k, i, "f32", rounding="rn"); k.body_lines()[-1]
    '    cvt.rn.f32.s32 %f0, %s0;'
    """
    dst = check_type("cvt", dtype, CVT_INT + CVT_FLOAT)
    src = check_type("cvt", infer_type("cvt", src_type, a), CVT_INT + CVT_FLOAT)
    instr = f"cvt.{dst}.{src}"
    allowed, required = _rounding_rule(src, dst)
    if rounding is None and required:
        raise PTXBuildError(f"needs a rounding mode, one of {', '.join(allowed)}",
                            instruction=instr, operand="rounding", value=None)
    if rounding is not None:
        if not allowed:
            raise PTXBuildError("takes no rounding mode (the conversion is exact)",
                                instruction=instr, operand="rounding", value=rounding)
        choose(instr, "rounding", rounding, allowed)
    if flag("cvt", "ftz", ftz) and "f32" not in (src.name, dst.name):
        raise PTXBuildError(".ftz applies only when the source or destination is .f32",
                            instruction=instr, operand="ftz", value=True)
    flag("cvt", "sat", sat)
    if flag("cvt", "relu", relu) and not (dst.name in ("f16", "bf16") and src.name == "f32"):
        raise PTXBuildError(".relu exists only for f32 -> f16/bf16", instruction=instr,
                            operand="relu", value=True)
    s = source(k, instr, "a", a, src, imm=False)
    d = dest(k, instr, out, dst)
    bf16 = "bf16" in (src.name, dst.name) and not (src.name == "f32" and dst.name == "bf16")
    k.emit(mods("cvt", rounding or "", "ftz" if ftz else "", "sat" if sat else "",
                "relu" if relu else "", dst.name, src.name), (d, s), defs=(d,), pred=pred,
           requires=SM90_CVT if bf16 else Requirement())
    return d


def cvt_pack(k: KernelBuilder, hi, lo, dtype="bf16x2", *, rounding="rn", relu=False, out=None,
             pred=None) -> Reg:
    """Pack two f32 into bf16x2/f16x2: `cvt.rn.bf16x2.f32 d, hi, lo` - `hi` goes to the upper
    16 bits, `lo` to the lower (PTX order: first source = upper half).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x0, x1 = k.reg("f32"), k.reg("f32")
    >>> _ = cvt_pack(k, hi=x1, lo=x0); k.body_lines()[-1]
    '    cvt.rn.bf16x2.f32 %bff0, %f1, %f0;'
    """
    dst = check_type("cvt", dtype, ("bf16x2", "f16x2"))
    instr = f"cvt.{dst}.f32"
    choose(instr, "rounding", rounding, ("rn", "rz") if dst.name == "bf16x2" else ("rn",))
    flag("cvt", "relu", relu)
    f32 = TYPES["f32"]
    srcs = (source(k, instr, "hi", hi, f32, imm=False), source(k, instr, "lo", lo, f32, imm=False))
    d = dest(k, instr, out, dst)
    k.emit(mods("cvt", rounding, "relu" if relu else "", dst.name, "f32"), (d, *srcs), defs=(d,),
           pred=pred)
    return d


def cvt_pack_fp8(k: KernelBuilder, hi, lo, dtype="e4m3x2", *, relu=False, out=None,
                 pred=None) -> Reg:
    """Two f32 to an fp8 pair in a .b16: `cvt.rn.satfinite.e4m3x2.f32 d, hi, lo` - `hi` to the
    upper byte, `lo` to the lower (the first source is the upper half, as for bf16x2).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x0, x1 = k.reg("f32"), k.reg("f32")
    >>> _ = cvt_pack_fp8(k, hi=x1, lo=x0, dtype="e5m2x2"); k.body_lines()[-1]
    '    cvt.rn.satfinite.e5m2x2.f32 %rs0, %f1, %f0;'
    """
    instr = f"cvt.rn.satfinite.{dtype}.f32"
    choose("cvt", "dtype", dtype, FP8X2)
    flag(instr, "relu", relu)
    f32 = TYPES["f32"]
    srcs = (source(k, instr, "hi", hi, f32, imm=False), source(k, instr, "lo", lo, f32, imm=False))
    d = dest(k, instr, out, TYPES["b16"])
    k.emit(mods("cvt", "rn", "satfinite", "relu" if relu else "", dtype, "f32"), (d, *srcs),
           defs=(d,), pred=pred, requires=FP8_CVT)
    return d


def cvt_unpack_fp8(k: KernelBuilder, a, src_type="e4m3x2", *, out=None, pred=None) -> Reg:
    """An fp8 pair (a .b16: low byte the first value) to f16x2, exactly:
    `cvt.rn.f16x2.e4m3x2 d, a` (low half of d from the low byte).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); a = k.reg("b16")
    >>> _ = cvt_unpack_fp8(k, a); k.body_lines()[-1]
    '    cvt.rn.f16x2.e4m3x2 %hh0, %rs0;'
    """
    instr = f"cvt.rn.f16x2.{src_type}"
    choose("cvt", "src_type", src_type, FP8X2)
    s = source(k, instr, "a", a, TYPES["b16"], imm=False)
    d = dest(k, instr, out, TYPES["f16x2"])
    k.emit(instr, (d, s), defs=(d,), pred=pred, requires=FP8_CVT)
    return d


def mov(k: KernelBuilder, a, *, dtype=None, out=None, pred=None) -> Reg:
    """d = a (`mov.type`): a register, a special register, an immediate, or a Symbol's address
    (`mov.u32 %r, smem` gives the 32-bit shared::cta offset; for a CUtensorMap param use
    memory.cvta_param, since mov gives a .param-window address, not a generic one)."""
    if isinstance(a, Symbol):
        t = check_type("mov", dtype or ("u32" if a.space == "shared" else "u64"),
                       ("u32", "u64", "b32", "b64"))
        if a.space != "shared" and t.bits != 64:
            raise PTXTypeError(f"the address of a .{a.space} symbol is 64-bit",
                               instruction=f"mov.{t}", operand="a", value=a)
        d = dest(k, f"mov.{t}", out, t)
        k.emit(f"mov.{t}", (d, a), defs=(d,), pred=pred)
        return d
    t = infer_type("mov", dtype if dtype is not None else getattr(out, "type", None), a)
    if t.name in ("f16", "bf16", "bf16x2", "f16x2"):
        t = TYPES[f"b{t.bits}"]
    t = check_type("mov", t, MOV_TYPES)
    s = source(k, f"mov.{t}", "a", a, t)
    kind_of_source = a.type if isinstance(a, (Reg, SpecialReg)) else t
    keep_source_type = out is None and dtype is None and isinstance(a, Reg)
    d = dest(k, f"mov.{t}", out, kind_of_source if keep_source_type else t)
    k.emit(f"mov.{t}", (d, s), defs=(d,), pred=pred)
    return d


def pack(k: KernelBuilder, parts, *, dtype=None, out=None, pred=None) -> Reg:
    """One wide register from 2 or 4 equal parts, lowest first: `mov.b64 d, {lo, hi}` (a .b16
    from two .b8: an fp8 pair)."""
    parts = tuple(parts)
    if len(parts) not in (2, 4) or not all(isinstance(p, Reg) for p in parts):
        raise PTXTypeError("packs 2 or 4 registers", instruction="mov", operand="parts", value=parts)
    bits = parts[0].type.bits * len(parts)
    t = check_type("mov", dtype or f"b{bits}", ("b16", "b32", "b64"))
    part_type = ptx_type(f"b{t.bits // len(parts)}")
    srcs = regs_of(k, f"mov.{t}", "parts", parts, part_type, len(parts))
    d = dest(k, f"mov.{t}", out, t)
    k.emit(f"mov.{t}", (d, Vector(srcs)), defs=(d,), pred=pred)
    return d


def unpack(k: KernelBuilder, a, count: int = 2, *, part_type=None, pred=None) -> tuple[Reg, ...]:
    """Split a 16/32/64-bit register into `count` (2 or 4) parts, lowest first:
    `mov.b64 {lo, hi}, a`. Parts are `part_type` (default .bN of the right size)."""
    t = check_type("mov", TYPES.get(f"b{getattr(getattr(a, 'type', None), 'bits', 0)}",
                                    getattr(a, "type", "b32")), ("b16", "b32", "b64"))
    choose(f"mov.{t}", "count", count, (2, 4))
    part = ptx_type(part_type or f"b{t.bits // count}")
    if part.bits * count != t.bits or part.bits < 8:
        raise PTXTypeError(f"{count} parts of .{part} do not make .{t}", instruction=f"mov.{t}",
                           operand="part_type", value=part.name)
    s = source(k, f"mov.{t}", "a", a, t, imm=False)
    parts = k.regs(part, count)
    k.emit(f"mov.{t}", (Vector(parts), s), defs=parts, pred=pred)
    return parts
