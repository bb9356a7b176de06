"""Distributed shared memory: a thread's partition of a shared tensor in a peer CTA of the
cluster, read and written with `ld/st.shared::cluster` (sm_90).

    lk.sm90.dsmem_store(buf.tile(...).partition(tv), values, cta=rank)   # into rank's copy
    values = lk.sm90.dsmem_load(buf.tile(...).partition(tv), cta=rank)   # from rank's copy

Every CTA of a cluster has the same shared allocations; `cta=rank` (an int or kernel integer
in 0..cluster_size()-1, its own rank included) names whose copy of the buffer the access
touches (`mapa.shared::cluster` of the buffer's address, then the access: the same chunks,
swizzle and 16-byte vectors as lk.load / lk.store of that partition).

Ordering across CTAs is the cluster barrier's: `lk.sm90.cluster_sync()` (arrive.release +
wait.acquire) orders every access before it, in every CTA, before every access after it. A
kernel touches a peer's shared memory only after a cluster barrier (the peer has started) and
ends its last exchange with one (no CTA exits while a peer may still touch its memory). The
interpreter checks both and reports an access of another CTA's bytes that no cluster barrier
orders (layoutkit.dsl.interpreter.dsmem_model); the static protocol check sees the accesses
as reads and writes of the peer CTA's bytes and reports the same pairs
(layoutkit.sync.cluster_memory_rules).

The asynchronous form orders through the receiver's mbarrier instead of a cluster barrier:

    lk.sm90.mbarrier_expect_tx(full[0], nbytes)        # the receiver: bytes its peers send
    lk.sm90.dsmem_store_async(buf...partition(tv), values, cta=rank, barrier=full[0])
    lk.sm90.mbarrier_wait(full[0], 0)                  # the receiver: then it reads buf

(`st.async.shared::cluster.mbarrier::complete_tx::bytes`: the store lands in rank's buffer
and completes its bytes on rank's copy of the barrier; 32-bit values, PTX 8.1). The sender
needs no barrier after it (the receiver cannot exit before the bytes land); the peers must
have started (a cluster barrier first, after the barrier's init and fence_mbarrier_init). The
static check sees each store as an asynchronous copy into the peer completing on its barrier
(the rules of TMA loads: a read before the wait on the phase is an error); the interpreter
lands it at once and publishes it through the barrier's phase. Neither follows a store into
bytes the receiver is still reading from an earlier phase: one exchange per buffer.

IR ops (name: operands -> results; attrs, as shared_load / shared_store):
  dsmem_load:         i32 offset, i32 rank -> vec values     buffer, base, vec, disp, swizzle
  dsmem_store:        i32 offset, i32 rank, vec values ->    (same)
  dsmem_store_async:  i32 offset, i32 rank, i32 barrier offset, vec values -> (same, and
                      barrier, stage: the mbarrier's)
"""
from __future__ import annotations

from layoutkit.ptx.isa import cluster as isa_cluster, convert, dsmem as isa_dsmem
from layoutkit.sync import kernel_model as km

from ..core.bounds import within
from ..core.errors import TraceError
from ..core.opdef import SM90A_ONLY, OpDef
from ..core.sync_trace import sync_state
from ..core.tracer import current, is_int_expr
from ..core.types import i32
from ..core.values import RegisterTensor
from ..core.verifier import fail
from ..interpreter import dsmem_model
from ..interpreter.executor import Step
from ..interpreter.memory import decode, encode, shared_byte_offset
from ..lang.memory import check_written_value, plan
from ..lang.memory_ops import VECTORS, _join, _split, words
from ..lang.shared import SharedTensor, shared_access_attrs
from ..interpreter.mbarrier_model import lookup
from ..interpreter.tma_model import _agent_index
from .mbarrier import _initialised, _ref
from .mbarrier_ops import _barrier_address


def _peer_view(what: str, view, cta):
    """The trace, and `cta` as an i32 kernel value, after checking the arguments."""
    trace = current(what)
    shape = sync_state(trace).cluster
    if shape is None:
        raise TraceError(f"{what} needs a cluster kernel: declare @lk.kernel(cluster=(x, y, z))")
    if not isinstance(view, SharedTensor) or view.tv is None:
        raise TraceError(f"{what} takes a thread's partition of a shared tensor "
                         f"(buffer.tile(...).partition(tv)): only shared memory is "
                         f"distributed over the cluster, got {view!r}")
    size = shape[0] * shape[1] * shape[2]
    if cta is None or isinstance(cta, bool) or not is_int_expr(cta) or \
            within(trace, cta, 0, size - 1)[0] is False:
        raise TraceError(f"{what}(cta={cta!r}): the peer's cluster rank is an integer in "
                         f"0..{size - 1} (the cluster {shape} has {size} CTAs)")
    return trace, trace.index(cta, i32)


