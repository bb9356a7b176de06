"""mbarrier: init, arrive (+ expect_tx, drop, remote), expect_tx, waits on parity or token, inval.

An mbarrier is an 8-byte-aligned .b64 in shared memory (hopper-ptx.md §3): a phase completes
when its pending arrivals reach 0 and its transaction count (bytes) reaches 0. Rules enforced
here (PTX ISA "mbarrier", ptxas 13.0, which does NOT range-check the counts itself):
expected arrival count 1..2^20-1; arrive count 1..2^20-1; tx bytes 0..2^20-1; parity 0/1.
`.sem` is .release (arrive) / .acquire (wait) or .relaxed (PTX 8.6); `.scope` .cta/.cluster
(PTX 8.0). On a peer CTA's barrier (`space="cluster"`, an address from mapa) only arrivals and
expect_tx are allowed and the state result must be the sink `_`. Versions: `.shared::cta`
forms PTX 7.8, try_wait sm_90, expect_tx and sem/scope PTX 8.0.
"""
from __future__ import annotations

from ..builder import SINK, KernelBuilder, PTXBuildError, Reg, Requirement
from .checks import choose, dest, sink_or_dest, source
from .cluster import mapa
from .hopper_operands import (B64, PRED, RELAXED, SHARED_CTA, SM90, SM90_PTX80,
                              shared_address, u32_operand)

MBARRIER_BYTES = 8             # an mbarrier is one opaque .b64 in shared memory ...
MBARRIER_ALIGN = 8             # ... 8-byte aligned (PTX ISA "mbarrier")
MAX_COUNT = (1 << 20) - 1      # expected/arrive counts and tx bytes (PTX ISA "mbarrier")
SPACES = ("cta", "cluster")
ARRIVE_COUNT = SM90           # an arrive/arrive_drop count operand (without .noComplete): sm_90
SCOPES = ("cta", "cluster")


def _qualifiers(instr: str, sem, scope, sems: tuple[str, ...]) -> tuple[list[str], Requirement]:
    """`.sem.scope` (both written when either is given; sem defaults to sems[0], scope to cta)."""
    if sem is None and scope is None:
        return [], SHARED_CTA
    sem = choose(instr, "sem", sems[0] if sem is None else sem, sems)
    scope = choose(instr, "scope", "cta" if scope is None else scope, SCOPES)
    return [sem, scope], RELAXED if sem == "relaxed" else SM90_PTX80


def _space(instr: str, space: str) -> tuple[str, Requirement]:
    choose(instr, "space", space, SPACES)
    return f"shared::{space}", SM90_PTX80 if space == "cluster" else SHARED_CTA


def _strictest(*requirements: Requirement) -> Requirement:
    return max(requirements, key=lambda r: (r.version, r.sm))


def _count(k: KernelBuilder, instr: str, operand: str, value, lo: int):
    return u32_operand(k, instr, operand, value, lo, MAX_COUNT,
                       rule="mbarrier counts are limited to 2^20-1")


def init(k: KernelBuilder, bar, count, *, pred=None) -> None:
    """Initialise the barrier at [bar] for `count` arrivals per phase (one thread, before use;
    follow with `fence_init` + a CTA barrier when TMA or other CTAs will use it).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); bar = k.reg("u32")
    >>> init(k, bar, 1); k.body_lines()[-1]
    '    mbarrier.init.shared::cta.b64 [%u0], 1;'
    """
    instr = "mbarrier.init.shared::cta.b64"
    operands = (shared_address(k, instr, "bar", bar), _count(k, instr, "count", count, 1))
    k.emit(instr, operands, pred=pred, requires=SHARED_CTA)


def _state(k: KernelBuilder, instr: str, space: str, token: bool, out):
    """The arrive state destination: `_` unless a token is asked for (never on a peer CTA)."""
    if out is None and not token:
        return SINK
    if space == "cluster":
        raise PTXBuildError("an arrive on a shared::cluster barrier cannot return a state; the "
                            "destination must be the sink _ (ptxas)", instruction=instr,
                            operand="out", value=out if out is not None else "token=True")
    return sink_or_dest(k, instr, out, B64, "state")


