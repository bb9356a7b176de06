"""Scalar numerics of the kernel IR as the GPU computes them (PTX ISA semantics, sm_90).

Register values: f32, bf16, e4m3 and e5m2 as numpy float32 (a bf16 or fp8 value is a float32
that its type represents exactly; fp8 rounding is float8.py's), f16 as numpy float16, f64 as
Python float, integers as Python ints wrapped to their width, bools as Python bools. Every
float result is rounded once to nearest even: add, sub, mul, div and sqrt are computed in
float64 and rounded to the target (exact, since float64 has at least 2p + 2 bits for p = 24,
11, 8: double rounding is innocuous, Figueroa 1995); fma
rounds the exact a * b + c once (`round_pair`). ex2/rsqrt are the SFU approximations: float64
results rounded to the target. Comparisons are ordered (false when an operand is NaN), max/min
return the non-NaN operand (PTX ISA "setp", "max").

>>> float(to_dtype(1.0 + 2 ** -9, BF16))          # a tie: rounds to the even neighbour
1.0
>>> wrap(2 ** 31, I32), trunc_div(-7, 2)
(-2147483648, -3)
"""
from __future__ import annotations

import math
import operator
import struct

import numpy as np

from ..core.types import DType, bf16, bool_, f16, f32, f64, i32, i64, u32
from .float8 import FORMATS as FP8_FORMATS
from .float8 import round_fp8

BF16, F16, F32, F64, I32, I64, U32, BOOL = bf16, f16, f32, f64, i32, i64, u32, bool_

_BITS = {t.name: 8 * t.nbytes for t in (I32, I64, U32)}
# name -> (mask, the sign bit or 0 for an unsigned type, 2**bits)
_WRAP = {t.name: ((1 << _BITS[t.name]) - 1, (1 << (_BITS[t.name] - 1)) * (t.kind == "int"),
                  1 << _BITS[t.name]) for t in (I32, I64, U32)}


def wrap(value: int, dtype: DType) -> int:
    """`value` reduced to `dtype`'s width (two's complement for signed types)."""
    mask, sign, size = _WRAP[dtype.name]
    value &= mask
    return value - size if value & sign else value


