"""The Ampere-era (sm_80+) instruction namespace: every family of this package except forms
that need sm_90. `from layoutkit.ptx.isa import sm80 as I; I.add(k, a, b)`.

Names that collide with Python keywords/builtins carry a trailing underscore: and_, or_,
not_, min_, max_, abs_, exit_.
"""
from __future__ import annotations

from .arith import abs_, add, div, fma, mad, max_, min_, mul, mul_hi, mul_wide, neg, rem, sub
from .async_copy import commit_group, cp_async, wait_all, wait_group
from .atomic import atom, red
from .bits import and_, bfe, bfi, brev, clz, not_, or_, popc, shl, shr, xor
from .compare import selp, setp
from .control import bra, exit_, fence, membar, ret, trap
from .convert import cvt, cvt_pack, mov, pack, unpack
from .matrix import ldmatrix, mma_sync
from .memory import cvta, ld, ld_param, st
from .special import special, sreg
from .transcendental import ex2, lg2, rcp, rsqrt, sqrt
from .warp import bar_warp_sync, shfl, vote

__all__ = [
    "abs_", "add", "and_", "atom", "bar_warp_sync", "bfe", "bfi", "bra", "brev", "clz",
    "commit_group", "cp_async", "cvt", "cvt_pack", "cvta", "div", "ex2", "exit_", "fence", "fma",
    "ld", "ld_param", "ldmatrix", "lg2", "mad", "max_", "membar", "min_", "mma_sync", "mov",
    "mul", "mul_hi", "mul_wide", "neg", "not_", "or_", "pack", "popc", "rcp", "red", "rem",
    "ret", "rsqrt", "selp", "setp", "shfl", "shl", "shr", "special", "sqrt", "sreg", "st",
    "sub", "trap", "unpack", "vote", "wait_all", "wait_group", "xor",
]