def _arrive(k: KernelBuilder, op: str, bar, extra, *, token, out, sem, scope, space, pred):
    quals, q_req = _qualifiers(f"mbarrier.{op}", sem, scope, ("release", "relaxed"))
    space_name, s_req = _space(f"mbarrier.{op}", space)
    instr = ".".join(["mbarrier", op, *quals, space_name, "b64"])
    state = _state(k, instr, space, token, out)
    operands = [state, shared_address(k, instr, "bar", bar)]
    requires = _strictest(q_req, s_req)
    for name, value, lo, needs in extra:
        if value is not None:
            operands.append(_count(k, instr, name, value, lo))
            requires = _strictest(requires, needs)
    k.emit(instr, operands, defs=(state,) if isinstance(state, Reg) else (), pred=pred,
           requires=requires)
    return state if isinstance(state, Reg) else None


def arrive(k: KernelBuilder, bar, count=None, *, token: bool = False, out=None, sem=None, scope=None,
           space: str = "cta", pred=None) -> Reg | None:
    """Arrive on [bar] (`count` arrivals, default 1). Returns the b64 state token when `token`
    or `out` is given (for `try_wait`), else None and the state goes to `_`.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); bar = k.reg("u32")
    >>> _ = arrive(k, bar, sem="release", scope="cluster"); k.body_lines()[-1]
    '    mbarrier.arrive.release.cluster.shared::cta.b64 _, [%u0];'
    """
    return _arrive(k, "arrive", bar, [("count", count, 1, ARRIVE_COUNT)], token=token, out=out,
                   sem=sem, scope=scope, space=space, pred=pred)


def arrive_expect_tx(k: KernelBuilder, bar, tx_bytes, *, token: bool = False, out=None, sem=None,
                     scope=None, space: str = "cta", pred=None) -> Reg | None:
    """Arrive once on [bar] and add `tx_bytes` to the phase's expected transaction bytes (the
    producer's step before issuing TMA: the sum of the full boxes it will deliver)."""
    return _arrive(k, "arrive.expect_tx", bar, [("tx_bytes", tx_bytes, 0, SM90_PTX80)],
                   token=token, out=out, sem=sem, scope=scope, space=space, pred=pred)


def arrive_drop(k: KernelBuilder, bar, count=None, *, token: bool = False, out=None, sem=None,
                scope=None, space: str = "cta", pred=None) -> Reg | None:
    """Arrive on [bar] and lower its expected count for all later phases (a thread leaving the
    pipeline early must do this, or the others hang)."""
    return _arrive(k, "arrive_drop", bar, [("count", count, 1, ARRIVE_COUNT)], token=token, out=out,
                   sem=sem, scope=scope, space=space, pred=pred)


def expect_tx(k: KernelBuilder, bar, tx_bytes, *, scope=None, space: str = "cta", pred=None) -> None:
    """Add `tx_bytes` to the current phase's expected bytes without arriving
    (`mbarrier.expect_tx.relaxed.scope...` when `scope` is given; PTX 8.0)."""
    quals, _ = _qualifiers("mbarrier.expect_tx", None if scope is None else "relaxed", scope,
                           ("relaxed",))
    space_name, _ = _space("mbarrier.expect_tx", space)
    instr = ".".join(["mbarrier", "expect_tx", *quals, space_name, "b64"])
    k.emit(instr, (shared_address(k, instr, "bar", bar), _count(k, instr, "tx_bytes", tx_bytes, 0)),
           pred=pred, requires=SM90_PTX80)


def _wait(k: KernelBuilder, op: str, bar, phase, hint, *, sem, scope, out, pred) -> Reg:
    quals, q_req = _qualifiers(f"mbarrier.{op}", sem, scope, ("acquire", "relaxed"))
    instr = ".".join(["mbarrier", op, *quals, "shared::cta", "b64"])
    operands = [None, shared_address(k, instr, "bar", bar), phase(instr)]
    requires = _strictest(q_req, SM90 if op.startswith("try_wait") else SHARED_CTA)
    if hint is not None:
        operands.append(u32_operand(k, instr, "hint", hint, 0, (1 << 32) - 1,
                                    rule="a suspend-time hint in nanoseconds"))
    p = dest(k, instr, out, PRED, "p")
    operands[0] = p
    k.emit(instr, operands, defs=(p,), pred=pred, requires=requires)
    return p


