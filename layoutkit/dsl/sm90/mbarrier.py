"""mbarrier arrays in shared memory and their ops: init, arrive (local or on a cluster peer),
arrive.expect_tx over the TMA copies attached inside a scope, parity waits, proxy fences.

    full = lk.sm90.mbarrier_array(STAGES, arrive_count=1, name="full")       # producer's arrive + tx
    empty = lk.sm90.mbarrier_array(STAGES, arrive_count=256, name="empty")   # every consumer thread
    with lk.if_(lk.thread_id() == 0):
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()                                  # (lk.sm90.cluster_sync() in a cluster kernel)
    ...
    with lk.sm90.expect_tx(full[s]):                   # arrive.expect_tx(bytes of the copies below)
        lk.sm90.tma_load(..., barrier=full[s])         # calls attach_copy(full[s], nbytes, what)
    lk.sm90.mbarrier_wait(full[s], phase)              # try_wait.parity loop (bounded in debug)
    lk.sm90.mbarrier_arrive(empty[s])

Nothing here waits unless it is `mbarrier_wait`; the ring arithmetic is layoutkit.dsl.sm90.pipeline.

The IR ops these emit, with their operands, attrs, lowering, interpretation and protocol
effects, are defined in layoutkit.dsl.sm90.mbarrier_ops.
"""
from __future__ import annotations

import contextlib

from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx.isa.mbarrier import ARRIVE_COUNT, MAX_COUNT, MBARRIER_ALIGN
from layoutkit.sync import MBARRIER_BYTES, MbarrierLayoutError
from layoutkit.sync import MbarrierPlacement

from .debug_waits import error_buffer
from ..core.errors import TraceError
from ..lang.shared import allocate
from ..core.bounds import within
from ..core.sync_trace import ExpectTxScope, require_form, sync_state
from ..core.tracer import current, is_int_expr
from ..core.types import i32


class MbarrierArray:
    """`count` mbarriers named `name` in shared memory (8 bytes each), each expecting
    `arrive_count` arrivals per phase. `array[stage]` is an MbarrierRef."""

    def __init__(self, sync_array: MbarrierPlacement, alloc):
        self.sync = sync_array
        self.alloc = alloc

    @property
    def name(self) -> str:
        return self.sync.name

    @property
    def count(self) -> int:
        return self.sync.stages

    @property
    def arrive_count(self) -> int:
        return self.sync.arrive_count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, stage) -> "MbarrierRef":
        if not is_int_expr(stage):
            raise TraceError(f"mbarrier array '{self.name}'[{stage!r}]: the stage is an int or an "
                             "integer expression of kernel integers")
        stage = sympy.sympify(stage) if isinstance(stage, sympy.Basic) else stage
        if within(current("mbarrier array indexing"), stage, 0, self.count - 1)[0] is False:
            raise TraceError(f"mbarrier array '{self.name}'[{stage}]: the stage is outside "
                             f"0..{self.count - 1} (the array has {self.count} barriers)")
        return MbarrierRef(self, stage)

    def __repr__(self) -> str:
        return (f"MbarrierArray({self.name!r}, count={self.count}, "
                f"arrive_count={self.arrive_count}, at +{self.alloc.offset})")


class MbarrierRef:
    """One barrier of an array: `array[stage]`, stage an int or an integer sympy expression."""

    def __init__(self, array: MbarrierArray, stage):
        self.array = array
        self.stage = stage

    def byte_offset(self):
        """The i32 Value of this barrier's byte offset in the dynamic shared array."""
        return current("MbarrierRef.byte_offset").index(
            self.array.alloc.offset + MBARRIER_BYTES * self.stage, i32)

    def describe(self) -> str:
        """'full[s]': the array's name and the stage expression."""
        return f"{self.array.name}[{self.stage}]"

    def attrs(self) -> dict:
        """The attrs every IR op on this barrier carries: {"barrier": name, "stage": expr}."""
        return {"barrier": self.array.name, "stage": self.stage}

    def same_barrier(self, other: "MbarrierRef") -> bool:
        """Whether `other` names this barrier (same array, provably equal stage)."""
        return other.array is self.array and sympy.simplify(
            sympy.sympify(other.stage) - sympy.sympify(self.stage)) == 0

    def __repr__(self) -> str:
        return f"MbarrierRef({self.describe()})"


