"""Shared-memory addresses of the copy instructions that take one address per lane (ldmatrix,
cp.async), derived from layouts: the swizzle split, thread-bit fits and bank conflicts.

A swizzle Sw<B,M,S> reads and writes only bits below its period P = 2**(B+M+|S|), so
Sw(x + y) = Sw(x) + y whenever y is a multiple of P. An element offset is split into
`inner` (swizzled at run time), `outer` (symbolic terms that are provably multiples of P:
pipeline stages, whole swizzle atoms) and `disp` (an int multiple of P, the instruction's
displacement): address = Sw(inner) + outer + disp.

>>> import sympy
>>> from layoutkit.algebra import Swizzle
>>> s, t = sympy.symbols("s t", integer=True, nonnegative=True)
>>> split_swizzled(4096 * s + 1040 + 32 * t, Swizzle(3, 3, 3))
(32*t + 16, 4096*s, 1024)
"""
from __future__ import annotations

from layoutkit.algebra.sympy_gate import deferred_module, sympy

from ..core.facts import provably_divisible

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)

BANKS = 32
BANK_BYTES = 4
WAVEFRONT_BYTES = BANKS * BANK_BYTES


def split_swizzled(offset, swizzle) -> tuple:
    """(inner, outer, disp) of an element offset under `swizzle` (a Swizzle or None); see the
    module docstring. Without a swizzle, inner is the whole symbolic part."""
    offset = sympy.expand(sympy.sympify(offset))
    inner, outer, disp = sympy.Integer(0), sympy.Integer(0), 0
    period = swizzle.size() if swizzle is not None else 1
    for term in sympy.Add.make_args(offset):
        coeff, factor = term.as_coeff_Mul()
        if term.is_Integer:
            disp += int(term) - int(term) % period
            inner += int(term) % period
        elif swizzle is not None and provably_divisible(term, period):
            outer += term
        elif swizzle is not None and coeff.is_Integer and coeff > period:
            # c * x = (c - c % P) * x + (c % P) * x, x an integer expression
            outer += (int(coeff) - int(coeff) % period) * factor
            inner += (int(coeff) % period) * factor
        else:
            inner += term
    return inner, outer, disp


def bit_fit(table: list):
    """(c, ((low bit, bits, weight), ...)) with table[t] == c + sum weight * ((t >> low) %
    2**bits) for every t, runs of bits with doubling weights merged; None if no such fit.

    >>> bit_fit([0, 64, 128, 192, 8, 72, 136, 200])
    (0, ((0, 2, 64), (2, 1, 8)))
    """
    c = table[0]
    n = len(table)
    nbits = max(n - 1, 1).bit_length()
    weights = [table[1 << b] - c if (1 << b) < n else 0 for b in range(nbits)]
    for t, value in enumerate(table):
        if value != c + sum(w for b, w in enumerate(weights) if t >> b & 1):
            return None
    runs: list = []
    for b, w in enumerate(weights):
        if w == 0:
            continue
        if runs and runs[-1][0] + runs[-1][1] == b and runs[-1][2] << runs[-1][1] == w:
            low, bits, weight = runs[-1]
            runs[-1] = (low, bits + 1, weight)
        else:
            runs.append((b, 1, w))
    return c, tuple(runs)


def bit_expr(tid, fit, threads: int):
    """The sympy expression of a `bit_fit` over the thread index `tid` (0 <= tid < threads)."""
    c, runs = fit
    expr = sympy.Integer(c)
    for low, bits, weight in runs:
        field = sympy.floor(tid / (1 << low)) if low else tid
        if threads > 1 << (low + bits):                  # higher bits exist: mask them off
            field = symbolic.mod(field, 1 << bits)
        expr += weight * field
    return expr


def bank_ways(byte_addresses: list, access_bytes: int) -> int:
    """The worst bank conflict (1 = none) of one warp-wide shared access where lane i accesses
    `access_bytes` at byte_addresses[i]: lanes are served in wavefronts of 128 bytes' worth of
    lanes (8 lanes of 16 bytes); within one, lanes touching different words of one bank
    serialize. (CUDA C Programming Guide, "Shared Memory" of compute capability 5.x and later.)"""
    per_wave = max(1, WAVEFRONT_BYTES // access_bytes)
    worst = 1
    for start in range(0, len(byte_addresses), per_wave):
        words: dict = {}
        for address in byte_addresses[start:start + per_wave]:
            for word in range(address // BANK_BYTES, (address + access_bytes) // BANK_BYTES):
                words.setdefault(word % BANKS, set()).add(word)
        worst = max([worst] + [len(w) for w in words.values()])
    return worst


__all__ = ["split_swizzled", "bit_fit", "bit_expr", "bank_ways"]
