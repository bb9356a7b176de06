"""What the synchronization ops remember while one kernel is traced, and the integer facts they
check (bounds of stage and phase expressions, warp-uniform conditions).

`sync_state(trace)` is the per-trace record (kept beside the trace, gone with it): the mbarrier
arrays made and initialised, the open `lk.sm90.expect_tx` scopes, the warp-role regions, the
named-barrier uses, and the kernel's cluster shape and debug flag. `lk.kernel` calls
`roles.finish_sync(trace)` after the kernel body returns, which runs the whole-kernel checks
(roles cover the block, register budgets, named-barrier counts, no lk.barrier() in a role).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx.builder import Requirement, Target
from layoutkit.ptx.isa.warp import WARP_SIZE as WARP_THREADS
from layoutkit.sync import WARPGROUP_THREADS

from .errors import TraceError
from .facts import fraction_of
from .ir import Op
from .opdef import SM90A
from .types import i32


@dataclass
class ExpectTxScope:
    """An open `with lk.sm90.expect_tx(ref):`: its arrive op (bytes filled in at exit), the block
    depth it was opened at, and the copies attached so far as (what, nbytes)."""

    ref: object
    op: Op
    depth: int
    copies: list = field(default_factory=list)


@dataclass
class RoleRegion:
    """One `with lk.sm90.warp_role(...)` region: name, warpgroups (first, count), registers, op."""

    name: str
    first: int
    count: int
    registers: int | None
    op: Op
    thread_symbol: object = None    # the role-relative thread index (partition_threads)

    @property
    def threads(self) -> int:
        return WARPGROUP_THREADS * self.count


@dataclass
class NamedBarrierUse:
    """One lk.sm90.named_barrier_sync/arrive: id, thread count, kind, the role reaching it, op."""

    id: int
    threads: int
    kind: str
    role: str | None
    op: Op


@dataclass
class SyncState:
    """The synchronization facts of one trace (see the module docstring)."""

    cluster: tuple[int, int, int] | None = None
    debug: bool = False
    arrays: dict = field(default_factory=dict)           # name -> dsl MbarrierArray
    initialised: set = field(default_factory=set)        # names of initialised arrays
    scopes: list = field(default_factory=list)           # open ExpectTxScope, innermost last
    roles: list = field(default_factory=list)            # RoleRegion, in program order
    role_stack: list = field(default_factory=list)       # the RoleRegion being traced
    named: list = field(default_factory=list)            # NamedBarrierUse
    elect_depth: int = 0                                 # open lk.sm90.elect_one regions


_STATES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def sync_state(trace) -> SyncState:
    """The SyncState of `trace` (made on first use, from the kernel's cluster/debug options)."""
    state = _STATES.get(trace)
    if state is None:
        state = SyncState(cluster=getattr(trace.fn, "cluster", None),
                          debug=bool(getattr(trace.fn, "debug", False)))
        _STATES[trace] = state
    return state


def require_form(trace, what: str, form: str, requirement: Requirement) -> None:
    """Raise a TraceError at the user's line unless the kernel's target has `form`, an
    instruction form that needs `requirement` (layoutkit.ptx's, where the ISA rule lives): for
    the forms of an op that exists on sm_80 but lowers to an sm_90 instruction when used so."""
    target = getattr(trace.fn, "target", SM90A)
    problem = requirement.problem(Target(target))
    if problem is not None:
        problem = problem.replace("the module targets", "this kernel's target is")
        raise TraceError(f"{what}: lowers to {form}, which {problem} (@lk.kernel(target=...))")


def current_role(trace) -> RoleRegion | None:
    """The warp-role region being traced, or None outside every role."""
    stack = sync_state(trace).role_stack
    return stack[-1] if stack else None


def partition_threads(trace) -> tuple[object, int, str]:
    """(thread index, thread count, what they are) of the threads in scope: inside a warp role
    the role's own threads (index 0 at the role's first thread), else the block's.
    The role's index is a symbol `tid_<role>` bound to tid - first, computed once at the top
    of the role's body so every block of the role sees it."""
    tid = trace.special("thread_idx", 0)
    role = current_role(trace)
    if role is None:
        threads = WARP_THREADS * trace.fn.num_warps
        return tid, threads, f"the kernel runs {threads} (num_warps={trace.fn.num_warps})"
    symbol = role.thread_symbol
    if symbol is None:
        first = 4 * WARP_THREADS * role.first
        value = trace.fn.new_value(i32)
        body = role.op.blocks[0]
        body.ops.insert(0, Op("index", (trace.symbols[tid],), (value,),
                              {"expr": tid - first, "syms": (tid,)}, (), role.op.location))
        symbol = sympy.Symbol(f"tid_{role.name}", integer=True, nonnegative=True)
        trace.bind(symbol, value)
        role.thread_symbol = symbol
    return symbol, role.threads, f"warp role {role.name!r} runs {role.threads}"


# ---- integer facts ------------------------------------------------------------------------
def warp_uniform(expr, tid) -> bool:
    """Whether the integer expression has one value across the 32 lanes of each warp: the
    thread index `tid` appears only inside floor(tid / q) with q a multiple of 32."""
    expr = sympy.sympify(expr)
    if tid not in expr.free_symbols:
        return True
    marker = sympy.Dummy("warp", integer=True)

    def floor_(arg):
        num, den = fraction_of(arg)
        if num == tid and den.is_Integer and den % WARP_THREADS == 0:
            return marker
        return sympy.floor(arg)
    return tid not in expr.replace(sympy.floor, floor_).free_symbols


__all__ = ["ExpectTxScope", "NamedBarrierUse", "RoleRegion", "SyncState", "current_role",
           "require_form", "sync_state", "warp_uniform"]
