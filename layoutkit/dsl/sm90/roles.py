"""Warp roles (warpgroups running different code with their own register budgets), warp and
warpgroup indices, elect-one regions and named barriers.

    @lk.kernel(num_warps=12)                       # 3 warpgroups
    def gemm(...):
        ...                                        # barrier init etc. before the roles
        with lk.sm90.warp_role("producer", warpgroups=(0,), registers=24):
            ...                                    # warpgroup 0 only; setmaxnreg.dec 24
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
            ...                                    # warpgroups 1, 2; setmaxnreg.inc 240

Role regions sit at the kernel's top level after everything all threads run; together they
cover every warpgroup once, and their budgets are checked with layoutkit.sync.RoleSplit
(multiples of 8 in 24..256, the total within the CTA's register pool at 1 CTA per SM; the
kernel gets `.minnctapersm 1` so ptxas knows the entry cap). `lk.barrier()` (bar.sync 0, the
whole CTA) inside a role would hang and is refused; use named barriers with explicit counts.

The IR ops these emit (warp_role, elect_one, named_barrier), with their lowering,
interpretation and protocol effects, are defined in layoutkit.dsl.sm90.role_ops.
"""
from __future__ import annotations

import contextlib

from layoutkit.algebra.sympy_gate import deferred_module, sympy
from layoutkit.ptx.isa import setmaxnreg
from layoutkit.ptx.isa.warp import WARP_SIZE as WARP_THREADS
from layoutkit.sync import (NAMED_BARRIER_COUNT, WARPGROUP_THREADS, WHOLE_CTA_ID, NamedBarrier,
                            NamedBarrierAllocator, NamedBarrierError, RoleBudgetError, RoleSplit,
                            WarpRole)

from ..core.errors import TraceError
from ..core.ir import Block
from ..core.sync_trace import (NamedBarrierUse, RoleRegion, current_role, require_form,
                               sync_state, warp_uniform)
from ..core.tracer import current

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)

WARPGROUP_WARPS = WARPGROUP_THREADS // WARP_THREADS
# Ops that every thread of the CTA (or cluster) must reach: refused inside a role region.
WHOLE_BLOCK_OPS = {"barrier": "lk.barrier() (bar.sync 0 over the whole CTA)",
                   "cluster_sync": "lk.sm90.cluster_sync() (every thread of the cluster)"}


def _tid():
    return current("a thread index").special("thread_idx", 0)


def warpgroup_id():
    """The thread's warpgroup in the block, tid // 128 (4 consecutive warps; warp-uniform)."""
    return sympy.floor(_tid() / WARPGROUP_THREADS)


def warp_id_in_warpgroup():
    """The warp's index in its warpgroup, (tid // 32) % 4."""
    return symbolic.mod(sympy.floor(_tid() / WARP_THREADS), WARPGROUP_WARPS)


def thread_id_in_warpgroup():
    """The thread's index in its warpgroup, tid % 128."""
    return symbolic.mod(_tid(), WARPGROUP_THREADS)


def _warpgroups(what: str, warpgroups, available: int) -> tuple[int, int]:
    wgs = (warpgroups,) if isinstance(warpgroups, int) else tuple(warpgroups) \
        if isinstance(warpgroups, (tuple, list, range)) else None
    if not wgs or any(isinstance(w, bool) or not isinstance(w, int) for w in wgs):
        raise TraceError(f"{what}: warpgroups is an int or a tuple of consecutive ints, got "
                         f"{warpgroups!r}")
    first = wgs[0]
    if list(wgs) != list(range(first, first + len(wgs))):
        raise TraceError(f"{what}: warpgroups {wgs} must be consecutive (one role is one "
                         "contiguous range of warpgroups)")
    if first < 0 or first + len(wgs) > available:
        raise TraceError(f"{what}: warpgroups {wgs} outside 0..{available - 1} (the block has "
                         f"{available} warpgroups)")
    return first, len(wgs)