def _ref(what: str, ref) -> MbarrierRef:
    if isinstance(ref, MbarrierArray):
        raise TraceError(f"{what}: takes one barrier, array[stage], got the whole array "
                         f"'{ref.name}' (index it with a stage)")
    if not isinstance(ref, MbarrierRef):
        raise TraceError(f"{what}: takes an mbarrier (array[stage] of lk.sm90.mbarrier_array), got "
                         f"{ref!r}")
    return ref


def _initialised(trace, what: str, ref: MbarrierRef) -> None:
    if ref.array.name not in sync_state(trace).initialised:
        raise TraceError(f"{what} on {ref.describe()}: mbarrier array '{ref.array.name}' is not "
                         "initialised in this kernel before this point; call "
                         f"lk.sm90.mbarrier_init({ref.array.name}) (one thread), "
                         "lk.sm90.fence_mbarrier_init() and a barrier first")


def mbarrier_array(count: int, arrive_count: int, *, name: str | None = None) -> MbarrierArray:
    """`count` mbarriers in shared memory, each completing a phase after `arrive_count`
    arrivals (1..2^20-1) and its expected transaction bytes. Initialise them with
    lk.sm90.mbarrier_init before use."""
    what = "lk.sm90.mbarrier_array"
    trace = current(what)
    state = sync_state(trace)
    name = name if name is not None else f"mbar{len(state.arrays)}"
    if name in state.arrays:
        raise TraceError(f"{what}: the name {name!r} is already an mbarrier array of this kernel "
                         "(names appear in debug reports and must be unique)")
    try:
        sync_array = MbarrierPlacement(name, count, arrive_count)
    except MbarrierLayoutError as exc:
        raise TraceError(f"{what}: {exc.thing} = {exc.value!r}: {exc.rule}") from None
    alloc = allocate(what, count * MBARRIER_BYTES, MBARRIER_ALIGN, name)
    array = MbarrierArray(sync_array, alloc)
    state.arrays[name] = array
    return array


def mbarrier_init(*arrays: MbarrierArray) -> None:
    """Initialise every barrier of `arrays` with its arrive count (phase 0, no bytes). One
    thread does it (`with lk.if_(lk.thread_id() == 0):`), then lk.sm90.fence_mbarrier_init() and a
    CTA (or cluster) barrier before anyone, or any TMA, uses them."""
    trace = current("lk.sm90.mbarrier_init")
    if not arrays:
        raise TraceError("lk.sm90.mbarrier_init: name the arrays to initialise")
    state = sync_state(trace)
    for array in arrays:
        if not isinstance(array, MbarrierArray):
            raise TraceError("lk.sm90.mbarrier_init: takes lk.sm90.mbarrier_array arrays, got "
                             f"{array!r}")
        if array.name in state.initialised:
            raise TraceError(f"lk.sm90.mbarrier_init: mbarrier array '{array.name}' is initialised "
                             "twice (re-initialising a live barrier is undefined: PTX ISA "
                             "mbarrier.init)")
        trace.emit("mbarrier_init", (), (), {"barrier": array.name, "offset": array.alloc.offset,
                                             "stages": array.count,
                                             "arrive_count": array.arrive_count})
        state.initialised.add(array.name)


def fence_mbarrier_init() -> None:
    """`fence.mbarrier_init.release.cluster`: the initialising thread makes its inits visible
    to the async proxy (TMA) and the cluster; follow it with lk.barrier()/lk.sm90.cluster_sync()."""
    current("lk.sm90.fence_mbarrier_init").emit("fence_mbarrier_init", (), ())


