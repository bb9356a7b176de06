"""The sm_80 ops of the IR, one definition each: `cp_async` with its commit/wait groups,
`ldmatrix` and `mma_sync` (the user API and each op's operands and attrs: cp_async.py,
ldmatrix.py, mma.py). They exist on sm_80 and on sm_90a.

Lowering: shared addresses are `smem + base + Sw(inner) * nbytes + outer * nbytes + disp *
nbytes` (smem_address.py); each (inner, outer) pair is computed once per scope. An ldmatrix
register is unpacked into its two 16-bit values for the IR, and mma.sync takes the packed
register back when its operand pair is exactly that register's halves (no repacking).

Interpreter: interpreter/cp_async_model.py (copies in commit groups), the warp meeting of ldmatrix and mma.sync
in interpreter/collective.py (lane 8i + r gives the address of row r of matrix i; lane l receives row l/4, columns 2(l%4),
2(l%4)+1 of each matrix, or the transpose; mma.sync computes D = A B^T + C with B over (N, K),
exact products summed in float64, rounded once to f32).

Protocol check: a cp.async is an asynchronous generic-proxy write of its shared bytes
(`AsyncWrite`), completed for the issuing thread by the cp_async_wait that retires its commit
group (`Commit` / `GroupWait` of kind "cp_async") and for the other threads by a barrier after
that wait (layoutkit.sync.async_copy_rules); ldmatrix is a generic shared read, made by the warp
together (`collective`: each lane receives rows that other lanes address); mma.sync works on
registers only.
"""
from __future__ import annotations

import numpy as np

from layoutkit.algebra import size
from layoutkit.ptx.builder import Address
from layoutkit.ptx.isa import arith, async_copy, compare, convert, matrix
from layoutkit.sync import CP_ASYNC_KIND
from layoutkit.sync import kernel_model as km

from ..core.opdef import NoEffects, OpDef
from ..core.types import PointerType, bool_, i32, i64
from ..core.verifier import fail
from ..interpreter.collective import meet_warp
from ..interpreter.cp_async_model import Copy, GroupWait, groups
from ..interpreter.executor import Step
from ..interpreter.machine import WARP_SIZE, location_text
from ..interpreter.memory import decode, split_address
from .cp_async import CP_ASYNC_BYTES, MAX_PENDING
from .ldmatrix import NUMS, ROW_ELEMENTS
from .mma_layouts import MMA_SHAPES

GROUP_KIND = CP_ASYNC_KIND    # the AsyncWrite / Commit / GroupWait kind of the protocol check


# ---- shared helpers of the facets -----------------------------------------------------------
def _u32(lw, value):
    reg = lw.reg(value)
    if reg.type.name == "u32":
        return reg
    return convert.mov(lw.k, reg, dtype="b32", out=lw.k.reg("u32"))


def split_shared_address(lw, op, inner, outer, disp: int, nbytes: int) -> Address:
    """The shared address Sw(inner) + outer + disp elements of `op`'s buffer (cached per
    scope by (inner, outer, swizzle, element size))."""
    swizzle = op.attrs["swizzle"]
    const = op.attrs["base"] + disp * nbytes
    key = ("split-shared", inner.id, outer.id, swizzle, nbytes)
    for cache in reversed(lw.addr_cache):
        if key in cache:
            reg, extra = cache[key]
            return Address(reg, const + extra)
    offset = lw.swizzled(lw.operand(inner), swizzle)
    extra, address = 0, lw.smem
    if isinstance(offset, int):
        extra += offset * nbytes
    else:
        if offset.type.name != "u32":
            offset = convert.mov(lw.k, offset, dtype="b32", out=lw.k.reg("u32"))
        address = arith.mad(lw.k, offset, nbytes, address, mode="lo", dtype="u32")
    rest = lw.operand(outer)
    if isinstance(rest, int):
        extra += rest * nbytes
    else:
        address = arith.mad(lw.k, _u32(lw, outer), nbytes, address, mode="lo", dtype="u32")
    lw.addr_cache[-1][key] = (address, extra)
    return Address(address, const + extra)


def _packed_pairs(lw) -> dict:
    """(lo value id, hi value id) -> the 32-bit register ldmatrix loaded them in."""
    return lw.__dict__.setdefault("_mma_packed", {})


