"""Warp-level data exchange and voting: shfl.sync, vote.sync, bar.warp.sync.

shfl.sync.{up,down,bfly,idx}.b32 d[|p], a, b, c, membermask (PTX ISA "shfl.sync"): b is the
lane/offset (0..31), c packs the clamp value (bits 0-4) and the segment mask (bits 8-12) -
0x1f for idx/down/bfly over a whole warp, 0 for up. `membermask` names the participating
lanes (0xffffffff = all). vote.sync.{all,any,uni}.pred and vote.sync.ballot.b32.
"""
from __future__ import annotations

from ..builder import TYPES, KernelBuilder, PTXBuildError, Reg
from .checks import choose, dest, source

B32, U32, PRED = TYPES["b32"], TYPES["u32"], TYPES["pred"]
WARP_SIZE = 32                 # threads per warp (PTX ISA: WARP_SZ)
FULL_MASK = 0xFFFFFFFF         # every lane of a warp


def _immediate_range(instr: str, operand: str, value, hi: int):
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= hi:
        raise PTXBuildError(f"must be in 0..{hi}", instruction=instr, operand=operand, value=value)


def shfl(k: KernelBuilder, mode: str, a, b, *, c=None, membermask=FULL_MASK, with_pred: bool = False,
         out=None, pred=None) -> "Reg | tuple[Reg, Reg]":
    """Shuffle a 32-bit value across the warp. `c` defaults to 0 for 'up' and 0x1f otherwise.
    With `with_pred`, also returns the predicate 'source lane was in range' as (d, p).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); x = k.reg("f32")
    >>> _ = shfl(k, "bfly", x, 1); k.body_lines()[-1]
    '    shfl.sync.bfly.b32 %f1, %f0, 1, 31, 0xFFFFFFFF;'
    """
    choose("shfl.sync", "mode", mode, ("up", "down", "bfly", "idx"))
    instr = f"shfl.sync.{mode}.b32"
    if c is None:
        c = 0 if mode == "up" else 0x1F
    _immediate_range(instr, "b", b, 31)
    _immediate_range(instr, "c", c, 0x1FFF)
    srcs = (source(k, instr, "a", a, B32), source(k, instr, "b", b, B32),
            source(k, instr, "c", c, B32), source(k, instr, "membermask", membermask, B32))
    d = dest(k, instr, out, a.type if out is None and isinstance(a, Reg) else B32)
    defs, target = (d,), d
    if with_pred:
        p = k.reg(PRED)
        defs, target = (d, p), f"{d}|{p}"
    k.emit(instr, (target, *srcs), defs=defs, pred=pred)
    return defs if with_pred else d


def vote(k: KernelBuilder, mode: str, p, *, membermask=FULL_MASK, out=None, pred=None) -> Reg:
    """`vote.sync.{all,any,uni}.pred d, p, mask` (a predicate), or mode 'ballot':
    `vote.sync.ballot.b32 d, p, mask` (bit i = lane i's p)."""
    choose("vote.sync", "mode", mode, ("all", "any", "uni", "ballot"))
    t = B32 if mode == "ballot" else PRED
    instr = f"vote.sync.{mode}.{t}"
    srcs = (source(k, instr, "p", p, PRED, imm=False),
            source(k, instr, "membermask", membermask, B32))
    d = dest(k, instr, out, U32 if mode == "ballot" and out is None else t)
    k.emit(instr, (d, *srcs), defs=(d,), pred=pred)
    return d


def bar_warp_sync(k: KernelBuilder, membermask=FULL_MASK, *, pred=None) -> None:
    """`bar.warp.sync mask;` - reconverge the named lanes and order their memory accesses."""
    k.emit("bar.warp.sync", (source(k, "bar.warp.sync", "membermask", membermask, B32),),
           pred=pred)
