"""Named CTA barriers: bar.sync / bar.arrive / bar.red and the barrier.* forms.

Rules (PTX ISA "bar, barrier", hopper-ptx.md §7, ptxas 13.0): 16 barriers per CTA, ids 0..15
(immediate or u32 register; a register id makes ptxas reserve all 16). The thread count is
the number of threads taking part (arrivers + waiters), a multiple of the warp size 32, at most
1024; omitted on sync/red it means the whole CTA, and it is mandatory on arrive. `bar.*` equals
`barrier.*.aligned` (every thread of a warp executes the same instruction); the non-aligned
`barrier.sync/arrive/red` tolerate a divergent warp. Keep id 0 for whole-CTA syncs
(`bar.sync 0` = __syncthreads). `bar.red.popc.u32` counts, `bar.red.{and,or}.pred` combine a
predicate over the participating threads.
"""
from __future__ import annotations

from ..builder import KernelBuilder, PTXBuildError, Reg
from .checks import choose, dest, flag, source
from .hopper_operands import PRED, U32, u32_operand
from .warp import WARP_SIZE

NUM_BARRIERS = 16             # named barriers per CTA, ids 0..15 (PTX ISA "bar")
MAX_THREADS = 1024            # threads per CTA, the largest barrier count


def _operands(k: KernelBuilder, instr: str, barrier_id, count, *, count_required: bool) -> list:
    ops = [u32_operand(k, instr, "barrier_id", barrier_id, 0, NUM_BARRIERS - 1,
                       rule=f"a CTA has {NUM_BARRIERS} named barriers")]
    if count is None:
        if count_required:
            raise PTXBuildError("arrive needs the thread count (arrivers + waiters)",
                                instruction=instr, operand="count", value=None)
        return ops
    ops.append(u32_operand(k, instr, "count", count, WARP_SIZE, MAX_THREADS, multiple=WARP_SIZE,
                           rule="whole warps, at most one CTA"))
    return ops


def bar_sync(k: KernelBuilder, barrier_id, count=None, *, pred=None) -> None:
    """Wait at barrier `barrier_id` until `count` threads (default: the CTA) have arrived.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); bar_sync(k, 0); bar_sync(k, 2, 288); k.body_lines()
    ['    bar.sync 0;', '    bar.sync 2, 288;']
    """
    k.emit("bar.sync", _operands(k, "bar.sync", barrier_id, count, count_required=False),
           pred=pred)


def bar_arrive(k: KernelBuilder, barrier_id, count, *, pred=None) -> None:
    """Arrive at barrier `barrier_id` without waiting (producer side); `count` is mandatory."""
    k.emit("bar.arrive", _operands(k, "bar.arrive", barrier_id, count, count_required=True),
           pred=pred)


def barrier_sync(k: KernelBuilder, barrier_id, count=None, *, aligned: bool = False, pred=None) -> None:
    """`barrier.sync{.aligned} id{, count}` (non-aligned by default: divergent warps allowed)."""
    instr = "barrier.sync.aligned" if flag("barrier.sync", "aligned", aligned) else "barrier.sync"
    k.emit(instr, _operands(k, instr, barrier_id, count, count_required=False), pred=pred)


def barrier_arrive(k: KernelBuilder, barrier_id, count, *, aligned: bool = False, pred=None) -> None:
    """`barrier.arrive{.aligned} id, count`."""
    instr = "barrier.arrive.aligned" if flag("barrier.arrive", "aligned", aligned)\
        else "barrier.arrive"
    k.emit(instr, _operands(k, instr, barrier_id, count, count_required=True), pred=pred)


def bar_red(k: KernelBuilder, op: str, barrier_id, c, count=None, *, aligned: bool = True, out=None,
            pred=None) -> Reg:
    """Barrier with a reduction of predicate `c` (or its negation ~p) over the participants:
    op 'popc' gives the u32 count of true c, 'and'/'or' a predicate.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); p = k.reg("pred")
    >>> _ = bar_red(k, "popc", 1, ~p, 64); k.body_lines()[-1]
    '    bar.red.popc.u32 %u0, 1, 64, !%p0;'
    """
    choose("bar.red", "op", op, ("popc", "and", "or"))
    rtype = U32 if op == "popc" else PRED
    base = "bar.red" if flag("bar.red", "aligned", aligned) else "barrier.red"
    instr = f"{base}.{op}.{rtype}"
    operands = _operands(k, instr, barrier_id, count, count_required=False)
    operands.append(source(k, instr, "c", c, PRED, imm=False))
    d = dest(k, instr, out, rtype)
    k.emit(instr, (d, *operands), defs=(d,), pred=pred)
    return d


__all__ = ["MAX_THREADS", "NUM_BARRIERS", "bar_arrive", "bar_red", "bar_sync", "barrier_arrive",
           "barrier_sync"]