def trunc_div(a: int, b: int) -> int:
    """PTX div.s32/s64: the quotient rounded toward zero (b != 0)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def trunc_rem(a: int, b: int) -> int:
    """PTX rem.s32/s64: a - b * trunc_div(a, b), the sign of a."""
    return a - b * trunc_div(a, b)


def bf16_from_f32_bits(bits: np.ndarray) -> np.ndarray:
    """Round float32 bit patterns (uint32) to bf16 bit patterns (uint16), nearest even;
    a NaN stays a NaN (cvt.rn.bf16.f32 gives the canonical 0x7FFF)."""
    bits = bits.astype(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16
    return np.where(nan, np.uint32(0x7FFF), rounded).astype(np.uint16)


def bf16_round(values) -> np.ndarray:
    """float32 array of the bf16 values nearest (ties to even) to the float32 `values` (what
    cvt.rn.bf16.f32 then a widening back gives)."""
    as32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = bf16_from_f32_bits(as32.view(np.uint32)).astype(np.uint32) << 16
    return bits.view(np.float32)


def to_dtype(value, dtype: DType):
    """The register value of `dtype` nearest (even) to the Python/numpy number `value`."""
    name = dtype.name
    if name == "f32":
        return value if type(value) is _FLOAT32 else _make(float(value), name)
    if name == "bf16":
        return _round_pair(float(value), 0.0, BF16)
    if name == "f16":
        return _make(float(value), name)
    if name in FP8_FORMATS:                     # cvt.rn.satfinite
        return np.float32(round_fp8(float(value), name))
    if name == "f64":
        return float(value)
    if name == "bool":
        return bool(value)
    return wrap(int(value), dtype)


_MANTISSA = {"f32": 24, "bf16": 8, "f16": 11}
_MIN_EXP = {"f32": -126, "bf16": -126, "f16": -14}
_TINY = {name: math.ldexp(1.0, e) for name, e in _MIN_EXP.items()}   # the smallest normal
_MAX = {"f32": float(np.finfo(np.float32).max), "f16": 65504.0,
        "bf16": float(np.float32(np.uint32(0x7F7F0000).view(np.float32)))}


def _round_pair(hi: float, lo: float, dtype: DType):
    """The `dtype` value nearest (ties to even) to the exact real hi + lo, where lo is the
    rounding error of hi (|lo| <= ulp(hi) / 2, as from TwoSum or an exact product)."""
    name = dtype.name
    if not math.isfinite(hi) or hi == 0.0:
        return _make(hi + lo, name) if hi == 0.0 and lo != 0.0 and not math.isfinite(lo) \
            else (_round_pair(lo, 0.0, dtype) if hi == 0.0 and lo != 0.0 else _make(hi, name))
    p = _MANTISSA[name]
    e = max(math.frexp(hi)[1] - 1, _MIN_EXP[name])     # hi's binade (subnormals: the minimum)
    quantum = math.ldexp(1.0, e - p + 1)                # the target's ulp there
    scaled = hi / quantum                               # exact: a power-of-two scaling
    floor = math.floor(scaled)
    frac = scaled - floor                               # exact
    if frac == 0.0:
        result = hi                                     # on the grid; lo is below half an ulp
    elif frac != 0.5:
        result = (floor + (frac > 0.5)) * quantum
    elif lo != 0.0:                                     # hi is a midpoint, x is not
        result = (floor + (lo > 0)) * quantum
    else:
        result = (floor + floor % 2) * quantum          # a true tie: to even
    if abs(result) > _MAX[name]:                        # IEEE 754 overflow to infinity
        result = math.copysign(math.inf, result)
    return _make(result, name)


_F32_MAX, _F16_MAX = _MAX["f32"], _MAX["f16"]


_FLOAT32 = np.float32
# _ONE32 * x is the float32 nearest (even) to a float |x| <= the float32 maximum, as
# _FLOAT32(x) is, in a fifth of its time (numpy casts the Python float to float32, then
# multiplies exactly); past the maximum numpy would warn of the overflow
_ONE32 = _FLOAT32(1.0)
_F32_BITS, _U32_BITS = struct.Struct("<f"), struct.Struct("<I")
_F64_BITS, _F64_PACK = struct.Struct("<Q"), struct.Struct("<d").pack
_F32_MIN_NORMAL = _TINY["f32"]


# the float32 register value of every bf16 bit pattern (its high half), as numpy scalars:
# a bf16 result is looked up, not built
BF16_SCALARS = list((np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32))


def _bf16_of_f32(a):
    """The bf16 value nearest (even) to a float32 `a` (or the float it is) that is not NaN, as
    a float32: the bf16 rounding of its bit pattern (bf16_from_f32_bits, one value; equal to
    _round_pair(a, 0, BF16))."""
    (bits,) = _U32_BITS.unpack(_F32_BITS.pack(a))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    if rounded == 0x8000 and bits != 0x80000000:
        rounded = 0                 # a negative value rounding to zero: +0, as _round_pair gives
    return BF16_SCALARS[rounded]


def _make(value: float, name: str):
    # numpy warns only of a finite value past the type's range (not of NaN or an infinity)
    if name == "f16":
        if not _F16_MAX < abs(value) < math.inf:
            return np.float16(value)
    elif -_F32_MAX <= value <= _F32_MAX or abs(value) == math.inf:
        return _ONE32 * value               # (an infinity too: inf * 1 warns of nothing)
    elif value != value:
        return _FLOAT32(value)              # NaN (its payload as the cast keeps it)
    with np.errstate(over="ignore"):
        return np.float16(value) if name == "f16" else np.float32(value)


def round_float(value: float, dtype: DType):
    """`value` (a float64 result of one operation on `dtype` operands) rounded to dtype."""
    name = dtype.name
    if name == "f32":
        return _ONE32 * value if -_F32_MAX <= value <= _F32_MAX else _make(value, name)
    if name == "f16":
        return _make(value, name)
    if name == "f64":
        return value
    return _round_pair(value, 0.0, BF16)


def _two_sum(a: float, b: float) -> tuple[float, float]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fma(a, b, c, dtype: DType):
    """a * b + c rounded once (fma.rn); for f64 the product's low part is split (Dekker)."""
    if dtype.name == "f64":
        hi, lo = _two_product(float(a), float(b))
        s, e = _two_sum(hi, float(c))
        return s + (e + lo)
    product, z = float(a) * float(b), float(c)         # exact: 2p <= 53 bits
    if not math.isfinite(product) or not math.isfinite(z):
        return round_float(product + z, dtype)
    s = product + z
    bb = s - product
    e = (product - (s - bb)) + (z - bb)                 # _two_sum: s + e is exact
    if dtype.name == "f32" and (_F32_MIN_NORMAL <= abs(s) <= _F32_MAX and (
            e == 0.0 or _F64_BITS.unpack(_F64_PACK(s))[0] & 0x1FFFFFFF != 0x10000000)
            or s == 0.0 == e):
        # s + e and s round alike unless s is a float32 midpoint (a double nearer to s + e
        # than s would lie between them otherwise); the normal range has no zero results.
        # An exact zero keeps the sign the double sum gave it (IEEE 754's, as fma.rn's)
        return _ONE32 * s
    return _round_pair(s, e, dtype)


