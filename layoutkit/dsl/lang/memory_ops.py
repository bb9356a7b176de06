"""Memory ops of the IR, one definition each: global loads and stores (vectorized, masked),
shared-memory loads and stores (the buffer's swizzle applied to the element offset), the block
barrier and warp shuffles.

A global address is `pointer + (offset + disp) * sizeof(dtype)`; a shared one is
`smem + base + Sw(offset) * n + disp * n` with the buffer's swizzle Sw
(Lowering.shared_address). The protocol check sees shared accesses as byte ranges per thread
class and the barrier as a rendezvous of the whole block; global memory is outside it.
"""
from __future__ import annotations

from layoutkit.ptx.isa import convert, memory, warp
from layoutkit.sync import cta_sync
from layoutkit.sync import kernel_model as km

from ..core.opdef import NoEffects, OpDef
from ..core.types import PointerType, bool_, i32, i64
from ..core.verifier import fail
from ..interpreter import numerics
from ..interpreter.collective import meet_warp
from ..interpreter.executor import Step
from ..interpreter.machine import WARP_SIZE, BarrierWait
from ..interpreter.memory import decode, encode, shared_byte_offset
from ..lower.function import byte_register, fill_bits, mov_type

VECTORS = (1, 2, 4, 8, 16)       # values per access (at most 16 bytes)


