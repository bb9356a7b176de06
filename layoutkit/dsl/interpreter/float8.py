"""The 8-bit floats e4m3 and e5m2 (OCP FP8; torch.float8_e4m3fn, torch.float8_e5m2): their bit
patterns and the rounding of `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` (PTX ISA "cvt"), in numpy.

A register value of an fp8 type is, as for bf16, a numpy float32 that the format represents
exactly. Rounding is to nearest, ties to even, on the format's grid (subnormals included), then
`.satfinite`: a NaN stays NaN, a result beyond the largest finite value (an infinity too)
becomes that value with its sign. It is computed exactly: |x| / quantum is a power-of-two
scaling of a float64, and numpy's rint rounds ties to even.

    format  exponent bias  mantissa bits  largest   smallest normal  smallest subnormal  inf
    e4m3    4        7     3              448       2**-6            2**-9               none
    e5m2    5        15    2              57344     2**-14           2**-16              yes

>>> round_fp8([1.0625, 1.1875, 500.0, -1e-4], "e4m3").tolist()   # ties to even, saturation
[1.0, 1.25, 448.0, -0.0]
>>> hex(int(to_bits([448.0], "e4m3")[0])), float(from_bits([0x7B], "e5m2")[0])
('0x7e', 57344.0)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Format:
    """An fp8 format: `mantissa` bits, exponent `bias`, `max_finite` value, whether the all-ones
    exponent is infinities and NaNs (e5m2, IEEE-like) or only S.1111.111 is NaN (e4m3)."""

    name: str
    mantissa: int
    bias: int
    max_finite: float
    ieee_specials: bool

    @property
    def min_exponent(self) -> int:
        """The exponent of the smallest normal value."""
        return 1 - self.bias


FORMATS = {"e4m3": Format("e4m3", 3, 7, 448.0, False),
           "e5m2": Format("e5m2", 2, 15, 57344.0, True)}
NAN_BITS = 0x7F             # the NaN cvt writes (and the only positive NaN of e4m3)


def _format(name: str) -> Format:
    if name not in FORMATS:
        raise ValueError(f"an fp8 format is one of {', '.join(FORMATS)}, got {name!r}")
    return FORMATS[name]


def _decode_table(fmt: Format) -> np.ndarray:
    """float64 value of every bit pattern 0..255."""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exp_field = (bits >> fmt.mantissa) & ((0x7F >> fmt.mantissa))
    mant = bits & ((1 << fmt.mantissa) - 1)
    frac = mant / (1 << fmt.mantissa)
    normal = np.ldexp(1.0 + frac, exp_field - fmt.bias)
    subnormal = np.ldexp(frac, fmt.min_exponent)
    values = sign * np.where(exp_field == 0, subnormal, normal)
    top = (0x7F >> fmt.mantissa)
    nan = (exp_field == top) & (mant != 0) if fmt.ieee_specials else (bits & 0x7F) == 0x7F
    if fmt.ieee_specials:
        values = np.where((exp_field == top) & (mant == 0), sign * np.inf, values)
    return np.where(nan, np.copysign(np.nan, sign), values)


_TABLES = {name: _decode_table(fmt) for name, fmt in FORMATS.items()}
# the positive finite values in bit order (increasing): encoding is a search over them
_POSITIVE = {name: table[:(0x7C if FORMATS[name].ieee_specials else 0x7F)]
             for name, table in _TABLES.items()}


def round_fp8(values, fmt: str) -> np.ndarray:
    """float64 array of the fp8 values `cvt.rn.satfinite` gives for the float `values`."""
    f = _format(fmt)
    x = np.asarray(values, dtype=np.float64)
    a = np.abs(x)
    finite = np.isfinite(a) & (a > 0)
    _, e = np.frexp(np.where(finite, a, 1.0))            # a = m * 2**e, m in [0.5, 1)
    quantum = np.ldexp(1.0, np.maximum(e - 1, f.min_exponent) - f.mantissa)
    rounded = np.where(finite, np.rint(np.where(finite, a, 0.0) / quantum) * quantum, a)
    rounded = np.minimum(rounded, f.max_finite)           # .satfinite (infinities too)
    return np.where(np.isnan(x), np.nan, np.copysign(rounded, x))


def from_bits(bits, fmt: str) -> np.ndarray:
    """float32 values of fp8 bit patterns (a uint8 array)."""
    return _TABLES[_format(fmt).name][np.asarray(bits, dtype=np.uint8)].astype(np.float32)


def to_bits(values, fmt: str) -> np.ndarray:
    """uint8 bit patterns of fp8 values (exactly representable ones: round_fp8's results, or
    infinities for e5m2); NaN becomes NAN_BITS."""
    f = _format(fmt)
    x = np.asarray(values, dtype=np.float64)
    a = np.abs(x)
    nan = np.isnan(x)
    positive = _POSITIVE[f.name]
    found = np.searchsorted(positive, np.where(nan, 0.0, a))
    inexact = ~nan & ((found >= positive.size) |
                      (positive[np.minimum(found, positive.size - 1)] != a))
    infinite = np.isinf(a) & f.ieee_specials
    if np.any(inexact & ~infinite):
        bad = float(x[inexact & ~infinite].ravel()[0])
        raise ValueError(f"{bad!r} is not an {f.name} value (round it with round_fp8 first)")
    magnitude = np.where(infinite, 0x7C, found)
    sign = np.where(np.signbit(x), 0x80, 0)
    return np.where(nan, NAN_BITS, magnitude | sign).astype(np.uint8)


__all__ = ["FORMATS", "Format", "NAN_BITS", "from_bits", "round_fp8", "to_bits"]