def _parity(k: KernelBuilder, parity):
    def check(instr: str):
        return u32_operand(k, instr, "parity", parity, 0, 1,
                           rule="the parity of the phase waited for")
    return check


def _token(k: KernelBuilder, state):
    def check(instr: str):
        return source(k, instr, "state", state, B64, imm=False)
    return check


def try_wait_parity(k: KernelBuilder, bar, parity, *, hint=None, sem=None, scope=None, out=None,
                    pred=None) -> Reg:
    """p = has the phase of [bar] with parity `parity` (0/1 or a u32 register) completed?
    Blocks for a system-dependent time (or ~`hint` ns) before answering false; loop on it
    (`wait_parity` emits the loop).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); bar, ph = k.reg("u32"), k.reg("u32")
    >>> _ = try_wait_parity(k, bar, ph, hint=1000000, sem="acquire", scope="cluster")
    >>> k.body_lines()[-1]
    '    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p0, [%u0], %u1, 0xF4240;'
    """
    return _wait(k, "try_wait.parity", bar, _parity(k, parity), hint, sem=sem, scope=scope,
                 out=out, pred=pred)


def test_wait_parity(k: KernelBuilder, bar, parity, *, sem=None, scope=None, out=None,
                     pred=None) -> Reg:
    """p = has the phase with parity `parity` completed? (non-blocking probe)."""
    return _wait(k, "test_wait.parity", bar, _parity(k, parity), None, sem=sem, scope=scope,
                 out=out, pred=pred)


def try_wait(k: KernelBuilder, bar, state, *, hint=None, sem=None, scope=None, out=None,
             pred=None) -> Reg:
    """p = has the phase identified by `state` (the b64 token of an `arrive`) completed?"""
    return _wait(k, "try_wait", bar, _token(k, state), hint, sem=sem, scope=scope, out=out,
                 pred=pred)


def test_wait(k: KernelBuilder, bar, state, *, sem=None, scope=None, out=None, pred=None) -> Reg:
    """Non-blocking probe of the phase identified by the token `state`."""
    return _wait(k, "test_wait", bar, _token(k, state), None, sem=sem, scope=scope, out=out,
                 pred=pred)


# PTX's names start with "test_": keep pytest from collecting them when this file is named.
test_wait_parity.__test__ = test_wait.__test__ = False


def inval(k: KernelBuilder, bar, *, pred=None) -> None:
    """Invalidate [bar] before its bytes are reused for anything else (or re-initialised)."""
    instr = "mbarrier.inval.shared::cta.b64"
    k.emit(instr, (shared_address(k, instr, "bar", bar),), pred=pred, requires=SHARED_CTA)


def fence_init(k: KernelBuilder, *, pred=None) -> None:
    """`fence.mbarrier_init.release.cluster`: make prior inits visible to the async proxy (TMA)
    and to the other CTAs of the cluster; follow it with a CTA (or cluster) barrier."""
    k.emit("fence.mbarrier_init.release.cluster", pred=pred, requires=SM90_PTX80)


def arrive_remote(k: KernelBuilder, bar, rank, count=None, *, scope: str = "cluster", pred=None) -> None:
    """Arrive on the barrier at the same shared offset as `bar` in the CTA of cluster rank
    `rank`: `mapa.shared::cluster.u32` then `mbarrier.arrive.release.<scope>.shared::cluster`.
    `scope="cluster"` orders this thread's earlier memory writes before the peer's wait (ptxas
    emits MEMBAR.ALL.GPU for it on sm_90); `"cta"` does not (no fence in SASS): enough when
    the arrive only says that async-proxy reads (wgmma, TMA store) already completed."""
    remote = mapa(k, bar, rank, pred=pred)
    arrive(k, remote, count, sem="release", scope=scope, space="cluster", pred=pred)


__all__ = ["ARRIVE_COUNT", "MAX_COUNT", "MBARRIER_ALIGN", "MBARRIER_BYTES", "arrive",
           "arrive_drop", "arrive_expect_tx", "arrive_remote", "expect_tx", "fence_init", "init",
           "inval", "test_wait", "test_wait_parity", "try_wait", "try_wait_parity"]