@contextlib.contextmanager
def warp_role(name: str, *, warpgroups, registers: int | None = None):
    """Run the body only in the warpgroups `warpgroups` (an int or consecutive ints), after
    `setmaxnreg` to `registers` per thread (a multiple of 8 in 24..256, sm_90a only; None keeps
    the entry cap, on any target). See the module docstring for the rules."""
    what = f"lk.sm90.warp_role({name!r})"
    trace = current(what)
    state = sync_state(trace)
    num_warps = trace.fn.num_warps
    if num_warps % WARPGROUP_WARPS:
        raise TraceError(f"{what}: warp roles split the block into warpgroups of 4 warps, but "
                         f"num_warps={num_warps} is not a multiple of 4")
    if len(trace.blocks) != 1:
        raise TraceError(f"{what}: a warp role is opened at the kernel's top level (not inside "
                         "lk.if_, lk.range or another role): setmaxnreg runs once per warpgroup, "
                         "by all of its warps")
    first, count = _warpgroups(what, warpgroups, num_warps // WARPGROUP_WARPS)
    try:
        WarpRole(name, count, registers)
    except RoleBudgetError as exc:
        raise TraceError(f"{what}: {exc.thing} = {exc.value!r}: {exc.rule}") from None
    if registers is not None:
        require_form(trace, f"{what} with registers={registers}", "setmaxnreg",
                     setmaxnreg.REQUIREMENT)
    for other in state.roles:
        if other.name == name:
            raise TraceError(f"{what}: role {name!r} is opened twice (one region per role)")
        if first < other.first + other.count and other.first < first + count:
            raise TraceError(f"{what}: warpgroups {first}..{first + count - 1} overlap role "
                             f"{other.name!r} (warpgroups {other.first}.."
                             f"{other.first + other.count - 1}); roles are disjoint")
    body = Block()
    trace.emit("warp_role", (), (), {"role": name, "warpgroups": (first, count),
                                     "registers": registers, "setmaxnreg": None,
                                     "entry_registers": None}, blocks=(body,))
    region = RoleRegion(name, first, count, registers, trace.blocks[-1].ops[-1])
    state.roles.append(region)
    state.role_stack.append(region)
    try:
        with trace.block(body):
            yield region
    finally:
        state.role_stack.pop()


def require_warp_uniform(trace, what: str) -> None:
    """Raise unless every lane of each warp reaching this point reaches it together: enclosing
    lk.if_ conditions are comparisons of warp-uniform integers (lk.warp_id() and the like),
    no lk.range has thread-dependent bounds, and no lk.sm90.elect_one() region is open."""
    if sync_state(trace).elect_depth:
        raise TraceError(f"{what} inside lk.sm90.elect_one(): only one lane runs there, and this "
                         "needs the whole warp")
    tid = trace.specials.get(("thread_idx", 0))

    def lane_uniform(expr) -> bool:
        return tid is None or warp_uniform(expr, tid)
    for parent in trace.blocks[:-1]:
        owner = parent.ops[-1]
        line = owner.location.line if owner.location is not None else "?"
        if owner.name == "for" and owner.attrs.get("thread_dependent"):
            raise TraceError(f"{what} inside an lk.range with thread-dependent bounds (line "
                             f"{line}): the lanes of a warp may disagree; it needs whole warps")
        if owner.name == "if" and not trace.uniform(owner.operands[0], lane_uniform):
            raise TraceError(f"{what} inside an lk.if_ (line {line}) whose condition may differ "
                             "between the lanes of a warp; branch on warp-uniform integers "
                             "(lk.warp_id(), lk.sm90.warpgroup_id(), ...) around it")


@contextlib.contextmanager
def elect_one():
    """Run the body in one lane of each warp that reaches it (`elect.sync`): the thread that
    issues TMA copies or a single arrive. The warp must be converged here."""
    what = "lk.sm90.elect_one()"
    trace = current(what)
    require_warp_uniform(trace, what)
    body = Block()
    trace.emit("elect_one", (), (), {}, blocks=(body,))
    state = sync_state(trace)
    state.elect_depth += 1
    try:
        with trace.block(body):
            yield
    finally:
        state.elect_depth -= 1


def _named(kind: str, barrier_id, threads) -> None:
    what = f"lk.sm90.named_barrier_{kind}({barrier_id!r}, {threads!r})"
    trace = current(what)
    if barrier_id == WHOLE_CTA_ID and isinstance(barrier_id, int):
        raise TraceError(f"{what}: id {WHOLE_CTA_ID} is the whole-CTA barrier of lk.barrier(); "
                         f"named barriers use ids {WHOLE_CTA_ID + 1}..{NAMED_BARRIER_COUNT - 1}")
    try:
        NamedBarrier(barrier_id, threads)
    except NamedBarrierError as exc:
        raise TraceError(f"{what}: {exc.thing} = {exc.value!r}: {exc.rule}") from None
    block_threads = WARP_THREADS * trace.fn.num_warps
    if threads > block_threads:
        raise TraceError(f"{what}: {threads} threads exceed the block's {block_threads}; the "
                         "barrier would never complete")
    require_warp_uniform(trace, what)
    role = current_role(trace)
    trace.emit("named_barrier", (), (), {"kind": kind, "id": barrier_id, "threads": threads,
                                         "role": role.name if role else None})
    op = trace.blocks[-1].ops[-1]
    sync_state(trace).named.append(NamedBarrierUse(barrier_id, threads, kind,
                                                   role.name if role else None, op))


def named_barrier_sync(barrier_id: int, threads: int) -> None:
    """`bar.sync id, threads`: arrive at named barrier `barrier_id` (1..15) and wait until
    `threads` threads (a multiple of 32; arrivers + waiters) have arrived."""
    _named("sync", barrier_id, threads)


def named_barrier_arrive(barrier_id: int, threads: int) -> None:
    """`bar.arrive id, threads`: arrive at named barrier `barrier_id` without waiting (the
    signalling side); `threads` counts every participant, as at the matching syncs."""
    _named("arrive", barrier_id, threads)


# ---- whole-kernel checks --------------------------------------------------------------------
def _walk(block: Block):
    for op in block.ops:
        yield op
        for inner in op.blocks:
            yield from _walk(inner)


def _location_error(message: str, op) -> TraceError:
    return TraceError(message, op.location)


def _finish_roles(trace, state) -> RoleSplit | None:
    if not state.roles:
        return None
    top = trace.fn.body.ops
    start = top.index(state.roles[0].op)
    for op in top[start:]:
        if op.name != "warp_role":
            raise _location_error("code after the warp roles would run in every warpgroup, under "
                                  "each role's register budget; put it inside the roles (or "
                                  "before them)", op)
    regions = sorted(state.roles, key=lambda r: r.first)
    total = trace.fn.num_warps // WARPGROUP_WARPS
    covered = sorted(w for r in regions for w in range(r.first, r.first + r.count))
    if covered != list(range(total)):
        missing = sorted(set(range(total)) - set(covered))
        raise _location_error(f"the warp roles leave warpgroup(s) {missing} of the block's "
                              f"{total} without a role; roles must cover the block "
                              f"(num_warps={trace.fn.num_warps})", state.roles[0].op)
    try:
        split = RoleSplit([WarpRole(r.name, r.count, r.registers) for r in regions])
    except RoleBudgetError as exc:
        raise _location_error(f"warp roles: {exc.thing} = {exc.value!r}: {exc.rule}",
                              state.roles[0].op) from None
    for region in regions:
        region.op.attrs["setmaxnreg"] = split.direction(region.name)
        region.op.attrs["entry_registers"] = split.entry_registers
        for op in _walk(region.op.blocks[0]):
            if op.name in WHOLE_BLOCK_OPS:
                raise _location_error(f"{WHOLE_BLOCK_OPS[op.name]} inside warp role "
                                      f"{region.name!r}: the other roles never reach it, so it "
                                      "hangs; synchronise roles with lk.sm90.named_barrier_sync/"
                                      "arrive and explicit thread counts", op)
    return split


def _finish_named(trace, state, split: RoleSplit | None) -> None:
    by_id: dict[int, list[NamedBarrierUse]] = {}
    for use in state.named:
        by_id.setdefault(use.id, []).append(use)
    allocator = NamedBarrierAllocator(split=split) if split is not None else \
        NamedBarrierAllocator(block_threads=WARP_THREADS * trace.fn.num_warps)
    for barrier_id, uses in sorted(by_id.items()):
        first = uses[0]
        for use in uses[1:]:
            if use.threads != first.threads:
                line = first.op.location.line if first.op.location else "?"
                raise _location_error(f"named barrier {barrier_id} counts {use.threads} threads "
                                      f"here but {first.threads} at line {line}; every "
                                      "participant must give the same count", use.op)
        roles = sorted({u.role for u in uses if u.role is not None})
        outside_roles = any(u.role is None for u in uses)   # then the whole block may reach it
        try:
            allocator.allocate(f"barrier{barrier_id}", first.threads, id=barrier_id,
                               roles=None if split is None or outside_roles else roles)
        except NamedBarrierError as exc:
            raise _location_error(f"named barrier {barrier_id} (reached by role(s) "
                                  f"{', '.join(roles) or 'none'}): {exc.rule}", first.op) from None


def _finish_elects(trace) -> None:
    for elect in (op for op in _walk(trace.fn.body) if op.name == "elect_one"):
        for op in _walk(elect.blocks[0]):
            if op.name in WHOLE_BLOCK_OPS:
                raise _location_error(f"{WHOLE_BLOCK_OPS[op.name]} inside lk.sm90.elect_one(): one "
                                      "lane per warp reaches it, so it hangs", op)


def finish_sync(trace) -> None:
    """The whole-kernel checks, after the kernel body returned (called by lk.kernel)."""
    state = sync_state(trace)
    split = _finish_roles(trace, state)
    _finish_named(trace, state, split)
    _finish_elects(trace)
    from .wgmma.accumulators import check_kernel as check_accumulators    # (import cycle)
    check_accumulators(trace.fn)      # before the protocol check: its errors are the causes


__all__ = ["elect_one", "finish_sync", "named_barrier_arrive", "named_barrier_sync",
           "require_warp_uniform", "thread_id_in_warpgroup", "warp_id_in_warpgroup",
           "warp_role", "warpgroup_id"]