def words(dtype, vec: int) -> tuple[str, int, int]:
    """How `vec` values of `dtype` move: (PTX memory type, elements of the PTX vector, values per
    element). PTX vectors have at most 4 elements, so 8 16-bit values move as 4 .b32; 8-bit
    values (fp8, .b8 registers) move as .b32 words of 4 (a pair as one .b16)."""
    if dtype.nbytes == 2 and vec == 8:
        return "b32", 4, 2
    if dtype.nbytes == 1 and vec >= 2:
        return ("b32", vec // 4, 4) if vec >= 4 else ("b16", 1, 2)
    return dtype.ptx, vec, 1


def _split(k, regs, per: int, dtype) -> tuple:
    if per == 1:
        return tuple(regs)
    return tuple(r for word in regs for r in convert.unpack(k, word, per, part_type=dtype.ptx))


def _join(k, regs, per: int) -> list:
    if per == 1:
        return list(regs)
    return [convert.pack(k, regs[i:i + per]) for i in range(0, len(regs), per)]


class _GlobalAccess(OpDef):
    """The rule global loads and stores share: a pointer plus an i64 element offset, 1-8 values of
    the pointer's type in at most 16 bytes, the bool mask last when masked."""

    def verify(self, op):
        vec, masked = op.attrs["vec"], op.attrs["masked"]
        ptr, offset = op.operands[0], op.operands[1]
        if not isinstance(ptr.type, PointerType) or offset.type != i64:
            fail(op, "addresses a pointer plus an i64 element offset")
        data = op.results if op.name == "load" else op.operands[2:2 + vec]
        if vec not in VECTORS or len(data) != vec:
            fail(op, f"moves 1, 2, 4, 8 or 16 values, got vec={vec} with {len(data)}")
        if vec * ptr.type.dtype.nbytes > 16:
            fail(op, f"a vector access moves at most 16 bytes; {vec} x {ptr.type.dtype}")
        if any(v.type != ptr.type.dtype for v in data):
            fail(op, f"values must be {ptr.type.dtype}, the pointer's element type")
        expected = 2 + (0 if op.name == "load" else vec) + (1 if masked else 0)
        if len(op.operands) != expected or (masked and op.operands[-1].type != bool_):
            fail(op, "operands are ptr, offset, values (store), then the bool mask when masked")

    @staticmethod
    def write_step(op, what: str, update) -> Step:
        """The interpreter's step of a global write (a store, an atomic add): where the mask
        holds, the bytes at ptr + offset + disp become update(raw bytes, values) in one step."""
        vec, masked, disp = op.attrs["vec"], op.attrs["masked"], op.attrs["disp"]
        dtype = op.operands[0].type.dtype
        ptr, offset = op.operands[0].id, op.operands[1].id
        data = tuple(v.id for v in op.operands[2:2 + vec])
        mask = op.operands[-1].id if masked else None
        nbytes = vec * dtype.nbytes
        what = f"{what} of {vec} x {dtype}"

        def run(thread):
            env = thread.env
            if mask is not None and not env[mask]:
                return
            raw = thread.cta.machine.memory.access(env[ptr], (env[offset] + disp) * dtype.nbytes,
                                                   nbytes, nbytes, what, op)
            raw[:] = update(raw, [env[v] for v in data])
        return Step(run, op, preempt=True)


class _SharedAccess(OpDef):
    """The rule shared loads and stores share: an i32 element offset, 1-8 values of one type in at
    most 16 bytes."""

    def verify(self, op):
        vec = op.attrs["vec"]
        data = op.results if op.name == "shared_load" else op.operands[1:]
        if not op.operands or op.operands[0].type != i32:
            fail(op, "addresses its buffer with an i32 element offset")
        if vec not in VECTORS or len(data) != vec or len({v.type for v in data}) != 1:
            fail(op, f"moves 1, 2, 4, 8 or 16 values of one type, got vec={vec} with "
                     f"{len(data)}")
        if vec * data[0].type.nbytes > 16:
            fail(op, f"a vector access moves at most 16 bytes; {vec} x {data[0].type}")


class Load(NoEffects, _GlobalAccess):
    """ptr, i64 element offset[, mask] -> vec values (`disp` elements added; masked-off lanes give
    `other`). Global memory is outside the protocol check."""

    name = "load"

    def lower(self, op, lw):
        k, vec, dtype = lw.k, op.attrs["vec"], op.operands[0].type.dtype
        mask = lw.operand(op.operands[2]) if op.attrs["masked"] else True
        if mask is False:
            for r in op.results:
                lw.vals[r.id] = lw.masked_fill(op, dtype)
            return
        pred = None if mask is True else mask
        address = lw.global_address(op)
        mem_type, count, per = words(dtype, vec)
        if pred is not None and mem_type == "b8":     # a lone fp8 value
            outs = (byte_register(k, fill_bits(op.attrs["other"], dtype), out=k.var("b8")),)
        elif pred is not None:
            outs = tuple(k.var(mem_type) for _ in range(count))
            fill = fill_bits(op.attrs["other"], dtype, per)
            for out in outs:
                convert.mov(k, fill, dtype=mem_type if per > 1 else mov_type(dtype), out=out)
        else:
            outs = None
        got = memory.ld(k, "global", address, mem_type, vec=count,
                        out=(outs if count > 1 else outs[0]) if outs else None, pred=pred)
        got = _split(k, got if isinstance(got, tuple) else (got,), per, dtype)
        for r, reg in zip(op.results, got):
            lw.vals[r.id] = reg

    def interpret(self, op, compiler):
        vec, masked, disp = op.attrs["vec"], op.attrs["masked"], op.attrs["disp"]
        dtype = op.operands[0].type.dtype
        ptr, offset = op.operands[0].id, op.operands[1].id
        mask = op.operands[2].id if masked else None
        results = tuple(r.id for r in op.results)
        other = numerics.to_dtype(op.attrs["other"], dtype)
        nbytes = vec * dtype.nbytes
        what = f"the load of {vec} x {dtype}"

        def run(thread):
            env = thread.env
            if mask is not None and not env[mask]:
                for r in results:
                    env[r] = other
                return
            raw = thread.cta.machine.memory.access(env[ptr], (env[offset] + disp) * dtype.nbytes,
                                                   nbytes, nbytes, what, op)
            for r, value in zip(results, decode(raw.copy(), dtype)):
                env[r] = value
        return Step(run, op, preempt=True)


class Store(NoEffects, _GlobalAccess):
    """ptr, i64 element offset, vec values[, mask] (`disp` elements added). Global memory is
    outside the protocol check."""

    name = "store"

    def lower(self, op, lw):
        k, vec = lw.k, op.attrs["vec"]
        dtype = op.operands[0].type.dtype
        mask = lw.operand(op.operands[-1]) if op.attrs["masked"] else True
        if mask is False:
            return
        data = _join(k, [lw.reg(v) for v in op.operands[2:2 + vec]], words(dtype, vec)[2])
        address = lw.global_address(op)
        memory.st(k, "global", address, tuple(data) if len(data) > 1 else data[0],
                  pred=None if mask is True else mask)

    def interpret(self, op, compiler):
        dtype = op.operands[0].type.dtype
        return self.write_step(op, "the store", lambda raw, values: encode(values, dtype))


class SharedLoad(_SharedAccess):
    """i32 element offset -> vec values from shared buffer `buffer` (`base` bytes, `disp` elements,
    the buffer's `swizzle` applied to the offset)."""

    name = "shared_load"

    def lower(self, op, lw):
        dtype, vec = op.results[0].type, op.attrs["vec"]
        address = lw.shared_address(op, dtype.nbytes)
        mem_type, count, per = words(dtype, vec)
        got = memory.ld(lw.k, "shared", address, mem_type, vec=count)
        got = _split(lw.k, got if isinstance(got, tuple) else (got,), per, dtype)
        for r, reg in zip(op.results, got):
            lw.vals[r.id] = reg

    def interpret(self, op, compiler):
        dtype, vec = op.results[0].type, op.attrs["vec"]
        address = shared_byte_offset(op, dtype)
        offset, buffer = op.operands[0].id, op.attrs["buffer"]
        results = tuple(r.id for r in op.results)
        nbytes = vec * dtype.nbytes
        what = f"the shared load of {vec} x {dtype} from {buffer}"

        def run(thread):
            start = address(thread.env[offset])
            cta = thread.cta
            shared = cta.shared
            shared.check_access(start, nbytes, nbytes, False, what, op, buffer)
            cta.machine.on_shared_access(thread, start, nbytes, False, what, op)
            env = thread.env
            for r, value in zip(results, decode(shared.view(start, nbytes).copy(), dtype)):
                env[r] = value
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        vec, nbytes = op.attrs["vec"], op.results[0].type.nbytes
        ex.shared_access(op, mask, loops, op.operands[0], nbytes, vec * nbytes, op.attrs["buffer"],
                    km.SharedRead, "generic", op.attrs["disp"])


class SharedStore(_SharedAccess):
    """i32 element offset, vec values -> shared buffer `buffer` (addressing as SharedLoad)."""

    name = "shared_store"

    def lower(self, op, lw):
        vec = op.attrs["vec"]
        dtype = op.operands[1].type
        data = _join(lw.k, [lw.reg(v) for v in op.operands[1:1 + vec]], words(dtype, vec)[2])
        address = lw.shared_address(op, dtype.nbytes)
        memory.st(lw.k, "shared", address, tuple(data) if len(data) > 1 else data[0])

    def interpret(self, op, compiler):
        vec = op.attrs["vec"]
        dtype = op.operands[1].type
        address = shared_byte_offset(op, dtype)
        offset, buffer = op.operands[0].id, op.attrs["buffer"]
        data = tuple(v.id for v in op.operands[1:1 + vec])
        nbytes = vec * dtype.nbytes
        what = f"the shared store of {vec} x {dtype} to {buffer}"

        def run(thread):
            start = address(thread.env[offset])
            cta = thread.cta
            shared = cta.shared
            shared.check_access(start, nbytes, nbytes, True, what, op, buffer)
            env = thread.env
            new = encode([env[v] for v in data], dtype)
            target = shared.view(start, nbytes)
            cta.machine.on_shared_access(thread, start, nbytes, True, what, op, target == new)
            target[:] = new
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        vec, nbytes = op.attrs["vec"], op.operands[1].type.nbytes
        ex.shared_access(op, mask, loops, op.operands[0], nbytes, vec * nbytes, op.attrs["buffer"],
                    km.SharedWrite, None, op.attrs["disp"])


class Barrier(OpDef):
    """bar.sync 0: every thread of the block."""

    name = "barrier"
    synchronizes = True

    def verify(self, op):
        if op.operands or op.results:
            fail(op, "takes no operands and has no results")

    def lower(self, op, lw):
        cta_sync(lw.k)

    def interpret(self, op, compiler):
        def run(thread):
            cta = thread.cta
            barrier = cta.barrier(0)
            generation = barrier.arrive(thread, len(cta.threads), op)
            return BarrierWait(barrier, generation, op)
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        ex.emit(mask, km.ThreadBarrier, {"ident": 0, "threads": ex.block_threads,
                                           "waits": True, "site": ex.site(op, loops)},
                  per_thread=1)


class Shfl(NoEffects, OpDef):
    """shfl.sync over the full warp: value, i32 lane -> the value of the lane `mode` (bfly, idx)
    names."""

    name = "shfl"

    def verify(self, op):
        a = op.attrs
        ops, res = op.operands, op.results
        if len(ops) != 2 or ops[1].type != i32 or len(res) != 1 or res[0].type != ops[0].type \
                or ops[0].type.nbytes > 4 or a.get("mode") not in ("bfly", "idx"):
            fail(op, "shuffles one value of at most 32 bits by an i32 lane, mode bfly or idx")

    def lower(self, op, lw):
        value, lane = op.operands
        t = value.type
        src = lw.reg(value)
        lane = lw.operand(lane)
        if t.nbytes == 2:        # shfl moves 32 bits: carry a 16-bit value in the low half
            word = convert.pack(lw.k, (src, src))
            got = warp.shfl(lw.k, op.attrs["mode"], word, lane)
            lw.define(op, convert.unpack(lw.k, got, 2, part_type=t.ptx)[0])
        else:
            lw.define(op, warp.shfl(lw.k, op.attrs["mode"], src, lane))

    def interpret(self, op, compiler):
        value, lane = op.operands[0].id, op.operands[1].id
        result = op.results[0].id

        mode = op.attrs["mode"]

        def finish(warp, arrivals):          # lane -> (value, lane operand)
            for member in warp.threads:
                b = arrivals[member.lane][1] & (WARP_SIZE - 1)
                member.env[result] = arrivals[b if mode == "idx" else member.lane ^ b][0]

        def run(thread):
            env = thread.env
            return meet_warp(thread, op, f"shfl.sync.{mode}", (env[value], env[lane]), finish)
        return Step(run, op)
