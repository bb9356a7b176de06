"""Swizzle(bits, base, shift): the XOR function CuTe uses for bank-conflict-free shared memory."""
from __future__ import annotations

from . import domain
from .errors import LayoutError

__all__ = ["Swizzle"]


class Swizzle:
    """``Sw<B,M,S>``: XOR the B bits at [M+max(0,S), ...) into the B bits at [M-min(0,S), ...).

    As an int function: ``y = x ^ ((x & yyy_mask) >> S)`` (a left shift for negative S). It is an
    involution on the ints. Immutable and hashable.

    Domain: B, M, S are integers (numpy integers too; never bools or floats), B >= 0, M >= 0,
    |S| >= B; the argument of a call is an integer offset >= 0 (``sw(2.5)``, ``sw('8')`` and
    ``sw(True)`` raise LayoutError; a symbolic offset raises too: the DSL splits it first).

    >>> sw = Swizzle(3, 4, 3)
    >>> str(sw), sw(0b1000_0000), sw(0b1001_0000)
    ('Sw<3,4,3>', 144, 128)
    """

    __slots__ = ("bits", "base", "shift", "yyy_mask", "zzz_mask")

    def __init__(self, bits: int, base: int, shift: int):
        bits = domain.integer(bits, "Swizzle", "bits")
        base = domain.integer(base, "Swizzle", "base")
        shift = domain.integer(shift, "Swizzle", "shift")
        for name, v in (("bits", bits), ("base", base), ("shift", shift)):
            if type(v) is not int:
                domain.fail("Swizzle", name, v, "must be an int (a swizzle is a fixed bit pattern)")
        if bits < 0 or base < 0:
            raise LayoutError(f"Swizzle({bits},{base},{shift}): bits and base must be >= 0")
        if abs(shift) < bits:
            raise LayoutError(f"Swizzle({bits},{base},{shift}): |shift| must be >= bits "
                              "(the two bit fields would overlap)")
        mask = (1 << bits) - 1
        for name, v in (("bits", bits), ("base", base), ("shift", shift),
                        ("yyy_mask", mask << (base + max(0, shift))),
                        ("zzz_mask", mask << (base - min(0, shift)))):
            object.__setattr__(self, name, v)

    def __setattr__(self, name, value):
        raise AttributeError("Swizzle is immutable")

    def __call__(self, offset):
        if type(offset) is not int:
            offset = domain.integer(offset, str(self), "offset")
            if type(offset) is not int:
                raise LayoutError(f"{self}: cannot swizzle the symbolic offset {offset}")
        if offset < 0:
            domain.fail(str(self), "offset", offset, "must be >= 0 (a swizzle maps offsets >= 0)")
        y = offset & self.yyy_mask
        return offset ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)

    def size(self) -> int:
        """The period of the function: 2**(bits + base + |shift|)."""
        return 1 << (self.bits + self.base + abs(self.shift))

    def cosize(self) -> int:
        return self.size()

    def __eq__(self, other):
        if type(other) is not Swizzle:
            return NotImplemented
        return (self.bits, self.base, self.shift) == (other.bits, other.base, other.shift)

    def __hash__(self):
        return hash(("Swizzle", self.bits, self.base, self.shift))

    def __str__(self):
        return f"Sw<{self.bits},{self.base},{self.shift}>"

    def __repr__(self):
        return f"Swizzle({self.bits}, {self.base}, {self.shift})"
