"""Lowering of sympy index expressions to PTX integer arithmetic, sharing common
subexpressions within a scope (a block and the blocks nested in it).

Supported forms: integers, bound symbols, sums, products with integer coefficients, Min and
Max (min/max), floor(p/q), ceiling(p/q) and Mod(p, q) for a positive integer q (an arithmetic
shift / a mask when q is a power of two, exact for any sign of p; for another q and a provably
non-negative 32-bit p a multiply-high and a shift, since ptxas expands div/rem by an immediate
into a ~20-instruction reciprocal routine) or a provably positive kernel integer q (div/rem: slow,
keep them out of inner loops). PTX's div/rem truncate toward zero: a p not provably
non-negative gets two more instructions that round toward -inf (with a run-time q, p must be
provably non-negative).

>>> import sympy
>>> from layoutkit.ptx.builder import Module
>>> k = Module(line_info=False).kernel("k")
>>> t = sympy.Symbol("t", integer=True, nonnegative=True)
>>> ix = IndexLowering(k, {t: k.reg("s32")})
>>> a = ix.emit(4 * t + 512, "s32"); b = ix.emit(sympy.floor(t / 32) + 4 * t, "s32")
>>> print("\\n".join(k.body_lines()))
    shl.b32 %s1, %s0, 2;
    add.s32 %s2, %s1, 512;
    shr.s32 %s3, %s0, 5;
    add.s32 %s4, %s1, %s3;
"""
from __future__ import annotations

from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx.builder import KernelBuilder, Reg
from layoutkit.ptx.isa import arith, bits, convert

