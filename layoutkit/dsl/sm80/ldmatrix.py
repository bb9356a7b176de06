"""`lk.sm80.ldmatrix(src)`: a thread's partition of a shared tile -> a register tensor with the
partition's TV layout, loaded by `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`.

Values 2j and 2j+1 of every thread form register j. ldmatrix delivers register j of lane l as
row l/4, columns 2(l%4), 2(l%4)+1 of an 8x8 matrix whose 8 rows are 16 contiguous, 16-byte
aligned bytes each (`.trans`: column l/4, rows 2(l%4), 2(l%4)+1). So, per warp, each register
must be such a matrix: the plan enumerates every lane's element offsets (the tile's layout
composed with the TV layout) and finds each matrix's 8 row offsets, or raises
`LayoutMismatchError`. Up to `num` matrices share one instruction; lane 8i + r gives the
address of row r of the instruction's matrix i, a per-thread offset fitted over the bits of
the thread index and swizzled like the tile (smem_address).

IR op:
  ldmatrix: inner(i32), outer(i32) -> 2*num x dtype   buffer, base, swizzle, disp, num, trans,
            registers (the value-pair index j of each matrix), bank_ways (worst conflict, or
            None when offsets are symbolic). Lane l gives the element address
            Sw(inner) + outer + disp of row l%8 of matrix l/8 (Sw: the buffer's swizzle).
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.algebra import LayoutError, composition
from layoutkit.algebra.sympy_gate import sympy

from ..core.errors import LayoutMismatchError, TraceError
from ..core.facts import provably_divisible
from ..core.sync_trace import partition_threads
from .mma_layouts import LDMATRIX_FRAGMENT
from ..lang.shared import SharedTensor
from .smem_address import bank_ways, bit_expr, bit_fit, split_swizzled
from ..core.tracer import current
from ..core.types import i32
from ..core.values import RegisterTensor

WARP = 32
ROW_ELEMENTS = 8          # an ldmatrix row: 16 bytes of b16 elements
NUMS = (1, 2, 4)


@dataclass(frozen=True)
class Matrix:
    """Register j of every lane of warp w: the element offsets (tile-relative, before the
    swizzle) of its 8 rows, loaded transposed or not."""

    register: int
    trans: bool
    rows: tuple          # per warp: 8 row offsets


def _offsets(src: SharedTensor) -> tuple[list, list]:
    """(per-thread part, per-value part) of every lane's tile-relative element offset."""
    full = composition(src.parent.layout, src.tv.layout)
    return ([full[0](t) for t in range(src.tv.num_threads)],
            [full[1](v) for v in range(src.tv.num_values)])