def _two_product(a: float, b: float) -> tuple[float, float]:
    p = a * b
    if not math.isfinite(p):
        return p, 0.0

    def split(x):
        t = 134217729.0 * x
        hi = t - (t - x)
        return hi, x - hi
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}
_SAFE = 2.0 ** 63       # float32 operands below it in magnitude: sums and products stay finite


def binary(kind: str, a, b, dtype: DType):
    """The `binary` op (add sub mul div max min) on register values of dtype."""
    if dtype.name == "f32":                 # the common case: f32 mul, add, max, sub, min
        x, y = float(a), float(b)
        # (the literals are +-_SAFE)
        if type(a) is _FLOAT32 is type(b) and -9.223372036854775808e18 < x < \
                9.223372036854775808e18 and -9.223372036854775808e18 < y < \
                9.223372036854775808e18:
            # numpy's float32 arithmetic rounds once as PTX does, and cannot overflow (nor
            # warn) for these operands; NaN and infinities take the general path
            if kind == "mul":
                return a * b
            if kind == "add":
                return a + b
            if kind == "max":
                if x != 0.0 or y != 0.0:
                    return a if x > y else b
                return a if math.copysign(1.0, x) > 0 else b    # two zeros: +0 if either is
            if kind == "sub":
                return a - b
            if kind == "min":
                if x != 0.0 or y != 0.0:
                    return b if x > y else a
                return a if math.copysign(1.0, x) < 0 else b    # -0 if either is
        arith = _ARITH.get(kind)            # operator's: a NaN keeps the payload it had
        if arith is not None:
            r = arith(x, y)
            return _ONE32 * r if -_F32_MAX <= r <= _F32_MAX else round_float(r, dtype)
    if dtype.kind == "float":
        x, y = float(a), float(b)
        arith = _ARITH.get(kind)
        if arith is not None:
            r = arith(x, y)
            if dtype.name == "f32" and -_F32_MAX <= r <= _F32_MAX:
                return _ONE32 * r               # round_float's common case
            return round_float(r, dtype)
        if kind == "max" or kind == "min":
            if math.isnan(x):
                return b
            if math.isnan(y):
                return a
            if x == y == 0.0:        # max(-0, +0) = +0, min(-0, +0) = -0
                neg = math.copysign(1.0, x) < 0 or math.copysign(1.0, y) < 0
                pos = math.copysign(1.0, x) > 0 or math.copysign(1.0, y) > 0
                zero = 0.0 if (kind == "max" and pos) or (kind == "min" and not neg) else -0.0
                return to_dtype(zero, dtype)
            return a if (x > y) == (kind == "max") else b
        if y == 0.0:                                    # div
            r = math.nan if x == 0.0 or math.isnan(x) else math.copysign(math.inf, x) * \
                math.copysign(1.0, y)
        else:
            r = x / y
        return round_float(r, dtype)
    if kind == "add":
        return wrap(a + b, dtype)
    if kind == "sub":
        return wrap(a - b, dtype)
    if kind == "mul":
        return wrap(a * b, dtype)      # mul.lo
    if kind == "max":
        return max(a, b)
    if kind == "min":
        return min(a, b)
    return None                          # div: the caller checks b != 0 (it names the op)