def _chunks(trace, view, rank, data=None, barrier=None):
    """Emit one dsmem op per chunk of lk.load / lk.store's plan of `view` (dsmem_store_async
    with `barrier`, an MbarrierRef); the loaded values."""
    values = []
    for chunk in plan(view):
        index, attrs = shared_access_attrs(trace, view.alloc, view.swizzle, chunk.offset,
                                           chunk.vec)
        if data is None:
            values += trace.emit("dsmem_load", [index, rank], [view.dtype] * chunk.vec, attrs)
            continue
        stored = data.values[chunk.first:chunk.first + chunk.vec]
        if barrier is None:
            trace.emit("dsmem_store", [index, rank, *stored], (), attrs)
        else:
            trace.emit("dsmem_store_async", [index, rank, barrier.byte_offset(), *stored], (),
                       {**attrs, **barrier.attrs()})
    return values


def dsmem_load(src, *, cta) -> RegisterTensor:
    """This thread's values of `src` (a partition of a shared tensor) in the copy of the CTA of
    cluster rank `cta` (`ld.shared::cluster`), as a register tensor with src's TV layout."""
    what = "lk.sm90.dsmem_load"
    trace, rank = _peer_view(what, src, cta)
    return RegisterTensor(src.dtype, src.tv, _chunks(trace, src, rank))


def dsmem_store(dst, value: RegisterTensor, *, cta) -> None:
    """Write `value` to this thread's partition `dst` of a shared tensor in the copy of the CTA
    of cluster rank `cta` (`st.shared::cluster`; same TV layout and dtype)."""
    what = "lk.sm90.dsmem_store"
    trace, rank = _peer_view(what, dst, cta)
    _check_value(what, dst, value)
    _chunks(trace, dst, rank, value)


def dsmem_store_async(dst, value: RegisterTensor, *, cta, barrier) -> None:
    """Write `value` (32-bit values) to this thread's partition `dst` of a shared tensor in the
    copy of the CTA of cluster rank `cta` and complete its bytes on that CTA's copy of
    `barrier` (an mbarrier of this kernel; `st.async ... mbarrier::complete_tx::bytes`): the
    receiver expects them (lk.sm90.mbarrier_expect_tx) and waits on the barrier's phase."""
    what = "lk.sm90.dsmem_store_async"
    trace, rank = _peer_view(what, dst, cta)
    _check_value(what, dst, value)
    if value.dtype.nbytes != 4 or value.dtype.kind == "bool":
        raise TraceError(f"{what}: st.async stores 32-bit values (f32, i32, u32), got "
                         f"{value.dtype}; cast the tensor first")
    ref = _ref(what, barrier)
    _initialised(trace, what, ref)
    _chunks(trace, dst, rank, value, ref)


def _check_value(what: str, dst, value) -> None:
    if not isinstance(value, RegisterTensor):
        raise TraceError(f"{what} writes a register tensor, got {value!r}")
    check_written_value(what, dst, value)


# --- the op definitions -------------------------------------------------------------------

def _rank_operand(lw, op):
    """The cluster rank operand (operand 1): an immediate or a u32 register."""
    rank = lw.operand(op.operands[1])
    if isinstance(rank, int):
        return rank
    rank = lw.reg(op.operands[1])
    return rank if rank.type.name == "u32" else \
        convert.mov(lw.k, rank, dtype="b32", out=lw.k.reg("u32"))


def _mapped(lw, base, rank):
    """mapa.shared::cluster of a shared::cta base register for `rank` (once per scope)."""
    if not hasattr(base, "type"):                  # the shared array symbol: into a register
        base = convert.mov(lw.k, base, dtype="u32")
    key = ("mapa", id(base), rank if isinstance(rank, int) else rank.name)
    for cache in reversed(lw.addr_cache):
        if key in cache:
            return cache[key]
    mapped = lw.addr_cache[-1][key] = isa_cluster.mapa(lw.k, base, rank)
    return mapped


def _peer_address(lw, op, nbytes: int):
    """The shared::cluster address of the access in the peer's copy (mapa of the CTA-local
    address; mapa keeps offsets, so the displacement stays an immediate)."""
    local = lw.shared_address(op, nbytes)
    return type(local)(_mapped(lw, local.base, _rank_operand(lw, op)), local.offset)