def packed_pair(lw, lo, hi):
    """The 32-bit register holding 16-bit values lo, hi (the one ldmatrix loaded, or a pack)."""
    reg = _packed_pairs(lw).get((lo.id, hi.id))
    if reg is not None:
        return reg
    return convert.pack(lw.k, (lw.reg(lo), lw.reg(hi)))


def shared_range(ex, op, mask, loops, at: tuple, disp: int, nbytes: int, span: int, kind,
                  fields: dict) -> None:
    """Emit `kind` (with `fields`) per CTA for the byte range of `op`'s shared access at element
    Sw(inner) + outer + disp, inner and outer its operands at positions `at`: the span of the
    pre-swizzle offsets of the threads of `mask`, each access `span` bytes (as Extractor.shared_access)."""
    inner, outer = (ex.per_thread(op.operands[i], mask) for i in at)
    buffer = op.attrs["buffer"]
    if inner is None or outer is None:
        ex.undecidable(op, loops, f"the shared offset into {buffer} is computed from memory; "
                       "the check skipped this access")
        return
    offsets, site = inner + outer, ex.site(op, loops)
    for sub, (cta,) in ex.split(mask, [ex.cta[mask]]):
        part = offsets[ex.cta[mask] == cta]
        rng = km.ByteRange(cta, buffer, (int(part.min()) + disp) * nbytes,
                           (int(part.max()) + disp) * nbytes + span)
        ex.emit(sub, kind, dict(fields, bytes=rng, site=site))


# ---- cp.async and its groups ----------------------------------------------------------------
class CpAsync(OpDef):
    """ptr, offset(i64), inner(i32), outer(i32)[, mask] -> (): `bytes` from global element
    offset + disp to shared element Sw(inner) + outer + sdisp of `buffer`, asynchronously;
    zeros (nothing read) where the mask is false."""

    name = "cp_async"
    synchronizes = True

    def verify(self, op):
        a = op.attrs
        if len(op.operands) != 4 + bool(a.get("masked")):
            fail(op, "operands are ptr, offset, inner, outer, then the mask when masked")
        ptr, offset, inner, outer = op.operands[:4]
        if not isinstance(ptr.type, PointerType) or offset.type != i64 or inner.type != i32 or \
                outer.type != i32:
            fail(op, "addresses a pointer + i64 element offset and shared i32 offsets")
        if a.get("masked") and op.operands[4].type != bool_:
            fail(op, "the mask is a bool")
        if a.get("bytes") not in CP_ASYNC_BYTES or a["bytes"] != a["vec"] * ptr.type.dtype.nbytes:
            fail(op, f"copies {CP_ASYNC_BYTES} bytes: vec x the element size")
        if op.results:
            fail(op, "has no results")

    def lower(self, op, lw):
        a, k = op.attrs, lw.k
        ptr, _, inner, outer = op.operands[:4]
        dst = split_shared_address(lw, op, inner, outer, a["sdisp"], ptr.type.dtype.nbytes)
        src = lw.global_address(op)
        keep = lw.operand(op.operands[4]) if a["masked"] else True
        if keep is True:
            size_ = None
        elif keep is False:
            size_ = 0
        else:        # src-size 0: nothing read, the destination zero-filled (PTX ISA cp.async)
            size_ = compare.selp(k, a["bytes"], 0, keep, dtype="u32")
        async_copy.cp_async(k, dst, src, a["bytes"], cache="cg" if a["bytes"] == 16 else "ca",
                            src_size=size_)

    def interpret(self, op, compiler):
        a = op.attrs
        ptr, offset, inner, outer = (v.id for v in op.operands[:4])
        mask = op.operands[4].id if a["masked"] else None
        nbytes, elem = a["bytes"], op.operands[0].type.dtype.nbytes
        address = split_address(op, elem, "sdisp")
        what = f"the cp.async of {nbytes} bytes into {a['buffer']}"

        def run(thread):
            env, cta = thread.env, thread.cta
            start = address(env[inner], env[outer])
            cta.shared.check_access(start, nbytes, nbytes, True, what, op, a["buffer"])
            if mask is None or env[mask]:
                data = cta.machine.memory.access(env[ptr], (env[offset] + a["disp"]) * elem,
                                                 nbytes, nbytes, what, op).copy()
            else:
                data = np.zeros(nbytes, dtype=np.uint8)            # src-size 0: zero-fill
            claim = cta.shared.claim(start, nbytes, True, f"the cp.async issued at "
                                     f"{location_text(op)} by {thread.describe()}",
                                     "wait for its group (lk.sm80.cp_async_wait) and lk.barrier() "
                                     "first")
            copy = Copy(thread, start, data, op, claim)
            groups(thread).issue(copy)
            cta.machine.scheduler.post(copy)
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        a = op.attrs
        shared_range(ex, op, mask, loops, (2, 3), a["sdisp"], op.operands[0].type.dtype.nbytes,
                      a["bytes"], km.AsyncWrite, {"kind": GROUP_KIND})