from ..core.errors import TraceError
from ..core.facts import fraction_of, positive_division, provably_nonnegative


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def reciprocal_multiplier(d: int, dividend_bits: int) -> tuple[int, int]:
    """(m, shift) with x // d == mul.hi(x, m) >> shift for every 0 <= x < 2**dividend_bits,
    m < 2**(dividend_bits + 1) (the register width): for a d that is not a power of two,
    s = ceil(log2 d) and m = ceil(2**(dividend_bits + s) / d); with m * d = 2**(bits + s) + e,
    0 <= e < d, x * e < 2**(bits + s) keeps the error below 1/d (Granlund & Montgomery 1994).

    >>> m, shift = reciprocal_multiplier(66, 31); (hex(m), shift)
    ('0xf83e0f84', 6)
    >>> all((x * m >> 32) >> shift == x // 66 for x in (0, 65, 66, 2**31 - 1))
    True
    """
    if d <= 1 or _power_of_two(d):
        raise ValueError(f"reciprocal_multiplier: d = {d} is not a non-power-of-two integer > 1")
    s = d.bit_length()
    if s > dividend_bits:
        raise ValueError(f"reciprocal_multiplier: d = {d} has more bits than the dividend "
                         f"({dividend_bits})")
    return -(-(1 << (dividend_bits + s)) // d), s - 1


class IndexLowering:
    """Emits index expressions into kernel `k`; `env` maps each symbol to its register."""

    def __init__(self, k: KernelBuilder, env: dict):
        self.k = k
        self.env = env
        self.scopes: list[dict] = [{}]

    def push(self) -> None:
        self.scopes.append({})

    def pop(self) -> None:
        self.scopes.pop()

    def _find(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def emit(self, expr, ptype: str) -> "Reg | int":
        """A register (or an int immediate) holding `expr` as PTX type ptype (s32/s64)."""
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return int(expr)
        key = (expr, ptype)
        found = self._find(key)
        if found is None:
            found = self._lower(expr, ptype)
            self.scopes[-1][key] = found
        return found

    def _reg(self, value, ptype: str) -> Reg:
        if isinstance(value, Reg):
            return value
        return convert.mov(self.k, value, dtype=ptype)

    def _lower(self, expr, ptype: str):
        k = self.k
        if isinstance(expr, sympy.Symbol):
            reg = self.env.get(expr)
            if reg is None:
                raise TraceError(f"index symbol {expr} has no runtime value in this kernel")
            if reg.type.bits == int(ptype[1:]):
                return reg
            return convert.cvt(k, reg, ptype)
        if isinstance(expr, sympy.Add):
            const, rest = expr.as_coeff_Add()
            if const != 0:        # x + c shares x with every other x + c'
                return arith.add(k, self._reg(self.emit(rest, ptype), ptype), int(const),
                                 dtype=ptype)
            acc = None
            for term in sorted(sympy.Add.make_args(rest), key=sympy.default_sort_key):
                coeff, factor = term.as_coeff_Mul()
                if acc is not None and coeff.is_Integer and coeff not in (1, -1) and\
                        not _power_of_two(int(coeff)):
                    acc = arith.mad(k, self._reg(self.emit(factor, ptype), ptype), int(coeff),
                                    acc, dtype=ptype)
                    continue
                value = self.emit(term, ptype)
                acc = value if acc is None else arith.add(k, acc, value, dtype=ptype)
            return acc
        if isinstance(expr, sympy.Mul):
            coeff, rest = expr.as_coeff_Mul()
            if not coeff.is_Integer:
                raise TraceError(f"the index expression {expr} has a fractional coefficient; "
                                 "use floor division")
            factors = sorted(sympy.Mul.make_args(rest), key=sympy.default_sort_key)
            acc = self._reg(self.emit(factors[0], ptype), ptype)
            for f in factors[1:]:
                acc = arith.mul(k, acc, self.emit(f, ptype), dtype=ptype)
            c = int(coeff)
            if c == 1:
                return acc
            if _power_of_two(c):
                return bits.shl(k, acc, c.bit_length() - 1, dtype=ptype)
            return arith.mul(k, acc, c, dtype=ptype)
        if isinstance(expr, (sympy.Min, sympy.Max)):
            pick = arith.min_ if isinstance(expr, sympy.Min) else arith.max_
            args = sorted(expr.args, key=lambda a: (bool(a.is_Integer),
                                                    sympy.default_sort_key(a)))
            acc = self._reg(self.emit(args[0], ptype), ptype)
            for a in args[1:]:
                acc = pick(self.k, acc, self.emit(a, ptype), dtype=ptype)
            return acc
        if isinstance(expr, sympy.floor):
            num, den = fraction_of(expr.args[0])
            return self._divide(expr, num, den, ptype, "floor")
        if isinstance(expr, sympy.ceiling):     # ceil(p/q) = floor((p + q - 1) / q)
            num, den = fraction_of(expr.args[0])
            return self.emit(sympy.floor((num + den - 1) / den), ptype)
        if isinstance(expr, sympy.Mod):
            num, den = expr.args
            return self._divide(expr, num, den, ptype, "mod")
        raise TraceError(f"the index expression {expr} ({type(expr).__name__}) cannot be "
                         "lowered to integer arithmetic")

    def _quotient(self, num, value: Reg, d: int, ptype: str) -> Reg:
        """num // d for a non-negative num (in register `value`) and a constant d that is not a
        power of two: a multiply-high and a shift (reciprocal_multiplier), shared by the
        floor and the Mod of one numerator."""
        key = ("quotient", num, d, ptype)
        found = self._find(key)
        if found is None:
            unsigned = "u" + ptype[1:]
            multiplier, shift = reciprocal_multiplier(d, int(ptype[1:]) - 1)
            found = bits.shr(self.k, arith.mul_hi(self.k, value, multiplier, dtype=unsigned),
                             shift, dtype=unsigned)
            self.scopes[-1][key] = found
        return found

    def _divide(self, expr, num, den, ptype: str, kind: str):
        if not den.is_Integer:
            found = positive_division(num, den, negate=kind == "floor")
            if found is None:
                raise TraceError(f"{expr}: the divisor {den} is not a positive integer constant "
                                 "or a provably positive kernel integer")
            num, den = found
        elif int(den) <= 0:
            raise TraceError(f"{expr}: the divisor {den} is not a positive integer constant or a "
                             "provably positive kernel integer")
        nonnegative = provably_nonnegative(num)
        value = self._reg(self.emit(num, ptype), ptype)
        if not den.is_Integer:      # a run-time divisor: div/rem (tens of instructions)
            if not nonnegative:
                raise TraceError(f"{expr}: {num} is not provably non-negative, so floor/mod by "
                                 "a run-time divisor would differ from PTX's truncating division")
            divisor = self._reg(self.emit(den, ptype), ptype)
            return (arith.div if kind == "floor" else arith.rem)(self.k, value, divisor,
                                                                   dtype=ptype)
        d = int(den)
        if _power_of_two(d):        # two's complement: the arithmetic shift and the mask floor
            if kind == "floor":
                return bits.shr(self.k, value, d.bit_length() - 1, dtype=ptype)
            return bits.and_(self.k, value, d - 1, dtype=ptype)
        # ptxas expands a 32-bit div/rem by an immediate into ~20 instructions; a 64-bit
        # multiply-high is itself a chain of 32-bit multiplies with several live temporaries
        # (rmsnorm backward at 64 registers spilled 40-52 bytes with it), so s64 keeps div/rem
        if nonnegative and ptype == "s32":
            quotient = self._quotient(num, value, d, ptype)
            if kind == "floor":
                return quotient
            return arith.mad(self.k, quotient, -d, value, dtype=ptype)
        quotient = arith.div(self.k, value, d, dtype=ptype) if kind == "floor" else None
        remainder = None
        if kind == "mod" or not nonnegative:
            remainder = arith.rem(self.k, value, d, dtype=ptype)
        if nonnegative:
            return quotient if kind == "floor" else remainder
        # truncation rounded toward zero: a negative remainder means one step too high
        negative = bits.shr(self.k, remainder, int(ptype[1:]) - 1, dtype=ptype)   # 0 or -1
        if kind == "floor":
            return arith.add(self.k, quotient, negative, dtype=ptype)
        return arith.add(self.k, remainder, bits.and_(self.k, negative, d, dtype=ptype),
                         dtype=ptype)
