"""Emitting mbarrier operations: the region, init by one thread, arrive, expect-tx and waits.

Every function takes the kernel first and emits through the layoutkit.ptx isa families; none
waits unless it is a wait. The sequence a pipeline needs (hopper-ptx.md §3):

    region = declare_mbarriers(k, layout)     # .shared .align 8 .b8 mbarriers[N]
    init_mbarriers(k, region)                 # thread 0: init each with its count;
                                              # fence.mbarrier_init; bar.sync 0 (everyone)
    s = region.slot(k, full, stage)           # a barrier: int stage, or a u32 register
    arrive_expect_tx(k, s, bytes) / arrive(k, s) / emit_expect_tx(k, s, bytes)
    wait(k, s, parity)                        # the try_wait.parity loop
    wait(k, s, parity, debug=waits)           # debug build: bounded (see bounded_wait)

Runtime ring position: `RingRegisters` holds a PipelineState's index and phase in mutable
registers and emits its `advance` (index+1, wrap to 0 and flip the phase at `stages`).
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.ptx.builder import Address, KernelBuilder, Reg, Symbol
from layoutkit.ptx.isa import mbarrier as isa_mbarrier
from layoutkit.ptx.isa import mbarrier_wait, named_barrier
from layoutkit.ptx.isa import sm90 as I

from .errors import MbarrierLayoutError
from .mbarrier_layout import MBARRIER_ALIGN, MBARRIER_BYTES, MbarrierPlacement, MbarrierLayout
from .named_barriers import WHOLE_CTA_ID
from .pipeline_state import PipelineState


@dataclass(frozen=True)
class BarrierSlot:
    """One barrier: its array, its stage (int, or a u32 register at run time) and its address."""

    array: MbarrierPlacement
    stage: "int | Reg"
    address: Address

    def __str__(self) -> str:
        return f"mbarrier '{self.array.name}'[{self.stage}]"


@dataclass(frozen=True)
class BarrierRegion:
    """A layout placed in shared memory at `base` (a shared Symbol or a u32 shared::cta address
    register whose value is a multiple of 8)."""

    layout: MbarrierLayout
    base: "Symbol | Reg"

    def slot(self, k: KernelBuilder, array: MbarrierPlacement, stage: "int | Reg") -> BarrierSlot:
        """The barrier `array[stage]`. A register stage costs a shift and an add (and, for a
        Symbol base, a mov of its address); an int stage is folded into the address."""
        if array not in self.layout:
            raise MbarrierLayoutError("belongs to another MbarrierLayout than this region's",
                                      thing="mbarrier array", value=array.name)
        if isinstance(stage, Reg):
            base = I.mov(k, self.base) if isinstance(self.base, Symbol) else self.base
            scaled = I.shl(k, stage, MBARRIER_BYTES.bit_length() - 1, dtype="b32")
            return BarrierSlot(array, stage, Address(I.add(k, base, scaled, dtype="u32"),
                                                     array.offset))
        return BarrierSlot(array, stage, Address(self.base, array.byte_offset(stage)))


def declare_mbarriers(k: KernelBuilder, layout: MbarrierLayout, name: str = "mbarriers") -> BarrierRegion:
    """Declare the region as a static shared array of the kernel (`.shared .align 8`)."""
    if not layout.arrays:
        raise MbarrierLayoutError("has no arrays; add them before declaring the region",
                                  thing="MbarrierLayout", value=layout.nbytes)
    return BarrierRegion(layout, k.shared(name, layout.nbytes, align=MBARRIER_ALIGN))


def init_mbarriers(k: KernelBuilder, region: BarrierRegion, *, tid: Reg | None = None) -> None:
    """Thread 0 initialises every barrier with its arrive count and issues
    `fence.mbarrier_init.release.cluster`; then `bar.sync 0` (ALL threads of the CTA must
    reach this call) makes the barriers visible before anyone, or any TMA, uses them.
    `tid`: an already read %tid.x (else it is read here)."""
    tid = I.sreg(k, "tid.x") if tid is None else tid
    first = I.setp(k, "eq", tid, 0, dtype="u32")
    with k.guarded(first):
        for array in region.layout.arrays:
            for stage in range(array.stages):
                isa_mbarrier.init(k, region.slot(k, array, stage).address, array.arrive_count)
        isa_mbarrier.fence_init(k)
    named_barrier.bar_sync(k, WHOLE_CTA_ID)


def arrive(k: KernelBuilder, slot: BarrierSlot, count: int | Reg | None = None, *, pred=None) -> None:
    """One arrival (or `count`) on the barrier's current phase."""
    isa_mbarrier.arrive(k, slot.address, count, pred=pred)


def arrive_expect_tx(k: KernelBuilder, slot: BarrierSlot, tx_bytes: int | Reg, *, pred=None) -> None:
    """Arrive once and add `tx_bytes` to the phase's expected transaction bytes (the producer,
    before the TMA copies that deliver exactly those bytes)."""
    isa_mbarrier.arrive_expect_tx(k, slot.address, tx_bytes, pred=pred)


def emit_expect_tx(k: KernelBuilder, slot: BarrierSlot, tx_bytes: int | Reg, *, pred=None) -> None:
    """Add `tx_bytes` to the phase's expected bytes without arriving."""
    isa_mbarrier.expect_tx(k, slot.address, tx_bytes, pred=pred)


def wait(k: KernelBuilder, slot: BarrierSlot, parity: int | Reg, *, debug=None, location=None) -> None:
    """Block until the phase of `slot` with parity `parity` (0/1 or a u32 register) completed.

    Release build (`debug=None`): the plain try_wait.parity loop. Debug build: `debug` is the
    kernel's `BoundedWaits`; the wait gives up after its timeout, records and traps."""
    if debug is not None:
        debug.wait(k, slot, parity, location=location)
    else:
        mbarrier_wait.wait_parity(k, slot.address, parity)


class RingRegisters:
    """A PipelineState kept in registers for runtime loops: `index` and `phase` are mutable
    u32 registers, initialised from `start` where this is constructed.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module(line_info=False).kernel("k")
    >>> ring = RingRegisters(k, PipelineState.producer_start(4)); ring.advance(k)
    >>> print("\\n".join(k.body_lines()))
        mov.u32 %u0, 0;
        mov.u32 %u1, 1;
        add.u32 %u0, %u0, 1;
        setp.eq.u32 %p0, %u0, 4;
        @%p0 mov.u32 %u0, 0;
        @%p0 xor.b32 %u1, %u1, 1;
    """

    def __init__(self, k: KernelBuilder, start: PipelineState):
        self.stages = start.stages
        self.index = I.mov(k, start.index, dtype="u32", out=k.var("u32"))
        self.phase = I.mov(k, start.phase, dtype="u32", out=k.var("u32"))

    def advance(self, k: KernelBuilder) -> None:
        """Emit the next state: index+1; at `stages` the index wraps to 0 and the phase flips."""
        I.add(k, self.index, 1, dtype="u32", out=self.index)
        wrapped = I.setp(k, "eq", self.index, self.stages, dtype="u32")
        I.mov(k, 0, dtype="u32", out=self.index, pred=wrapped)
        I.xor(k, self.phase, 1, dtype="b32", out=self.phase, pred=wrapped)


__all__ = ["BarrierRegion", "BarrierSlot", "RingRegisters", "arrive", "arrive_expect_tx",
           "declare_mbarriers", "emit_expect_tx", "init_mbarriers", "wait"]
