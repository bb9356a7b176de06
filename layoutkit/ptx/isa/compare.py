"""Compare and select: setp (optionally combined with a predicate) and selp.

Rules (PTX ISA, "Comparison and selection instructions"): .bN compares only with eq/ne;
integers with eq ne lt le gt ge, and unsigned also lo ls hi hs; floats with eq ne lt le gt ge,
the unordered equ neu ltu leu gtu geu, and num/nan; `.ftz` on .f32/.f16. The combining form
`setp.cmp.{and,or,xor}` folds a third predicate operand c (may be negated). setp.bf16 needs
sm_90 (PTX 7.8). selp d = c ? a : b on any 16/32/64-bit scalar type.
"""
from __future__ import annotations

from ..builder import TYPES, KernelBuilder, NotPred, PTXBuildError, PTXTypeError, Reg, Requirement
from .checks import check_type, choose, dest, flag, infer_type, mods, source

ORDERED = ("eq", "ne", "lt", "le", "gt", "ge")
UNSIGNED_ONLY = ("lo", "ls", "hi", "hs")
UNORDERED = ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
SETP_TYPES = ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64",
              "f16", "bf16", "f32", "f64")
SELP_TYPES = ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64")
PRED = TYPES["pred"]


def _comparisons(kind: str) -> tuple[str, ...]:
    return {"bits": ("eq", "ne"), "signed": ORDERED, "unsigned": ORDERED + UNSIGNED_ONLY,
            "float": ORDERED + UNORDERED}[kind]


def setp(k: KernelBuilder, cmp: str, a, b, *, combine: str | None = None, c=None,
         complement: bool = False, ftz: bool = False, dtype=None, out=None,
         pred=None) -> "Reg | tuple[Reg, Reg]":
    """p = (a cmp b) [combine c]. With `complement`, also q = !(a cmp b) [combine c] and
    returns (p, q) (`setp.lt.u32 %p|%q, ...`).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x = k.reg("f32"); p = k.reg("pred")
    >>> _ = setp(k, "eq", x, float("-inf"), combine="and", c=~p); k.body_lines()[-1]
    '    setp.eq.and.f32 %p1, %f0, 0fFF800000, !%p0;'
    """
    t = check_type("setp", infer_type("setp", dtype, a, b), SETP_TYPES)
    instr = f"setp.{t}"
    choose(instr, "cmp", cmp, _comparisons(t.kind))
    if flag("setp", "ftz", ftz) and t.name not in ("f32", "f16"):
        raise PTXBuildError(".ftz exists only for .f32 and .f16", instruction=instr,
                            operand="ftz", value=f".{t}")
    srcs = [source(k, instr, "a", a, t), source(k, instr, "b", b, t)]
    if (combine is None) != (c is None):
        raise PTXBuildError("combine= and c= go together (setp.cmp.and/or/xor p, a, b, c)",
                            instruction=instr, operand="c" if c is None else "combine",
                            value=combine if c is None else c)
    if combine is not None:
        choose(instr, "combine", combine, ("and", "or", "xor"))
        srcs.append(source(k, instr, "c", c, PRED, imm=False))
    p = dest(k, instr, out, PRED, "p")
    defs = (p,)
    dst = p
    if flag("setp", "complement", complement):
        if t.name in ("f16", "bf16"):
            raise PTXBuildError("the p|q form does not exist for .f16/.bf16 (ptxas: predicate "
                                "output not allowed)", instruction=instr, operand="complement",
                                value=True)
        q = k.reg(PRED)
        defs, dst = (p, q), f"{p}|{q}"
    requires = Requirement((7, 8), 90) if t.name == "bf16" else Requirement()
    k.emit(mods("setp", cmp, combine or "", "ftz" if ftz else "", t.name), (dst, *srcs),
           defs=defs, pred=pred, requires=requires)
    return defs if complement else p


def selp(k: KernelBuilder, a, b, c, *, dtype=None, out=None, pred=None) -> Reg:
    """d = c ? a : b (`selp.type d, a, b, c`); c is a predicate (or its negation ~p)."""
    t = check_type("selp", infer_type("selp", dtype, a, b), SELP_TYPES)
    instr = f"selp.{t}"
    if not isinstance(c, (Reg, NotPred)):
        raise PTXTypeError("the selector is a .pred register", instruction=instr, operand="c",
                           value=c)
    srcs = (source(k, instr, "a", a, t), source(k, instr, "b", b, t),
            source(k, instr, "c", c, PRED, imm=False))
    first_reg = next((v for v in (a, b) if isinstance(v, Reg)), None)
    d = dest(k, instr, out, first_reg.type if out is None and first_reg is not None else t)
    k.emit(f"selp.{t}", (d, *srcs), defs=(d,), pred=pred)
    return d