def _rows(thread: list, value: list, w: int, j: int, trans: bool):
    """The 8 row offsets of register j in warp w, or (lane, expected, got) of the first lane
    that does not fit."""
    base = WARP * w
    if trans:
        rows = [thread[base + r // 2] + value[2 * j + r % 2] for r in range(ROW_ELEMENTS)]
    else:
        rows = [thread[base + 4 * r] + value[2 * j] for r in range(ROW_ELEMENTS)]
    for lane in range(WARP):
        g, q = divmod(lane, 4)
        for half in (0, 1):
            got = thread[base + lane] + value[2 * j + half]
            want = rows[2 * q + half] + g if trans else rows[g] + 2 * q + half
            if got != want:
                return None, (lane, half, want, got)
    return rows, None


def _mismatch(src: SharedTensor, j: int, w: int, trans, bad, what: str) -> LayoutMismatchError:
    lane, half, want, got = bad
    forms = {False: "non-transposed", True: ".trans", None: "either form"}
    return LayoutMismatchError(
        f"{what}: values {2 * j} and {2 * j + 1} of the partition are not one register of "
        f"an 8x8 b16 matrix ({forms[trans]}) in warp {w}: lane {lane} holds value "
        f"{2 * j + half} at tile offset {got}, the matrix needs {want}\n"
        f"      partition:       {src.tv} on tile {src.parent.layout}\n"
        f"      ldmatrix matrix: {LDMATRIX_FRAGMENT} (rows of 8 contiguous elements)\n"
        f"  give {what} a partition by an mma fragment layout (lk.sm80.mma_sync_layouts) over a "
        "tile whose rows are 16 contiguous bytes")


def plan_matrices(src: SharedTensor, trans=None, what: str = "lk.sm80.ldmatrix") -> list[Matrix]:
    """One Matrix per register of the partition `src` (see the module docstring); `trans`
    None picks the form that fits each register."""
    thread, value = _offsets(src)
    warps = src.tv.num_threads // WARP
    matrices = []
    for j in range(src.tv.num_values // 2):
        first_bad = None
        for form in ((False, True) if trans is None else (trans,)):
            rows, bad = [], None
            for w in range(warps):
                got, bad = _rows(thread, value, w, j, form)
                if got is None:
                    first_bad = first_bad or (w, bad)
                    break
                rows.append(tuple(got))
            if bad is None:
                break
        if bad is not None:
            raise _mismatch(src, j, first_bad[0], trans, first_bad[1], what)
        misaligned = [r for per_warp in rows for r in per_warp if r % ROW_ELEMENTS]
        if misaligned:
            raise TraceError(f"{what}: register {j} of {src.tv} moves a row at tile offset "
                             f"{misaligned[0]}, not a multiple of {ROW_ELEMENTS} elements: "
                             "matrix rows start at 16-byte boundaries")
        matrices.append(Matrix(j, form, tuple(rows)))
    return matrices


def _check(src, num: int, trans, what: str) -> None:
    if not isinstance(src, SharedTensor) or src.tv is None or src.parent is None:
        raise TraceError(f"{what} moves a thread's partition of a shared tile "
                         f"(tile.partition(tv)), got {src!r}")
    if src.dtype.nbytes != 2:
        raise TraceError(f"{what} moves 16-bit elements (b16); the tile holds {src.dtype}")
    if src.tv.num_threads % WARP:
        raise TraceError(f"{what} is warp-collective: {src.tv} has {src.tv.num_threads} "
                         "threads, not whole warps")
    if src.tv.num_values % 2:
        raise TraceError(f"{what}: {src.tv} gives each thread {src.tv.num_values} values; "
                         "registers hold pairs (values 2j, 2j+1), so the count must be even")
    if num not in NUMS:
        raise TraceError(f"{what}: num={num!r} matrices per instruction; it moves "
                         "1, 2 or 4 (.x1, .x2, .x4)")
    if trans not in (None, True, False):
        raise TraceError(f"{what}: trans is None (derived), True or False, got {trans!r}")
    if src.max_vector < ROW_ELEMENTS:
        raise TraceError(f"{what}: the tile's swizzle {src.swizzle} moves elements inside "
                         "16-byte rows; matrix rows are 16 contiguous bytes, so the swizzle's "
                         f"base must be at least 3 (8 elements), got {src.swizzle.base}")


def _groups(matrices: list, num: int) -> list[list[Matrix]]:
    """Consecutive matrices of one form, `num` per instruction at most."""
    groups: list = []
    for m in matrices:
        if groups and len(groups[-1]) < num and groups[-1][-1].trans == m.trans:
            groups[-1].append(m)
        else:
            groups.append([m])
    return groups


def _lane_table(group: list[Matrix], threads: int) -> list:
    """Per thread: the tile offset of the row its lane addresses (lane 8i + r -> row r of
    matrix i; lanes past the instruction's matrices repeat them)."""
    table = []
    for t in range(threads):
        w, lane = divmod(t, WARP)
        m = group[(lane // ROW_ELEMENTS) % len(group)]
        table.append(m.rows[w][lane % ROW_ELEMENTS])
    return table


def matrix_instructions(what: str, part: SharedTensor, num: int, trans):
    """The instructions that move the shared partition `part` as 8x8 b16 matrices (ldmatrix,
    stmatrix: the same fragment), yielded one at a time (so each one's index arithmetic is
    emitted just before it): (matrices, inner, outer, attrs) with the i32
    index expressions of lane l's row address Sw(inner) + outer + disp and the op's attrs.
    Raises LayoutMismatchError when a register pair is no such matrix."""
    trace = current(what)
    _check(part, num, trans, what)
    trace.require_uniform(what)
    tile = part.parent
    if trace.thread_dependent(tile.offset):
        raise TraceError(f"{what}: the tile's offset {tile.offset} depends on the thread; tile "
                         "the shared tensor by block-uniform coordinates and let the TV layout "
                         "place the warps")
    if not provably_divisible(tile.offset, ROW_ELEMENTS):
        raise TraceError(f"{what}: the tile starts at element offset {tile.offset}, not provably "
                         f"a multiple of {ROW_ELEMENTS}: matrix rows start at 16-byte "
                         "boundaries")
    try:
        matrices = plan_matrices(part, trans, what)
    except LayoutError as exc:
        raise TraceError(f"{what}: cannot enumerate {part.tv} on {tile.layout}: {exc}") from None
    threads = part.tv.num_threads
    # the thread index the partition was taken by (lang/shared.check_partition): inside a warp
    # role, the role's own (bit_expr assumes 0 <= tid < threads)
    tid = trace.special("thread_idx", 0) if threads == 32 * trace.fn.num_warps else \
        partition_threads(trace)[0]
    for group in _groups(matrices, num):
        table = _lane_table(group, threads)
        fit = bit_fit(table)
        if fit is None:
            raise TraceError(f"{what}: the row offsets of registers "
                             f"{[m.register for m in group]} of {part.tv} are not a sum of "
                             "per-bit terms of the thread index; use power-of-two warp and "
                             "repeat counts in the TV layout")
        inner, outer, disp = split_swizzled(tile.offset + bit_expr(tid, fit, threads),
                                            part.swizzle)
        attrs = {"buffer": part.alloc.name, "base": part.alloc.offset, "disp": disp,
                 "swizzle": None if part.swizzle is None else
                 (part.swizzle.bits, part.swizzle.base, part.swizzle.shift),
                 "num": len(group), "trans": group[0].trans,
                 "registers": tuple(m.register for m in group),
                 "bank_ways": _bank_ways(tile.offset, table, part)}
        yield group, trace.index(inner, i32), trace.index(outer, i32), attrs


def ldmatrix(src: SharedTensor, *, num: int = 4, trans=None) -> RegisterTensor:
    """This thread's values of the shared partition `src` as a register tensor with src's TV
    layout, loaded by ldmatrix (`num` matrices per instruction at most; `trans` None derives
    .trans per register). Raises LayoutMismatchError when a register is no ldmatrix matrix."""
    trace = current("lk.sm80.ldmatrix")
    values = [None] * src.tv.num_values if isinstance(src, SharedTensor) and src.tv else []
    for group, inner, outer, attrs in matrix_instructions("lk.sm80.ldmatrix", src, num, trans):
        results = trace.emit("ldmatrix", [inner, outer], [src.dtype] * (2 * len(group)), attrs)
        for i, m in enumerate(group):
            values[2 * m.register:2 * m.register + 2] = results[2 * i:2 * i + 2]
    return RegisterTensor(src.dtype, src.tv, values)


def _bank_ways(offset, table: list, src: SharedTensor):
    """The worst bank conflict of the rows one instruction reads (warp 0, first 32 lanes)."""
    offset = sympy.sympify(offset)
    if offset.free_symbols:
        _, outer, _ = split_swizzled(offset, src.swizzle)
        if sympy.expand(offset - outer).free_symbols:
            return None
        offset = offset - outer          # whole swizzle periods: the same banks
    nbytes = src.dtype.nbytes
    addresses = []
    for row in table[:WARP]:
        element = int(offset) + row
        if src.swizzle is not None:
            element = src.swizzle(element)
        addresses.append(src.alloc.offset + element * nbytes)
    return bank_ways(addresses, ROW_ELEMENTS * nbytes)


__all__ = ["ldmatrix", "matrix_instructions", "plan_matrices", "Matrix", "NUMS", "ROW_ELEMENTS"]
