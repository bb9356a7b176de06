"""Warp-collective matrix instructions: ldmatrix, stmatrix (m8n8 b16) and mma.sync m16n8k{8,16}.

Fragment layouts (hopper-ptx.md §8): an 8x8 b16 matrix is 8 rows of 16 bytes; lanes 8i..8i+7
give the row addresses of matrix i; register i of lane l holds matrix i, row l/4, columns
2(l%4), 2(l%4)+1 (.trans: the transpose). mma.sync.aligned.m16n8k16.row.col: a = 4 x b32
(k8: 2), b = 2 x b32 (k8: 1), c/d = 4 x f32 or 2 x f16x2 (f16 accumulators need f16 inputs).
stmatrix needs sm_90 (PTX 7.8).
"""
from __future__ import annotations

from ..builder import TYPES, KernelBuilder, PTXBuildError, Reg, Requirement, Vector
from .checks import address, choose, flag, mods, regs_of

B32 = TYPES["b32"]
SM80 = Requirement((7, 0), 80)
STMATRIX = Requirement((7, 8), 90)
# shape -> (a registers, b registers)
MMA_SHAPES = {"m16n8k16": (4, 2), "m16n8k8": (2, 1)}


def _num(instr: str, num: int) -> str:
    choose(instr, "num", num, (1, 2, 4))
    return f"x{num}"


def ldmatrix(k: KernelBuilder, addr, num: int = 4, *, trans: bool = False, dtype="b32", out=None,
             pred=None) -> tuple[Reg, ...]:
    """Load `num` 8x8 b16 matrices from shared memory; returns `num` 32-bit registers.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); a = k.reg("u32")
    >>> _ = ldmatrix(k, a, 2, trans=True); k.body_lines()[-1]
    '    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r0, %r1}, [%u0];'
    """
    opcode = mods("ldmatrix.sync.aligned.m8n8", _num("ldmatrix", num),
                  "trans" if flag("ldmatrix", "trans", trans) else "", "shared.b16")
    a = address(k, opcode, "address", addr)
    regs = regs_of(k, opcode, "out", out, B32, num, writes=True) if out is not None else k.regs(dtype, num)
    if out is None:
        regs_of(k, opcode, "dtype", regs, B32, num, writes=True)
    k.emit(opcode, (Vector(regs), a), defs=regs, pred=pred, requires=SM80)
    return regs


def stmatrix(k: KernelBuilder, addr, values, *, trans: bool = False, pred=None) -> None:
    """Store 1, 2 or 4 8x8 b16 matrices (one 32-bit register each) to shared memory (sm_90)."""
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    opcode = mods("stmatrix.sync.aligned.m8n8", _num("stmatrix", len(values)),
                  "trans" if flag("stmatrix", "trans", trans) else "", "shared.b16")
    a = address(k, opcode, "address", addr)
    regs = regs_of(k, opcode, "values", values, B32, len(values))
    k.emit(opcode, (a, Vector(regs)), pred=pred, requires=STMATRIX)


def mma_sync(k: KernelBuilder, a, b, c, *, shape: str = "m16n8k16", ab_type: str = "bf16",
             acc_type: str = "f32", out=None, pred=None) -> tuple[Reg, ...]:
    """D = A * B + C for one warp, `mma.sync.aligned.<shape>.row.col.<acc>.<ab>.<ab>.<acc>`.
    a, b: tuples of 32-bit registers holding packed pairs; c: 4 f32 or 2 f16x2 registers.
    Returns the D registers (fresh, or `out` - which may be c's mutable registers)."""
    choose("mma.sync", "shape", shape, MMA_SHAPES)
    choose("mma.sync", "ab_type", ab_type, ("bf16", "f16"))
    choose("mma.sync", "acc_type", acc_type, ("f32", "f16"))
    if acc_type == "f16" and ab_type != "f16":
        raise PTXBuildError("f16 accumulators need f16 inputs (bf16 accumulates in f32 only)",
                            instruction="mma.sync", operand="acc_type", value=acc_type)
    opcode = f"mma.sync.aligned.{shape}.row.col.{acc_type}.{ab_type}.{ab_type}.{acc_type}"
    n_a, n_b = MMA_SHAPES[shape]
    acc, n_acc = (TYPES["f32"], 4) if acc_type == "f32" else (TYPES["f16x2"], 2)
    ra = regs_of(k, opcode, "a", a, B32, n_a)
    rb = regs_of(k, opcode, "b", b, B32, n_b)
    rc = regs_of(k, opcode, "c", c, acc, n_acc)
    rd = regs_of(k, opcode, "out", out, acc, n_acc, writes=True) if out is not None else k.regs(acc, n_acc)
    k.emit(opcode, (Vector(rd), Vector(ra), Vector(rb), Vector(rc)), defs=rd, pred=pred,
           requires=SM80)
    return rd
