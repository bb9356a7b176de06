"""Logic, shifts and bit-field operations: and or xor not shl shr bfe bfi popc clz brev.

Rules (PTX ISA, "Logic and shift instructions", "Integer arithmetic"): and/or/xor/not take
.pred/.b16/.b32/.b64 (integer registers of the same size are accepted; the opcode is .bN);
shl is .bN, shr is .bN (logical), .uN (logical) or .sN (arithmetic); the shift amount is
always .u32. bfe is .u32/.u64/.s32/.s64, bfi .b32/.b64 with .u32 position and length;
popc/clz return .u32 from .b32/.b64; brev is .b32/.b64.
"""
from __future__ import annotations

from ..builder import TYPES, KernelBuilder, PTXType, Reg
from .checks import check_type, dest, infer_type, result_type, source

LOGIC = ("pred", "b16", "b32", "b64")
U32 = TYPES["u32"]


def _as_bits(t: PTXType) -> PTXType:
    """and.u32 is not PTX: integer types map to the .bN of the same size."""
    return t if t.is_pred or t.kind == "bits" or not t.is_int else TYPES[f"b{t.bits}"]


def _emit(k: KernelBuilder, instr: str, t: PTXType, d_type: PTXType, named_sources, out, pred) -> Reg:
    srcs = [source(k, instr, name, v, st) for name, v, st in named_sources]
    d = dest(k, instr, out, d_type)
    k.emit(f"{instr}.{t}", (d, *srcs), defs=(d,), pred=pred)
    return d


def _logic(k: KernelBuilder, instr: str, values, dtype, out, pred) -> Reg:
    t = check_type(instr, _as_bits(infer_type(instr, dtype, *values)), LOGIC)
    d_type = t if out is not None else result_type(t, *values)
    return _emit(k, instr, t, d_type, [(n, v, t) for n, v in zip("ab", values)], out, pred)


def and_(k: KernelBuilder, a, b, *, dtype=None, out=None, pred=None) -> Reg:
    """d = a & b (`and.bN`, or `and.pred` on predicates).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x = k.reg("u32")
    >>> _ = and_(k, x, 127); k.body_lines()[-1]
    '    and.b32 %u1, %u0, 127;'
    """
    return _logic(k, "and", (a, b), dtype, out, pred)


def or_(k: KernelBuilder, a, b, *, dtype=None, out=None, pred=None) -> Reg:
    """d = a | b (`or.bN` / `or.pred`)."""
    return _logic(k, "or", (a, b), dtype, out, pred)


def xor(k: KernelBuilder, a, b, *, dtype=None, out=None, pred=None) -> Reg:
    """d = a ^ b (`xor.bN` / `xor.pred`)."""
    return _logic(k, "xor", (a, b), dtype, out, pred)


def not_(k: KernelBuilder, a, *, dtype=None, out=None, pred=None) -> Reg:
    """d = ~a (`not.bN` / `not.pred`)."""
    return _logic(k, "not", (a,), dtype, out, pred)


def shl(k: KernelBuilder, a, amount, *, dtype=None, out=None, pred=None) -> Reg:
    """d = a << amount (`shl.bN`; amount .u32, clamped by hardware to the width)."""
    t = check_type("shl", _as_bits(infer_type("shl", dtype, a)), ("b16", "b32", "b64"))
    d_type = t if out is not None else result_type(t, a)
    return _emit(k, "shl", t, d_type, [("a", a, t), ("amount", amount, U32)], out, pred)


def shr(k: KernelBuilder, a, amount, *, dtype=None, out=None, pred=None) -> Reg:
    """d = a >> amount: arithmetic for .sN, logical for .uN/.bN (type from a's register)."""
    t = check_type("shr", infer_type("shr", dtype, a),
                   ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"))
    d_type = t if out is not None else result_type(t, a)
    return _emit(k, "shr", t, d_type, [("a", a, t), ("amount", amount, U32)], out, pred)


def bfe(k: KernelBuilder, a, position, length, *, dtype=None, out=None, pred=None) -> Reg:
    """Extract `length` bits of a from bit `position` (sign-extended for .sN): `bfe.type`."""
    t = check_type("bfe", infer_type("bfe", dtype, a), ("u32", "u64", "s32", "s64"))
    return _emit(k, "bfe", t, t, [("a", a, t), ("position", position, U32),
                                  ("length", length, U32)], out, pred)


def bfi(k: KernelBuilder, insert, base, position, length, *, dtype=None, out=None, pred=None) -> Reg:
    """Insert the low `length` bits of `insert` into `base` at `position`: `bfi.bN d, a, b, c, d`."""
    t = check_type("bfi", _as_bits(infer_type("bfi", dtype, insert, base)), ("b32", "b64"))
    d_type = t if out is not None else result_type(t, base, insert)
    return _emit(k, "bfi", t, d_type, [("insert", insert, t), ("base", base, t),
                                       ("position", position, U32), ("length", length, U32)],
                 out, pred)


def _count(k: KernelBuilder, instr: str, a, dtype, out, pred) -> Reg:
    t = check_type(instr, _as_bits(infer_type(instr, dtype, a)), ("b32", "b64"))
    return _emit(k, instr, t, U32, [("a", a, t)], out, pred)


def popc(k: KernelBuilder, a, *, dtype=None, out=None, pred=None) -> Reg:
    """Number of set bits, as .u32 (`popc.bN`)."""
    return _count(k, "popc", a, dtype, out, pred)


def clz(k: KernelBuilder, a, *, dtype=None, out=None, pred=None) -> Reg:
    """Number of leading zero bits, as .u32 (`clz.bN`)."""
    return _count(k, "clz", a, dtype, out, pred)


def brev(k: KernelBuilder, a, *, dtype=None, out=None, pred=None) -> Reg:
    """Bit reversal (`brev.bN`)."""
    t = check_type("brev", _as_bits(infer_type("brev", dtype, a)), ("b32", "b64"))
    d_type = t if out is not None else result_type(t, a)
    return _emit(k, "brev", t, d_type, [("a", a, t)], out, pred)
