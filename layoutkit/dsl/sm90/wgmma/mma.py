"""Warpgroup MMA in the kernel DSL (sm_90a): `lk.sm90.wgmma(acc, a, b)` and its fence/commit/wait.

One warpgroup (128 threads, 4 aligned warps: %tid.x // 128) issues each wgmma and owns its
accumulator; register tensors here use the thread's index in its warpgroup (%tid.x % 128).
Every thread of the warpgroup must execute the same wgmma ops (PTX `.sync.aligned`).

    acc = lk.full(lk.sm90.wgmma_accumulator_layout(256), 0.0)   # or lk.sm90.wgmma_accumulator(256)
    loop = lk.range(0, k_tiles, carry=(acc,))
    for kt, (acc,) in loop:
        lk.sm90.wgmma_fence()                          # registers written before here are visible
        acc = lk.sm90.wgmma(acc, sA, sB, accumulate=kt > 0)  # D (+)= A[64,K] * B[N,K]^T, in place
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)                          # acc may be read after this
        loop.next(acc)

Operands: `a` is a shared tile (M x K) or a bf16/f16 register tensor in lk.sm90.wgmma_a_layout(K, M)
(e.g. an f32 accumulator cast to bf16: the layouts coincide); `b` is a shared tile N x K (use
`tile.T` for a K x N tile). Shared tiles must have a canonical K-major or MN-major layout
(none/32B/64B/128B swizzle; see operands.py) and the descriptors are derived from it. fp8
(e4m3, e5m2; A and B may mix them) tiles are shared and K-major (the hardware transposes only
16-bit types), K = 32 per instruction, and accumulate in f32.
Accumulators are updated in place; the accumulator protocol (accumulators.py: linear use, reads
after the covering wait, fences after register accesses) is checked at each lk.sm90.wgmma_wait, once
the kernel body returns (before the protocol check, which adds the whole-warpgroup, first-fence
and commit/wait-before-exit rules: layoutkit/sync/wgmma_rules.py) and before lowering. The
ops' definitions are in ops.py.

IR ops (name: operands -> results; attrs):
  wgmma_fence:  ->                       (wgmma.fence: order earlier register writes first)
  wgmma_commit: ->                       (close the group of this warpgroup's uncommitted wgmmas)
  wgmma_wait:   ->                       pending: wait until at most `pending` (0..
                                         MAX_PENDING_GROUPS = 7, layoutkit.ptx.isa.wgmma)
                                         committed groups of this warpgroup are in flight
  wgmma_undef:  -> f32*count             layout: an accumulator with undefined values
  wgmma:        acc(f32*acc_count)[, a(a_count values)][, a_origin(i32)], b_origin(i32)
                [, accumulate(bool)] -> f32*acc_count
                m, n, k, dtype (A's), b_dtype, acc_layout, acc_count, a_count, accumulate
                (True, False, or None: the bool operand decides), a, b. `a`/`b`: {"kind":
                "registers", "layout": TVLayout} or {"kind": "shared", "buffer", "base" (byte offset of the
                buffer), "layout" (rank-2 Layout: rows x K element offsets), "swizzle" ((B,M,S)
                or None), "major", "mode", "lbo", "sbo" (bytes), "starts"}: element (r, k) of a
                shared operand is element swizzle(origin + layout(r, k)) of the buffer, origin
                the *_origin operand. Result: D = A @ B^T (+ acc when accumulating), A m x k,
                B n x k, D in acc_layout. Shared operands are read until the wgmma_wait that
                retires the wgmma's group (accumulators.retiring_waits).
"""
from __future__ import annotations

from layoutkit.ptx.isa.wgmma import MAX_PENDING_GROUPS

from ...lang.control import condition
from ...core.errors import TraceError
from ...lang.shared import SharedTensor
from ...core.tracer import current
from ...core.types import FP8, bf16, bool_, f16, f32, i32
from ...core.values import RegisterTensor, Scalar
from .layouts import (K_STEP, M_BLOCK, check_fragment, warpgroup_stack, wgmma_a_layout,
                      wgmma_accumulator_layout)
from .operands import rank2, shared_operand
from .accumulators import FENCE, MMA, UNDEF, WAIT, check_traced

INPUT_TYPES = (bf16, f16, *FP8)            # shared operands
REGISTER_A_TYPES = (bf16, f16)             # a register A operand (lk.sm90.wgmma_a_layout)


def _trace(what: str):
    trace = current(what)
    if trace.fn.num_warps % 4:
        raise TraceError(f"{what}: wgmma is issued by warpgroups of 4 warps; the kernel runs "
                         f"num_warps={trace.fn.num_warps}, not a multiple of 4")
    return trace


def wgmma_fence() -> None:
    """`wgmma.fence`: register writes before it (accumulators, the A operand) are seen by the
    wgmmas after it. Needed before the first wgmma and after other instructions touched its
    registers; not between wgmmas chaining on one accumulator."""
    _trace("lk.sm90.wgmma_fence()").emit(FENCE, (), ())


def wgmma_commit() -> None:
    """`wgmma.commit_group`: the wgmmas issued since the last commit become one group."""
    _trace("lk.sm90.wgmma_commit()").emit("wgmma_commit", (), ())


def wgmma_wait(pending: int = 0) -> None:
    """`wgmma.wait_group pending`: wait until at most `pending` of this warpgroup's committed
    groups are in flight; the results (and shared operands) of the others are then free."""
    trace = _trace("lk.sm90.wgmma_wait()")
    if isinstance(pending, bool) or not isinstance(pending, int) or \
            not 0 <= pending <= MAX_PENDING_GROUPS:
        raise TraceError(f"lk.sm90.wgmma_wait(pending): pending is a Python int in "
                         f"0..{MAX_PENDING_GROUPS} (an immediate of wgmma.wait_group), got "
                         f"{pending!r}")
    trace.emit(WAIT, (), (), {"pending": pending})
    check_traced(trace)


