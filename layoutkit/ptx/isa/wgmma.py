"""Warpgroup MMA (sm_90a): wgmma.fence, wgmma.mma_async, wgmma.commit_group, wgmma.wait_group.

Rules (PTX ISA "wgmma", hopper-ptx.md §5, ptxas 13.0; PTX 8.0, sm_90a only): all 128 threads
of a warpgroup execute each instruction convergently. Shape m64nNk{K}: K = 16 for f16/bf16,
8 for tf32, 32 for e4m3/e5m2; N = 8..256 in steps of 8. Accumulators: f32 (N/2 registers per
thread) for every input type, f16 (N/4 .f16x2/.b32 registers) for f16 and fp8 inputs.
Operands SS `d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b[, imm-trans-a, imm-trans-b]`
and RS `d, {a0..a3}, b-desc, scale-d, imm-scale-a, imm-scale-b[, imm-trans-b]`: the trans
immediates exist only for f16/bf16 (register A is always K-major, so RS has no trans-a).
scale-d is a predicate or 0/1 (0: D = A*B, no zeroed accumulators needed); imm-scale-a/b are
±1; imm-trans 0 = K-major, 1 = M/N-major. A from registers is 4 registers of .b32 (or
.f16x2/.bf16x2 matching the input type); ptxas rejects .u32/.s32/.f32 there.
Ordering: `fence` before the first wgmma and after any other write of its accumulator or A
registers; read them only after a `wait_group` covers the wgmma.
"""
from __future__ import annotations

from ..builder import TYPES, Imm, KernelBuilder, NotPred, PTXBuildError, PTXTypeError, Reg, Vector
from .checks import choose, regs_of, source
from .hopper_operands import B64, PRED, SM90A, group_count, immediate

M = 64
N_STEP, N_MAX = 8, 256
MAX_PENDING_GROUPS = 7      # wait_group N: 0..7 (CUTLASS warpgroup_wait's static bound); the
                            # DSL's lk.sm90.wgmma_wait and its verifier check against this one
A_REGISTERS = 4
# input type -> (K, accumulator types, has imm-trans, register types allowed for A)
INPUTS = {
    "f16": (16, ("f32", "f16"), True, ("b32", "f16x2")),
    "bf16": (16, ("f32",), True, ("b32", "bf16x2")),
    "tf32": (8, ("f32",), False, ("b32",)),
    "e4m3": (32, ("f32", "f16"), False, ("b32",)),
    "e5m2": (32, ("f32", "f16"), False, ("b32",)),
}
FP8 = ("e4m3", "e5m2")
# accumulator type -> (register type, accumulator elements per register)
ACCUMULATORS = {"f32": (TYPES["f32"], 1), "f16": (TYPES["f16x2"], 2)}


def accumulator_count(n: int, acc_type: str = "f32") -> int:
    """Registers per thread of an m64nN accumulator: 64*N elements over 128 threads.

    >>> accumulator_count(64), accumulator_count(256, "f16")
    (32, 64)
    """
    return M * n // 128 // ACCUMULATORS[acc_type][1]


def fence(k: KernelBuilder, *, pred=None) -> None:
    """`wgmma.fence.sync.aligned`: order earlier register writes before the next wgmma."""
    k.emit("wgmma.fence.sync.aligned", pred=pred, requires=SM90A)


def commit_group(k: KernelBuilder, *, pred=None) -> None:
    """`wgmma.commit_group.sync.aligned`: close a group of the warpgroup's wgmmas."""
    k.emit("wgmma.commit_group.sync.aligned", pred=pred, requires=SM90A)


def wait_group(k: KernelBuilder, n: int = 0, *, pred=None) -> None:
    """Wait until at most `n` (0..7) most recent wgmma groups are still in flight."""
    instr = "wgmma.wait_group.sync.aligned"
    k.emit(instr, (group_count(instr, n, MAX_PENDING_GROUPS),), pred=pred, requires=SM90A)