class _DsmemAccess(OpDef):
    targets = SM90A_ONLY

    def verify(self, op):
        vec = op.attrs.get("vec")
        data = op.results if op.name == "dsmem_load" else op.operands[2:]
        if len(op.operands) < 2 or op.operands[0].type != i32 or op.operands[1].type != i32:
            fail(op, "addresses its buffer with an i32 element offset and an i32 cluster rank")
        if vec not in VECTORS or len(data) != vec or len({v.type for v in data}) != 1:
            fail(op, f"moves 1, 2, 4, 8 or 16 values of one type, got vec={vec} with "
                     f"{len(data)}")
        if vec * data[0].type.nbytes > 16:
            fail(op, f"a vector access moves at most 16 bytes; {vec} x {data[0].type}")

    def _effects(self, op, ex, mask, loops, nbytes: int, kind, proxy) -> None:
        site = ex.site(op, loops)
        ranks, offsets = ex.per_thread(op.operands[1], mask), ex.per_thread(op.operands[0], mask)
        if ranks is None or offsets is None:
            ex.undecidable(op, loops, f"the peer rank or the offset into {op.attrs['buffer']} "
                           "is computed from memory; the check skipped this access")
            return
        span = op.attrs["vec"] * nbytes
        disp = op.attrs["disp"]
        # one event per (rank, offset): a span over the threads of several CTAs would make
        # their disjoint slots of one buffer overlap
        for sub, (rank, offset) in ex.split(mask, [ranks, offsets]):
            rng = km.ByteRange(int(rank), op.attrs["buffer"], (int(offset) + disp) * nbytes,
                               (int(offset) + disp) * nbytes + span)
            fields = {"bytes": rng, "site": site}
            if proxy is not None:
                fields["proxy"] = proxy
            ex.emit(sub, kind, fields)


def _target(thread, op, what: str):
    return dsmem_model.peer(thread, int(thread.env[op.operands[1].id]), op, what)


class DsmemLoad(_DsmemAccess):
    """i32 element offset, i32 cluster rank -> vec values from that CTA's copy of shared buffer
    `buffer` (addressing as shared_load)."""

    name = "dsmem_load"

    def lower(self, op, lw):
        dtype, vec = op.results[0].type, op.attrs["vec"]
        address = _peer_address(lw, op, dtype.nbytes)
        mem_type, count, per = words(dtype, vec)
        got = isa_dsmem.ld_shared_cluster(lw.k, address, mem_type, vec=count)
        got = _split(lw.k, got if isinstance(got, tuple) else (got,), per, dtype)
        for r, reg in zip(op.results, got):
            lw.vals[r.id] = reg

    def interpret(self, op, compiler):
        compiler.cluster_memory = True
        dtype, vec = op.results[0].type, op.attrs["vec"]
        address = shared_byte_offset(op, dtype)
        offset, buffer = op.operands[0].id, op.attrs["buffer"]
        results = tuple(r.id for r in op.results)
        nbytes = vec * dtype.nbytes
        what = f"the peer shared load (lk.sm90.dsmem_load) of {vec} x {dtype} from {buffer}"

        def run(thread):
            owner = _target(thread, op, what)
            start = address(thread.env[offset])
            owner.shared.check_access(start, nbytes, nbytes, False, what, op, buffer)
            if owner is thread.cta:
                thread.cta.machine.on_shared_access(thread, start, nbytes, False, what, op)
            else:
                dsmem_model.access(thread, owner, start, nbytes, False, what, op)
            env = thread.env
            for r, value in zip(results, decode(owner.shared.view(start, nbytes).copy(), dtype)):
                env[r] = value
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        self._effects(op, ex, mask, loops, op.results[0].type.nbytes, km.SharedRead, "generic")


class DsmemStore(_DsmemAccess):
    """i32 element offset, i32 cluster rank, vec values -> that CTA's copy of shared buffer
    `buffer` (addressing as shared_store)."""

    name = "dsmem_store"

    def lower(self, op, lw):
        vec = op.attrs["vec"]
        dtype = op.operands[2].type
        data = _join(lw.k, [lw.reg(v) for v in op.operands[2:2 + vec]], words(dtype, vec)[2])
        address = _peer_address(lw, op, dtype.nbytes)
        isa_dsmem.st_shared_cluster(lw.k, address, tuple(data) if len(data) > 1 else data[0])

    def interpret(self, op, compiler):
        compiler.cluster_memory = True
        vec = op.attrs["vec"]
        dtype = op.operands[2].type
        address = shared_byte_offset(op, dtype)
        offset, buffer = op.operands[0].id, op.attrs["buffer"]
        data = tuple(v.id for v in op.operands[2:2 + vec])
        nbytes = vec * dtype.nbytes
        what = f"the peer shared store (lk.sm90.dsmem_store) of {vec} x {dtype} to {buffer}"

        def run(thread):
            owner = _target(thread, op, what)
            start = address(thread.env[offset])
            owner.shared.check_access(start, nbytes, nbytes, True, what, op, buffer)
            new = encode([thread.env[v] for v in data], dtype)
            target = owner.shared.view(start, nbytes)
            if owner is thread.cta:
                thread.cta.machine.on_shared_access(thread, start, nbytes, True, what, op,
                                                    target == new)
            else:
                dsmem_model.access(thread, owner, start, nbytes, True, what, op)
            target[:] = new
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        self._effects(op, ex, mask, loops, op.operands[2].type.nbytes, km.SharedWrite, None)


