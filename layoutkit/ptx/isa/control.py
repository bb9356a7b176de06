"""Control flow and ordering: bra (divergent or .uni), ret, exit, trap, membar, fence, pragma.

`bra.uni` promises that every active thread takes the same branch (a guard must then be
warp-uniform); plain `bra` may diverge. Memory fences: `membar.{cta,gl,sys}` and
`fence.{sc,acq_rel}.{cta,cluster,gpu,sys}` (cluster scope needs sm_90).
"""
from __future__ import annotations

from ..builder import KernelBuilder, Label, Requirement
from .checks import choose

FENCE_SCOPES = ("cta", "cluster", "gpu", "sys")


def bra(k: KernelBuilder, target: Label, *, uni: bool = False, pred=None) -> None:
    """Branch to `target` (`@%p bra $L_0;`); `uni=True` emits `bra.uni` (uniform branch).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); top = k.label("loop"); k.place(top)
    >>> bra(k, top, uni=True); k.body_lines()[-1]
    '    bra.uni $loop_0;'
    """
    opcode = "bra.uni" if uni else "bra"
    k.emit(opcode, (k.use_label(target, opcode),), pred=pred)


def ret(k: KernelBuilder, *, pred=None) -> None:
    """Return from the kernel (`ret;`)."""
    k.emit("ret", pred=pred)


def exit_(k: KernelBuilder, *, pred=None) -> None:
    """Terminate this thread (`exit;`)."""
    k.emit("exit", pred=pred)


def trap(k: KernelBuilder, *, pred=None) -> None:
    """Abort the kernel with an error (`trap;`); the CUDA context is unusable afterwards."""
    k.emit("trap", pred=pred)


def membar(k: KernelBuilder, level: str = "gl", *, pred=None) -> None:
    """`membar.{cta,gl,sys}`: order this thread's memory accesses at that level."""
    choose("membar", "level", level, ("cta", "gl", "sys"))
    k.emit(f"membar.{level}", pred=pred)


def fence(k: KernelBuilder, sem: str = "acq_rel", scope: str = "gpu", *, pred=None) -> None:
    """`fence.{sc,acq_rel}.scope` (sequentially consistent or acquire-release)."""
    choose("fence", "sem", sem, ("sc", "acq_rel"))
    choose("fence", "scope", scope, FENCE_SCOPES)
    requires = Requirement((7, 8), 90) if scope == "cluster" else Requirement()
    k.emit(f"fence.{sem}.{scope}", pred=pred, requires=requires)


PRAGMAS = ("nounroll",)


def pragma(k: KernelBuilder, name: str = "nounroll") -> None:
    """`.pragma "nounroll";`: placed in a loop's header block (right after its label), ptxas
    does not unroll that loop (PTX ISA "Descriptions of .pragma strings").

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); pragma(k); k.body_lines()[-1]
    '    .pragma "nounroll";'
    """
    choose(".pragma", "name", name, PRAGMAS)
    k.emit(f'.pragma "{name}"')