def _descriptor(k: KernelBuilder, instr: str, operand: str, value):
    """A 64-bit matrix descriptor: a 64-bit register or a constant (see wgmma_descriptor)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 1 << 64:
            raise PTXBuildError("a matrix descriptor is a 64-bit value", instruction=instr,
                                operand=operand, value=value)
        return Imm(value, B64)
    return source(k, instr, operand, value, B64, imm=False)


def _a_registers(k: KernelBuilder, instr: str, a, allowed: tuple[str, ...]) -> Vector:
    regs = regs_of(k, instr, "a", a, TYPES["b32"], A_REGISTERS)
    for i, r in enumerate(regs):
        if r.type.name not in allowed:
            raise PTXTypeError(f"A from registers takes .{', .'.join(allowed)} registers",
                               instruction=instr, operand=f"a[{i}]", value=r)
    return Vector(regs)


def _scale_d(k: KernelBuilder, instr: str, scale_d):
    if isinstance(scale_d, (Reg, NotPred)):
        return source(k, instr, "scale_d", scale_d, PRED, imm=False)
    return immediate(instr, "scale_d", scale_d, (0, 1))


def mma_async(k: KernelBuilder, d, a, b, *, n: int, ab_type: str = "bf16", b_type: str | None = None,
              acc_type: str = "f32", scale_d=1, scale_a: int = 1, scale_b: int = 1,
              trans_a: int | None = None, trans_b: int | None = None, pred=None) -> tuple:
    """D (+)= A * B for an m64nNk{K} tile; returns the accumulator registers `d`.

    `d`: the accumulator_count(n, acc_type) registers (KernelBuilder.var registers when a loop
    accumulates); `a`: a shared-memory descriptor (b64 register or int) or 4 registers;
    `b`: a descriptor. trans_a/trans_b default to 0 where the form has them.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); d = [k.var("f32") for _ in range(4)]
    >>> da, db = k.reg("b64"), k.reg("b64")
    >>> _ = mma_async(k, d, da, db, n=8, scale_d=0); print(k.body_lines()[-1])
        wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd0, %rd1, 0, 1, 1, 0, 0;
    """
    choose("wgmma.mma_async", "ab_type", ab_type, INPUTS)
    b_type = ab_type if b_type is None else b_type
    if b_type != ab_type and not (ab_type in FP8 and b_type in FP8):
        raise PTXTypeError(f"A and B types must match (only e4m3/e5m2 mix); A is .{ab_type}",
                           instruction="wgmma.mma_async", operand="b_type", value=b_type)
    kdim, accs, has_trans, a_regs = INPUTS[ab_type]
    if isinstance(n, bool) or not isinstance(n, int)\
            or not (N_STEP <= n <= N_MAX and n % N_STEP == 0):
        raise PTXBuildError(f"N must be {N_STEP}..{N_MAX} in steps of {N_STEP}",
                            instruction="wgmma.mma_async", operand="n", value=n)
    instr = f"wgmma.mma_async.sync.aligned.m{M}n{n}k{kdim}.{acc_type}.{ab_type}.{b_type}"
    choose(instr, "acc_type", acc_type, accs)
    reg_type, _ = ACCUMULATORS[acc_type]
    acc = regs_of(k, instr, "d", d, reg_type, accumulator_count(n, acc_type))
    from_registers = isinstance(a, (tuple, list))
    operands = [Vector(acc),
                _a_registers(k, instr, a, a_regs) if from_registers else
                _descriptor(k, instr, "a", a),
                _descriptor(k, instr, "b", b), _scale_d(k, instr, scale_d),
                immediate(instr, "scale_a", scale_a, (1, -1)),
                immediate(instr, "scale_b", scale_b, (1, -1))]
    if not has_trans:
        for name, value in (("trans_a", trans_a), ("trans_b", trans_b)):
            if value not in (None, 0):
                raise PTXBuildError(f".{ab_type} wgmma has no transpose: both operands are "
                                    "K-major in shared memory", instruction=instr,
                                    operand=name, value=value)
    else:
        if from_registers and trans_a not in (None, 0):
            raise PTXBuildError("A from registers is always K-major (the RS form has no "
                                "imm-trans-a)", instruction=instr, operand="trans_a",
                                value=trans_a)
        if not from_registers:
            operands.append(immediate(instr, "trans_a", 0 if trans_a is None else trans_a, (0, 1)))
        operands.append(immediate(instr, "trans_b", 0 if trans_b is None else trans_b, (0, 1)))
    k.emit(instr, operands, defs=acc, pred=pred, requires=SM90A)
    return acc


__all__ = ["ACCUMULATORS", "INPUTS", "MAX_PENDING_GROUPS", "accumulator_count", "commit_group",
           "fence", "mma_async", "wait_group"]