def mbarrier_arrive(ref, *, count: int = 1, cta=None, scope: str = "cluster") -> None:
    """Arrive `count` times (1..2^20-1; above 1 on sm_90a only) on `ref` from every thread that
    executes this. With
    `cta=rank` (an int or integer expression), arrive on the barrier at the same offset in the
    CTA of that cluster rank (mapa + arrive.release.<scope>; cluster kernels only). `scope`
    ("cluster" or "cta") is that remote arrive's release scope: "cluster" publishes this
    thread's earlier writes to the peer (ptxas emits MEMBAR.ALL.GPU: about a microsecond);
    "cta" costs nothing and suffices when the arrive only reports that async-proxy reads
    finished (a consumer releasing a stage its wgmma read, after lk.sm90.wgmma_wait)."""
    what = "lk.sm90.mbarrier_arrive"
    trace = current(what)
    ref = _ref(what, ref)
    _initialised(trace, what, ref)
    if isinstance(count, bool) or not isinstance(count, int) or\
            not 1 <= count <= ref.array.arrive_count:
        raise TraceError(f"{what} on {ref.describe()}: count = {count!r} must be an int in "
                         f"1..{ref.array.arrive_count} (the array's arrive count per phase)")
    if scope not in ("cluster", "cta"):
        raise TraceError(f"{what} on {ref.describe()}: scope = {scope!r} must be 'cluster' or "
                         "'cta' (the release scope of a remote arrive)")
    if count != 1:
        require_form(trace, f"{what}(count={count}) on {ref.describe()}",
                     "mbarrier.arrive with a count operand", ARRIVE_COUNT)
    operands = [ref.byte_offset()]
    if cta is not None:
        cluster = sync_state(trace).cluster
        if cluster is None:
            raise TraceError(f"{what}(cta={cta}): a remote arrive needs a cluster kernel "
                             "(@lk.kernel(cluster=(x, y, z)))")
        size = cluster[0] * cluster[1] * cluster[2]
        if not is_int_expr(cta) or within(trace, cta, 0, size - 1)[0] is False:
            raise TraceError(f"{what}(cta={cta!r}): the peer's rank is an integer in 0..{size - 1} "
                             f"(the cluster {cluster} has {size} CTAs)")
        operands.append(trace.index(cta, i32))
    trace.emit("mbarrier_arrive", operands, (), {**ref.attrs(), "count": count,
                                                 "remote": cta is not None, "scope": scope})


@contextlib.contextmanager
def expect_tx(ref):
    """`with lk.sm90.expect_tx(full[s]):` one `mbarrier.arrive.expect_tx` on `ref` (emitted where
    the scope opens) whose byte count is the total of the async copies attached inside
    (TMA loads call `attach_copy`). An empty scope is an error: the phase would complete at
    once. Every thread that reaches it arrives: elect one thread (lk.sm90.elect_one)."""
    what = "lk.sm90.expect_tx"
    trace = current(what)
    ref = _ref(what, ref)
    _initialised(trace, what, ref)
    state = sync_state(trace)
    if any(scope.ref.same_barrier(ref) for scope in state.scopes):
        raise TraceError(f"{what}({ref.describe()}): a scope on this barrier is already open")
    trace.emit("mbarrier_arrive_expect_tx", [ref.byte_offset()], (),
               {**ref.attrs(), "tx_bytes": None, "copies": ()})
    op = trace.blocks[-1].ops[-1]
    scope = ExpectTxScope(ref, op, len(trace.blocks))
    state.scopes.append(scope)
    try:
        yield ref
    finally:
        state.scopes.remove(scope)
    if not scope.copies:
        raise TraceError(f"{what}({ref.describe()}): no async copy was attached inside the scope; "
                         "the arrive would expect 0 bytes and complete the phase before any data "
                         "lands (issue the TMA copies completing on this barrier inside it)",
                         op.location)
    total = sum(n for _, n in scope.copies)
    if total > MAX_COUNT:
        raise TraceError(f"{what}({ref.describe()}): the attached copies deliver {total} bytes; "
                         f"an mbarrier phase counts at most {MAX_COUNT} (2^20-1) transaction "
                         "bytes", op.location)
    op.attrs["tx_bytes"] = total
    op.attrs["copies"] = tuple(scope.copies)