class DsmemStoreAsync(_DsmemAccess):
    """i32 element offset, i32 cluster rank, i32 barrier byte offset, vec 32-bit values ->
    that CTA's copy of shared buffer `buffer`, its bytes completed on that CTA's copy of the
    mbarrier (st.async, PTX 8.1)."""

    name = "dsmem_store_async"

    def verify(self, op):
        vec = op.attrs.get("vec")
        data = op.operands[3:]
        if len(op.operands) < 4 or any(v.type != i32 for v in op.operands[:3]):
            fail(op, "takes an i32 element offset, cluster rank and barrier byte offset")
        if vec not in (1, 2, 4) or len(data) != vec or len({v.type for v in data}) != 1 or \
                data[0].type.nbytes != 4:
            fail(op, f"stores 1, 2 or 4 values of one 32-bit type, got vec={vec} with "
                     f"{len(data)}")
        if "barrier" not in op.attrs or "stage" not in op.attrs:
            fail(op, "names its barrier and stage in attrs")

    def lower(self, op, lw):
        vec = op.attrs["vec"]
        data = [lw.reg(v) for v in op.operands[3:3 + vec]]
        address = _peer_address(lw, op, data[0].type.bits // 8)
        bar = _barrier_address(lw, op.operands[2])
        mapped = _mapped(lw, bar.base, _rank_operand(lw, op))
        isa_dsmem.st_async(lw.k, address, tuple(data) if vec > 1 else data[0],
                           type(bar)(mapped, bar.offset))

    def interpret(self, op, compiler):
        vec = op.attrs["vec"]
        dtype = op.operands[3].type
        address = shared_byte_offset(op, dtype)
        offset, buffer, bar = op.operands[0].id, op.attrs["buffer"], op.operands[2].id
        data = tuple(v.id for v in op.operands[3:3 + vec])
        nbytes = vec * dtype.nbytes
        what = (f"the asynchronous peer store (lk.sm90.dsmem_store_async) of {vec} x {dtype} "
                f"to {buffer}")

        def run(thread):
            owner = _target(thread, op, what)
            start = address(thread.env[offset])
            barrier = lookup(owner, thread.env[bar], op, what)
            owner.shared.check_access(start, nbytes, nbytes, True, what, op, buffer)
            owner.shared.view(start, nbytes)[:] = encode([thread.env[v] for v in data], dtype)
            machine, published = thread.cta.machine, None
            if machine.hb is not None:       # the barrier's agent writes it, as a TMA copy
                hb = machine.hb
                row = hb.agent_row(owner, _agent_index(machine, barrier.offset))
                own = owner is thread.cta
                if own:
                    hb.acquire(owner, row, thread.cta.state["hb"].clock[thread.tid])
                hb.access_at(owner, row, start, nbytes, True, what, op, check=own)
                published = hb.release(owner, row)
            barrier.complete_tx(nbytes, published)
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        site = ex.site(op, loops)
        columns = [ex.per_thread(op.operands[i], mask) for i in (1, 0, 2)]
        if any(c is None for c in columns):
            ex.undecidable(op, loops, f"the peer rank, barrier or offset into "
                           f"{op.attrs['buffer']} is computed from memory; the check skipped "
                           "this access")
            return
        span = op.attrs["vec"] * op.operands[3].type.nbytes
        disp, unit = op.attrs["disp"], op.operands[3].type.nbytes
        # one copy per thread: each completes its own bytes on the peer's barrier
        for sub, (rank, offset, bar, _) in ex.split(mask, [*columns, ex.tid[mask]]):
            name, stage = ex.slot_of(bar, op, site)
            dst = km.ByteRange(rank, op.attrs["buffer"], (offset + disp) * unit,
                               (offset + disp) * unit + span)
            ex.emit(sub, km.Copy, {"barrier": name, "stage": stage, "ctas": (rank,),
                                   "nbytes": span, "dst": dst, "site": site,
                                   "what": "asynchronous peer store "
                                           "(lk.sm90.dsmem_store_async)"})


__all__ = ["dsmem_load", "dsmem_store", "dsmem_store_async"]