class _Group(OpDef):
    def verify(self, op):
        if op.operands or op.results:
            fail(op, "takes no operands and has no results")


class CpAsyncCommit(_Group):
    """() -> (): closes this thread's current group of cp.async copies."""

    name = "cp_async_commit"
    synchronizes = True

    def lower(self, op, lw):
        async_copy.commit_group(lw.k)

    def interpret(self, op, compiler):
        def run(thread):
            groups(thread).commit()
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.Commit, {"kind": GROUP_KIND, "site": ex.site(op, loops)})


class CpAsyncWait(_Group):
    """() -> (): waits until at most `pending` of this thread's committed groups pend."""

    name = "cp_async_wait"
    synchronizes = True

    def verify(self, op):
        super().verify(op)
        if not 0 <= op.attrs.get("pending", -1) <= MAX_PENDING:
            fail(op, f"pending is an int in 0..{MAX_PENDING}")

    def lower(self, op, lw):
        async_copy.wait_group(lw.k, op.attrs["pending"])

    def interpret(self, op, compiler):
        pending = op.attrs["pending"]

        def run(thread):
            wait = GroupWait(thread, groups(thread).wait(pending), op)
            return None if wait.ready() else wait
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.GroupWait, {"kind": GROUP_KIND, "pending": op.attrs["pending"],
                                     "site": ex.site(op, loops)})


# ---- ldmatrix and mma.sync ------------------------------------------------------------------
class Ldmatrix(OpDef):
    """inner(i32), outer(i32) -> 2*num 16-bit values: `num` 8x8 matrices (`.trans` when
    `trans`) of `buffer`; lane l addresses row l%8 of matrix l/8 at Sw(inner) + outer + disp."""

    name = "ldmatrix"

    def verify(self, op):
        a = op.attrs
        if len(op.operands) != 2 or any(v.type != i32 for v in op.operands):
            fail(op, "takes the i32 inner (swizzled) and outer element offsets")
        if a.get("num") not in NUMS or len(op.results) != 2 * a["num"]:
            fail(op, "loads 1, 2 or 4 matrices: two 16-bit results per matrix")
        if len({v.type for v in op.results}) != 1 or op.results[0].type.nbytes != 2:
            fail(op, "results are 16-bit values of one type")
        if len(a.get("registers", ())) != a["num"] or not isinstance(a.get("trans"), bool):
            fail(op, "names the register of each matrix and a bool trans")

    def lower(self, op, lw):
        k, dtype = lw.k, op.results[0].type
        inner, outer = op.operands
        address = split_shared_address(lw, op, inner, outer, op.attrs["disp"], dtype.nbytes)
        regs = matrix.ldmatrix(k, address, op.attrs["num"], trans=op.attrs["trans"])
        pairs = _packed_pairs(lw)
        for i, reg in enumerate(regs):
            lo, hi = op.results[2 * i], op.results[2 * i + 1]
            lw.vals[lo.id], lw.vals[hi.id] = convert.unpack(k, reg, 2, part_type=dtype.ptx)
            pairs[(lo.id, hi.id)] = reg

    def interpret(self, op, compiler):
        a = op.attrs
        dtype = op.results[0].type
        inner, outer = (v.id for v in op.operands)
        address = split_address(op, dtype.nbytes, "disp")
        results = [r.id for r in op.results]
        num, trans = a["num"], a["trans"]
        what = f"the ldmatrix row read from {a['buffer']}"

        def finish(warp, arrivals):
            shared = warp.cta.shared
            rows = {}
            for i in range(num):
                for r in range(8):
                    lane = 8 * i + r
                    start = arrivals[lane]
                    shared.check_access(start, 16, 16, False, what, op, a["buffer"])
                    thread = warp.threads[lane]
                    warp.cta.machine.on_shared_access(thread, start, 16, False, what, op)
                    rows[i, r] = decode(shared.view(start, 16).copy(), dtype)
            for thread in warp.threads:
                g, q = divmod(thread.lane, 4)
                for i in range(num):
                    for h in range(2):
                        value = rows[i, 2 * q + h][g] if trans else rows[i, g][2 * q + h]
                        thread.env[results[2 * i + h]] = value

        def run(thread):
            return meet_warp(thread, op, "ldmatrix",
                             address(thread.env[inner], thread.env[outer]), finish)
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        nbytes = op.results[0].type.nbytes
        shared_range(ex, op, mask, loops, (0, 1), op.attrs["disp"], nbytes,
                      ROW_ELEMENTS * nbytes, km.SharedRead, {"proxy": "generic",
                                                             "collective": True})