def mbarrier_expect_tx(ref, nbytes: int) -> None:
    """One `mbarrier.arrive.expect_tx` on `ref` expecting `nbytes` bytes that other threads'
    asynchronous stores deliver (lk.sm90.dsmem_store_async from the cluster's CTAs): the phase
    completes once its arrivals and those bytes are in. Every thread that reaches it arrives:
    one thread (lk.if_ or lk.sm90.elect_one). For TMA loads, `with lk.sm90.expect_tx(ref):`
    counts their bytes itself."""
    what = "lk.sm90.mbarrier_expect_tx"
    trace = current(what)
    ref = _ref(what, ref)
    _initialised(trace, what, ref)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 < nbytes <= MAX_COUNT:
        raise TraceError(f"{what}({ref.describe()}, {nbytes!r}): the bytes expected are an int "
                         f"in 1..{MAX_COUNT} (an mbarrier phase's transaction count)")
    trace.emit("mbarrier_arrive_expect_tx", [ref.byte_offset()], (),
               {**ref.attrs(), "tx_bytes": nbytes, "copies": ()})


def attach_copy(ref, nbytes: int, what: str) -> None:
    """Charge an async copy that lands `nbytes` in THIS CTA's shared memory and completes on
    `ref` to the open `lk.sm90.expect_tx(ref)` scope (called by the TMA ops while tracing)."""
    trace = current("attach_copy")
    ref = _ref(what, ref)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise TraceError(f"{what}: a copy completing on {ref.describe()} delivers a positive "
                         f"int of bytes, got {nbytes!r}")
    state = sync_state(trace)
    for scope in reversed(state.scopes):
        if scope.ref.same_barrier(ref):
            break
    else:
        raise TraceError(f"{what} completes on {ref.describe()}, but no "
                         f"lk.sm90.expect_tx({ref.describe()}) scope is open; wrap the copies that "
                         f"complete on it in `with lk.sm90.expect_tx({ref.describe()}):`")
    for parent in trace.blocks[scope.depth - 1:-1]:
        owner = parent.ops[-1]
        if owner.name == "for":
            raise TraceError(f"{what}: the copy sits in an lk.range inside "
                             f"lk.sm90.expect_tx({ref.describe()}), so the bytes per phase are "
                             "unknown at trace time; open the expect_tx scope inside the loop")
    scope.copies.append((what, nbytes))


def _phase(trace, what: str, ref: MbarrierRef, phase):
    if not is_int_expr(phase):
        raise TraceError(f"{what} on {ref.describe()}: the phase is 0, 1 or an integer "
                         f"expression, got {phase!r}")
    if within(trace, phase, 0, 1)[0] is not True:
        raise TraceError(f"{what} on {ref.describe()}: the phase parity {phase} is not provably 0 "
                         "or 1; write it modulo 2, e.g. (k // STAGES) % 2, or use "
                         "lk.sm90.producer_state / lk.sm90.consumer_state")
    return trace.index(phase, i32)


def mbarrier_wait(ref, phase) -> None:
    """Wait until the phase of `ref` with parity `phase` (0/1 or an integer expression provably
    in 0..1) has completed: `mbarrier.try_wait.parity` in a loop. In debug builds the wait
    gives up after a timeout, records barrier, stage, parity and this line, and traps; the
    launch then raises layoutkit.sync.BarrierTimeoutError."""
    what = "lk.sm90.mbarrier_wait"
    trace = current(what)
    ref = _ref(what, ref)
    _initialised(trace, what, ref)
    state = sync_state(trace)
    if state.elect_depth:
        raise TraceError(f"{what} on {ref.describe()} inside lk.sm90.elect_one(): wait with the "
                         "whole warp, then elect the thread that issues")
    operands = [ref.byte_offset(), _phase(trace, what, ref, phase)]
    if state.debug:
        operands += [trace.index(ref.stage, i32), error_buffer(trace)]
    trace.emit("mbarrier_wait", operands, (), {**ref.attrs(), "phase": phase,
                                               "debug": state.debug})


def fence_proxy_async() -> None:
    """`fence.proxy.async.shared::cta`: order this thread's generic shared-memory writes
    (st.shared, stmatrix) before later async-proxy reads (TMA store, wgmma); every writer
    fences, then the writers synchronise."""
    current("lk.sm90.fence_proxy_async").emit("fence_proxy_async", (), (), {"space": "shared::cta"})


__all__ = ["MbarrierArray", "MbarrierRef", "attach_copy", "expect_tx", "fence_mbarrier_init",
           "fence_proxy_async", "mbarrier_array", "mbarrier_arrive", "mbarrier_expect_tx",
           "mbarrier_init", "mbarrier_wait"]