def wgmma_accumulator(n: int, m: int = M_BLOCK) -> RegisterTensor:
    """An f32 accumulator in lk.sm90.wgmma_accumulator_layout(n, m) whose values are undefined (no
    instructions, no zero fill): the first wgmma into it takes accumulate=False."""
    layout = wgmma_accumulator_layout(n, m)
    trace = _trace("lk.sm90.wgmma_accumulator")
    values = trace.emit(UNDEF, (), [f32] * layout.num_values, {"layout": layout})
    return RegisterTensor(f32, layout, values)


def _accumulate(trace, accumulate):
    """(attr, operand Value or None) for accumulate=True/False/bool scalar/relation."""
    if isinstance(accumulate, bool):
        return accumulate, None
    if isinstance(accumulate, Scalar) and accumulate.dtype != bool_:
        raise TraceError("lk.sm90.wgmma: accumulate is a bool (True, False, or a runtime bool such "
                         f"as kt > 0), got a {accumulate.dtype} scalar")
    try:
        return None, condition(trace, accumulate)
    except TraceError:
        raise TraceError("lk.sm90.wgmma: accumulate is True, False, a bool scalar or a comparison "
                         f"of kernel integers (e.g. kt > 0), got {accumulate!r}") from None


def wgmma(acc: RegisterTensor, a, b: SharedTensor, *, accumulate=True) -> RegisterTensor:
    """acc + a @ b^T (or a @ b^T where `accumulate` is false), as a new accumulator in the
    same registers; `acc` may not be read afterwards. acc: f32 in
    lk.sm90.wgmma_accumulator_layout(N, M); a: shared M x K or registers in lk.sm90.wgmma_a_layout(K, M);
    b: shared N x K; bf16 or f16 (K a multiple of 16), or e4m3/e5m2 from shared memory, K-major
    (K a multiple of 32). Issues K/k * M/64 instructions, k = 16 or 32 (layouts.k_step)."""
    what = "lk.sm90.wgmma"
    trace = _trace(what)
    if not isinstance(acc, RegisterTensor) or acc.dtype != f32:
        raise TraceError(f"{what}: acc is an f32 register tensor in "
                         "lk.sm90.wgmma_accumulator_layout (e.g. lk.full(layout, 0.0)), got "
                         f"{acc!r}")
    if len(acc.layout.tile) != 2:
        raise TraceError(f"{what}: acc covers a 2-D (M, N) tile, got {acc.layout}")
    m, n = acc.layout.tile
    check_fragment(what, "acc", acc.layout, wgmma_accumulator_layout(n, m))
    if isinstance(a, RegisterTensor):
        if a.dtype not in REGISTER_A_TYPES:
            raise TraceError(f"{what}: a register A operand is bf16 or f16 (cast an f32 tensor "
                             f"with lk.cast(x, lk.bf16); fp8 A operands are read from shared "
                             f"memory), got {a.dtype}")
        tile = tuple(a.layout.tile)
        if len(tile) != 2 or tile[0] != m or not isinstance(tile[1], int) or tile[1] % K_STEP:
            raise TraceError(f"{what}: the register A operand covers an (M, K) = ({m}, K) tile "
                             f"with K a multiple of {K_STEP}, got {a.layout}")
        kdim = tile[1]
        check_fragment(what, "the register A operand", a.layout, wgmma_a_layout(kdim, m))
        a_attrs, a_operands, a_count = {"kind": "registers", "layout": a.layout}, list(a.values), \
            len(a.values)
        dtype = a.dtype
    elif isinstance(a, SharedTensor):
        if a.dtype not in INPUT_TYPES:
            raise TraceError(f"{what}: shared operands are bf16, f16, e4m3 or e5m2, got "
                             f"{a.dtype}")
        sa = shared_operand(what, "A", a, m, M_BLOCK)
        kdim, dtype = rank2(what, "operand A", a)[1].size(), a.dtype
        a_attrs, a_operands, a_count = sa.attrs(), [trace.index(a.offset, i32)], 0
    else:
        raise TraceError(f"{what}: a is a shared tile (M x K) or a bf16/f16 register tensor in "
                         f"lk.sm90.wgmma_a_layout, got {a!r}")
    if isinstance(b, SharedTensor) and b.dtype != dtype and \
            not (dtype in FP8 and b.dtype in FP8):
        raise TraceError(f"{what}: A and B have one element type (e4m3 and e5m2 may mix); A is "
                         f"{dtype}, B is {b.dtype}")
    sb = shared_operand(what, "B", b, n, n, kdim)
    flag, pred = _accumulate(trace, accumulate)
    operands = list(acc.values) + a_operands + [trace.index(b.offset, i32)] + \
        ([pred] if pred is not None else [])
    attrs = {"m": m, "n": n, "k": kdim, "dtype": dtype.name, "b_dtype": b.dtype.name,
             "acc_layout": acc.layout,
             "acc_count": len(acc.values), "a_count": a_count, "accumulate": flag,
             "a": a_attrs, "b": sb.attrs()}
    results = trace.emit(MMA, operands, [f32] * len(acc.values), attrs)
    return RegisterTensor(f32, acc.layout, results)


__all__ = ["wgmma", "wgmma_fence", "wgmma_commit", "wgmma_wait", "wgmma_accumulator",
           "wgmma_accumulator_layout", "wgmma_a_layout", "warpgroup_stack"]
