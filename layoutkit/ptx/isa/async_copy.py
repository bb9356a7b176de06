"""Ampere per-thread asynchronous copies global -> shared: cp.async + commit/wait groups.

Rules (PTX ISA "cp.async", hopper-ptx.md §8): `.ca` copies 4, 8 or 16 bytes, `.cg` only 16;
both addresses aligned to the size; an optional src-size (0..size, register or immediate)
copies that many bytes and zero-fills the rest (predication-free out-of-bounds);
optional `.L2::64B/128B/256B` prefetch. `wait_group N` waits until at most N groups are
pending; other threads' data also needs a barrier afterwards. sm_80, PTX 7.0.
"""
from __future__ import annotations

from ..builder import TYPES, KernelBuilder, PTXBuildError, Requirement
from .checks import address, choose, imm_int, mods, source

SM80 = Requirement((7, 0), 80)
SIZES = {"ca": (4, 8, 16), "cg": (16,)}


def cp_async(k: KernelBuilder, dst, src, size: int, *, cache: str = "cg", src_size=None,
             prefetch=None, pred=None) -> None:
    """Copy `size` bytes from global `src` to shared `dst` asynchronously.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); s, g = k.reg("u32"), k.reg("u64")
    >>> cp_async(k, s, g, 16, src_size=0); k.body_lines()[-1]
    '    cp.async.cg.shared.global [%u0], [%ud0], 16, 0;'
    """
    choose("cp.async", "cache", cache, SIZES)
    opcode = mods("cp.async", cache, "shared", "global",
                  "L2::" + choose("cp.async", "prefetch", prefetch, ("64B", "128B", "256B"))
                  if prefetch is not None else "")
    if size not in SIZES[cache]:
        raise PTXBuildError(f"cp.async.{cache} copies {', '.join(map(str, SIZES[cache]))} bytes",
                            instruction=opcode, operand="size", value=size)
    operands = [address(k, opcode, "dst", dst), address(k, opcode, "src", src, widths=(64,)),
                size]
    if src_size is not None:
        if isinstance(src_size, int):
            imm_int(opcode, "src_size", src_size, 0, size)
        operands.append(source(k, opcode, "src_size", src_size, TYPES["u32"]))
    k.emit(opcode, operands, pred=pred, requires=SM80)


def commit_group(k: KernelBuilder, *, pred=None) -> None:
    """`cp.async.commit_group;` - close the current group of cp.async (one pipeline stage)."""
    k.emit("cp.async.commit_group", pred=pred, requires=SM80)


def wait_group(k: KernelBuilder, n: int, *, pred=None) -> None:
    """`cp.async.wait_group N;` - wait until at most N committed groups are still pending."""
    imm_int("cp.async.wait_group", "n", n, 0, 255)
    k.emit("cp.async.wait_group", (n,), pred=pred, requires=SM80)


def wait_all(k: KernelBuilder, *, pred=None) -> None:
    """`cp.async.wait_all;` - commit and wait for every outstanding cp.async of this thread."""
    k.emit("cp.async.wait_all", pred=pred, requires=SM80)
