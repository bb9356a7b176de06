"""`lk.sm90.stmatrix(dst, src)`: a register tensor -> a thread's partition of a shared tile, stored
by `stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16` (sm_90).

stmatrix is ldmatrix backwards: values 2j and 2j+1 of every lane form register j, which lands at
row l/4, columns 2(l%4), 2(l%4)+1 of an 8x8 matrix (`.trans`: column l/4, rows 2(l%4) and
2(l%4)+1); lane 8i + r gives the address of row r of the instruction's matrix i. So the
partition must satisfy ldmatrix's fragment rule, and the planning (which registers form which
matrices, the lane address fitted over the thread index, the swizzle split) is ldmatrix's
(`sm80.ldmatrix.matrix_instructions`). The protocol check sees a generic-proxy shared write of
each row (16 bytes).

IR op:
  stmatrix: inner(i32), outer(i32), 2*num x b16 ->   buffer, base, swizzle, disp, num, trans,
            registers, bank_ways (as ldmatrix); lane l addresses row l%8 of matrix l/8 at
            element Sw(inner) + outer + disp.
"""
from __future__ import annotations

from layoutkit.ptx.isa import matrix
from layoutkit.sync import kernel_model as km

from ..core.errors import LayoutMismatchError, TraceError
from ..core.opdef import SM90A_ONLY, OpDef
from ..core.tracer import current
from ..core.types import i32
from ..core.values import RegisterTensor
from ..core.verifier import fail
from ..interpreter.collective import meet_warp
from ..interpreter.executor import Step
from ..interpreter.memory import encode, split_address
from ..lang.shared import SharedTensor
from ..sm80.ldmatrix import NUMS, ROW_ELEMENTS, matrix_instructions
from ..sm80.ops import packed_pair, shared_range, split_shared_address


def stmatrix(dst: SharedTensor, src: RegisterTensor, *, num: int = 4, trans=None) -> None:
    """Store this thread's register tensor `src` into the shared partition `dst` (same TV
    layout, 16-bit elements) by stmatrix, `num` matrices per instruction at most (`trans` None
    derives .trans per register). Raises LayoutMismatchError when the layouts differ or a
    register is no 8x8 matrix."""
    what = "lk.sm90.stmatrix"
    trace = current(what)
    if not isinstance(src, RegisterTensor):
        raise TraceError(f"{what} stores a register tensor, got {src!r}")
    if isinstance(dst, SharedTensor) and dst.tv is not None and src.layout != dst.tv:
        raise LayoutMismatchError(
            f"{what}: the register tensor and the destination partition have different layouts\n"
            f"      register tensor: {src.layout}\n"
            f"      destination:     {dst.tv}\n"
            "  layoutkit never converts layouts implicitly")
    if isinstance(dst, SharedTensor) and src.dtype != dst.dtype:
        raise TraceError(f"{what}: a {src.dtype} tensor into a {dst.dtype} tile; cast it "
                         f"explicitly with lk.cast(x, lk.{dst.dtype})")
    for group, inner, outer, attrs in matrix_instructions(what, dst, num, trans):
        values = [src.values[2 * m.register + h] for m in group for h in (0, 1)]
        trace.emit(Stmatrix, [inner, outer, *values], [], attrs)


class Stmatrix(OpDef):
    """inner(i32), outer(i32), 2*num 16-bit values: `num` 8x8 matrices stored to `buffer`."""

    name = "stmatrix"
    targets = SM90A_ONLY

    def verify(self, op):
        a, data = op.attrs, op.operands[2:]
        if len(op.operands) < 2 or any(v.type != i32 for v in op.operands[:2]) or op.results:
            fail(op, "takes the i32 inner (swizzled) and outer element offsets, no results")
        if a.get("num") not in NUMS or len(data) != 2 * a["num"]:
            fail(op, "stores 1, 2 or 4 matrices: two 16-bit values per matrix")
        if len({v.type for v in data}) != 1 or data[0].type.nbytes != 2:
            fail(op, "values are 16-bit values of one type")
        if len(a.get("registers", ())) != a["num"] or not isinstance(a.get("trans"), bool):
            fail(op, "names the register of each matrix and a bool trans")

    def lower(self, op, lw):
        inner, outer, *data = op.operands
        address = split_shared_address(lw, op, inner, outer, op.attrs["disp"],
                                       data[0].type.nbytes)
        regs = [packed_pair(lw, data[i], data[i + 1]) for i in range(0, len(data), 2)]
        matrix.stmatrix(lw.k, address, regs, trans=op.attrs["trans"])

    def interpret(self, op, compiler):
        a = op.attrs
        inner, outer, *data = (v.id for v in op.operands)
        dtype = op.operands[2].type
        address = split_address(op, dtype.nbytes, "disp")
        num, trans = a["num"], a["trans"]
        what = f"the stmatrix row written to {a['buffer']}"

        def finish(warp, arrivals):
            rows = {(i, r): [None] * ROW_ELEMENTS for i in range(num) for r in range(8)}
            for thread in warp.threads:
                g, q = divmod(thread.lane, 4)
                start, values = arrivals[thread.lane]
                for i in range(num):
                    for h in range(2):
                        row, col = (2 * q + h, g) if trans else (g, 2 * q + h)
                        rows[i, row][col] = values[2 * i + h]
            shared = warp.cta.shared
            for (i, r), row in rows.items():
                lane = 8 * i + r
                start = arrivals[lane][0]
                shared.check_access(start, 16, 16, True, what, op, a["buffer"])
                new, target = encode(row, dtype), shared.view(start, 16)
                warp.cta.machine.on_shared_access(warp.threads[lane], start, 16, True, what, op,
                                                  target == new)
                target[:] = new

        def run(thread):
            env = thread.env
            return meet_warp(thread, op, "stmatrix",
                             (address(env[inner], env[outer]), [env[v] for v in data]), finish)
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        nbytes = op.operands[2].type.nbytes
        shared_range(ex, op, mask, loops, (0, 1), op.attrs["disp"], nbytes,
                     ROW_ELEMENTS * nbytes, km.SharedWrite, {})


__all__ = ["stmatrix", "Stmatrix"]