class MmaSync(NoEffects, OpDef):
    """a..., b..., c... -> d...: per warp D = A * B + C (`shape`, `ab`, `acc` type names), lane
    l's values at the coordinates of the atom's fragment layouts `a_layout`, `b_layout`,
    `c_layout` (lane x value -> atom tile index). Registers only: nothing for the protocol
    check."""

    name = "mma_sync"

    def verify(self, op):
        a = op.attrs
        if a.get("shape") not in MMA_SHAPES:
            fail(op, f"shape is one of {tuple(MMA_SHAPES)}")
        na, nb, nc = (size(a[key][1]) for key in ("a_layout", "b_layout", "c_layout"))
        if len(op.operands) != na + nb + nc or len(op.results) != nc:
            fail(op, f"takes {na} a, {nb} b and {nc} c values and gives {nc}")
        types = [v.type.name for v in op.operands]
        if set(types[:na + nb]) != {a["ab"]} or set(types[na + nb:]) != {a["acc"]} or \
                {v.type.name for v in op.results} != {a["acc"]}:
            fail(op, f"a, b are {a['ab']}; c and the results {a['acc']}")

    def lower(self, op, lw):
        a = op.attrs
        na, nb = a["a_layout"][1].size(), a["b_layout"][1].size()
        values = op.operands
        ra = [packed_pair(lw, values[i], values[i + 1]) for i in range(0, na, 2)]
        rb = [packed_pair(lw, values[na + i], values[na + i + 1]) for i in range(0, nb, 2)]
        rc = [lw.reg(v) for v in values[na + nb:]]
        rd = matrix.mma_sync(lw.k, ra, rb, rc, shape=a["shape"], ab_type=a["ab"],
                             acc_type=a["acc"])
        for result, reg in zip(op.results, rd):
            lw.vals[result.id] = reg

    def interpret(self, op, compiler):
        a = op.attrs
        m, n, k = MMA_SHAPES[a["shape"]]
        layouts = [a["a_layout"], a["b_layout"], a["c_layout"]]
        tiles = [(m, k), (n, k), (m, n)]
        counts = [layout[1].size() for layout in layouts]
        operands = [v.id for v in op.operands]
        results = [r.id for r in op.results]
        places = [[[divmod(layout(lane, v), tile[0])[::-1] for v in range(count)]
                   for lane in range(WARP_SIZE)]
                  for layout, tile, count in zip(layouts, tiles, counts)]

        def finish(warp, arrivals):
            mats = [np.zeros(tile) for tile in tiles]
            for lane, values in arrivals.items():
                at = 0
                for mat, count, place in zip(mats, counts, places):
                    for v in range(count):
                        mat[place[lane][v]] = float(values[at + v])
                    at += count
            d = (mats[0] @ mats[1].T + mats[2]).astype(np.float32)
            for thread in warp.threads:
                for v, r in enumerate(results):
                    thread.env[r] = d[places[2][thread.lane][v]]

        def run(thread):
            return meet_warp(thread, op, "mma.sync", [thread.env[v] for v in operands], finish)
        return Step(run, op)


__all__ = ["CpAsync", "CpAsyncCommit", "CpAsyncWait", "Ldmatrix", "MmaSync", "GROUP_KIND"]
