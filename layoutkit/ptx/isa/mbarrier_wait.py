"""Blocking mbarrier waits as emitted loops: the plain try_wait.parity spin and a bounded one.

`wait_parity` is the production wait (hopper-ptx.md §3):

    $mbar_wait_N:
        mbarrier.try_wait.parity.shared::cta.b64 %p, [bar], parity;
        @!%p bra $mbar_wait_N;

`wait_parity_bounded` is the debug-build watchdog (hopper-ptx.md §11, snippet 16): it spins
until a `%globaltimer` deadline (ns) and then branches to the caller's `on_timeout` label,
where the DSL writes a diagnostic record and traps; a wrong parity or expect-tx byte count
then fails loudly instead of hanging. Both loops must be emitted unguarded (they carry their
own predicated branches; PTX allows one guard per instruction).
"""
from __future__ import annotations

from ..builder import KernelBuilder, Label, PTXBuildError, PTXTypeError
from . import mbarrier
from .arith import add
from .compare import setp
from .control import bra
from .special import sreg

MAX_TIMEOUT_NS = (1 << 63) - 1


def wait_parity(k: KernelBuilder, bar, parity, *, hint=None, sem=None, scope=None) -> None:
    """Spin on `try_wait.parity` until the phase of [bar] with parity `parity` has completed.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); bar = k.reg("u32")
    >>> wait_parity(k, bar, 0); print("\\n".join(k.body_lines()))
    $mbar_wait_0:
        mbarrier.try_wait.parity.shared::cta.b64 %p0, [%u0], 0;
        @!%p0 bra $mbar_wait_0;
    """
    top = k.label("mbar_wait")
    k.place(top)
    done = mbarrier.try_wait_parity(k, bar, parity, hint=hint, sem=sem, scope=scope)
    bra(k, top, pred=~done)


def wait_parity_bounded(k: KernelBuilder, bar, parity, *, timeout_ns, on_timeout: Label, hint=None,
                        sem=None, scope=None) -> None:
    """Like `wait_parity`, but give up after `timeout_ns` nanoseconds of `%globaltimer` (an int
    1..2^63-1 or a u64 register) and branch to `on_timeout` (placed by the caller).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); bar = k.reg("u32"); hang = k.label("hang")
    >>> wait_parity_bounded(k, bar, 1, timeout_ns=2_000_000_000, on_timeout=hang)
    >>> print("\\n".join(k.body_lines()))
        mov.u64 %ud0, %globaltimer;
        add.u64 %ud1, %ud0, 0x77359400;
    $mbar_wait_1:
        mbarrier.try_wait.parity.shared::cta.b64 %p0, [%u0], 1;
        @%p0 bra $mbar_done_2;
        mov.u64 %ud2, %globaltimer;
        setp.lt.u64 %p1, %ud2, %ud1;
        @%p1 bra $mbar_wait_1;
        bra $hang_0;
    $mbar_done_2:
    """
    instr = "mbarrier.try_wait.parity (bounded)"
    if isinstance(timeout_ns, int) and not isinstance(timeout_ns, bool):
        if not 1 <= timeout_ns <= MAX_TIMEOUT_NS:
            raise PTXBuildError(f"must be in 1..{MAX_TIMEOUT_NS} nanoseconds", instruction=instr,
                                operand="timeout_ns", value=timeout_ns)
    elif getattr(getattr(timeout_ns, "type", None), "bits", None) != 64:
        raise PTXTypeError("a timeout is an int (ns) or a 64-bit integer register",
                           instruction=instr, operand="timeout_ns", value=timeout_ns)
    if not isinstance(on_timeout, Label):
        raise PTXTypeError("must be a Label made by this kernel's label()", instruction=instr,
                           operand="on_timeout", value=on_timeout)
    k.use_label(on_timeout, instr)
    deadline = add(k, sreg(k, "globaltimer"), timeout_ns)
    top, done = k.label("mbar_wait"), k.label("mbar_done")
    k.place(top)
    ok = mbarrier.try_wait_parity(k, bar, parity, hint=hint, sem=sem, scope=scope)
    bra(k, done, pred=ok)
    in_time = setp(k, "lt", sreg(k, "globaltimer"), deadline)
    bra(k, top, pred=in_time)
    bra(k, on_timeout)
    k.place(done)


__all__ = ["MAX_TIMEOUT_NS", "wait_parity", "wait_parity_bounded"]