def int_div(a: int, b: int, dtype: DType) -> int:
    """div.s32/s64 (toward zero) or div.u32; b != 0."""
    if dtype.kind == "uint":
        return a // b
    return wrap(trunc_div(a, b), dtype)


def unary(kind: str, a, dtype: DType, ftz: bool = False):
    """The `unary` op (neg abs exp2 log2 sqrt rsqrt rcp tanh) on a register value of dtype; `ftz`
    (exp2): subnormal input and result flushed to zero, as bf16 always is."""
    if dtype.kind != "float":
        return wrap(-a, dtype) if kind == "neg" else wrap(abs(a), dtype)
    x = float(a)
    if kind == "exp2" and -126.0 <= x <= 127.0 and dtype.name == "f32":
        return _ONE32 * 2.0 ** x        # the common case: a normal result (nothing to flush)
    if kind == "neg":
        return to_dtype(-x, dtype)
    if kind == "abs":
        return to_dtype(abs(x), dtype)
    if kind == "exp2":
        flush = ftz or dtype.name == "bf16"                    # ex2.approx.ftz
        if flush:
            tiny = _TINY[dtype.name]
            if x != 0.0 and abs(x) < tiny:                     # subnormal
                x = 0.0
        r = math.inf if x > 1024 else 0.0 if x < -1100 else (
            math.nan if x != x else 2.0 ** x)
        out = round_float(r, dtype)
        if flush:
            y = float(out)
            if y != 0.0 and abs(y) < tiny:
                return to_dtype(0.0, dtype)
        return out
    if kind == "log2":              # lg2.approx: -inf at +-0, NaN below 0
        r = -math.inf if x == 0 else math.nan if x < 0 or math.isnan(x) else math.log2(x)
        return round_float(r, dtype)
    if kind == "sqrt":
        return round_float(math.sqrt(x) if x >= 0 else (x if x == 0 else math.nan), dtype)
    if kind == "tanh":              # tanh.approx: the exact value rounded (the SFU's 2^-11 aside)
        return round_float(math.tanh(x), dtype)
    if kind == "rsqrt":
        r = math.inf if x == 0 else math.nan if x < 0 or math.isnan(x) else 1.0 / math.sqrt(x)
        return round_float(math.copysign(r, x) if x == 0 else r, dtype)
    r = math.copysign(math.inf, x) if x == 0 else 1.0 / x     # rcp.rn
    return round_float(r, dtype)


_COMPARE = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
            "eq": operator.eq, "ne": operator.ne}


def compare(kind: str, a, b, dtype: DType) -> bool:
    """setp.<kind>: ordered for floats (false when either is NaN)."""
    if dtype.kind == "float":
        x, y = float(a), float(b)
        if x != x or y != y:
            return False
        a, b = x, y
    elif type(a) is not int or type(b) is not int:      # bools; an unavailable value refuses
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
                "ne": a != b}[kind]
    return _COMPARE[kind](a, b)


def cast(a, src: DType, dst: DType):
    """cvt as the lowering emits it: float narrowing and int -> float round to nearest even,
    float -> int truncates toward zero and saturates (NaN -> 0), int -> int wraps."""
    if type(a) is _FLOAT32:                     # an f32 register (also bf16, fp8)
        x = float(a)
        if x == x:                              # not NaN
            name = dst.name
            if name == "bf16":
                return _bf16_of_f32(x)
            if name == "f32":
                return a                        # exact
    if src.kind == "float" and dst.kind == "float":
        return to_dtype(float(a), dst)
    if dst.is_float:
        hi = float(a)
        lo = float(a - int(hi)) if math.isfinite(hi) else 0.0
        return _round_pair(hi, lo, dst) if dst.name != "f64" else hi
    if src.is_float:
        x = float(a)
        if math.isnan(x):
            return 0
        bits = _BITS[dst.name]
        lo, hi = (0, (1 << bits) - 1) if dst.kind == "uint" else (-(1 << bits - 1),
                                                                  (1 << bits - 1) - 1)
        if math.isinf(x):
            return hi if x > 0 else lo
        return min(max(int(x), lo), hi)
    return wrap(int(a), dst)


__all__ = ["wrap", "trunc_div", "trunc_rem", "to_dtype", "round_float", "fma", "binary",
           "int_div", "unary", "compare", "cast", "bf16_round", "bf16_from_f32_bits"]
