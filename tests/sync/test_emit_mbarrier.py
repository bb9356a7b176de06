"""Emitted mbarrier PTX: region, init, arrive/expect-tx, the wait loop, the ring advance, the
bounded debug wait (golden text) - and every kernel assembles for sm_90a."""
from __future__ import annotations

import pytest

from layoutkit import sync as S
from layoutkit.ptx import Module
from layoutkit.ptx.isa import sm90 as I
from tests.ptx.ptxas_helper import assemble, requires_ptxas


def ring_layout():
    layout = S.MbarrierLayout()
    return layout, layout.add("full", 2, 1), layout.add("empty", 2, 128)


RING_BODY = """\
    mov.u32 %u0, %tid.x;
    setp.eq.u32 %p0, %u0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers], 1;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers+8], 1;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers+16], 128;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers+24], 128;
    @%p0 fence.mbarrier_init.release.cluster;
    bar.sync 0;
    mov.u32 %u1, 0;
    mov.u32 %u2, 0;
    mov.u32 %u3, mbarriers;
    shl.b32 %u4, %u1, 3;
    add.u32 %u5, %u3, %u4;
$mbar_wait_0:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%u5], %u2;
    @!%p1 bra $mbar_wait_0;
    mbarrier.arrive.shared::cta.b64 _, [mbarriers+24];
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [mbarriers], 8192;
    mbarrier.expect_tx.shared::cta.b64 [mbarriers+8], 4096;
    add.u32 %u1, %u1, 1;
    setp.eq.u32 %p2, %u1, 2;
    @%p2 mov.u32 %u1, 0;
    @%p2 xor.b32 %u2, %u2, 1;
    ret;"""


@requires_ptxas
def test_ring_operations_golden_and_assembled():
    m = Module(line_info=False)
    k = m.kernel("ring", maxntid=256)
    layout, full, empty = ring_layout()
    region = S.declare_mbarriers(k, layout)
    S.init_mbarriers(k, region)
    ring = S.RingRegisters(k, S.PipelineState.consumer_start(2))
    S.wait(k, region.slot(k, full, ring.index), ring.phase)
    S.arrive(k, region.slot(k, empty, 1))
    S.arrive_expect_tx(k, region.slot(k, full, 0), 8192)
    S.emit_expect_tx(k, region.slot(k, full, 1), 4096)
    ring.advance(k)
    I.ret(k)
    assert "\n".join(k.body_lines()) == RING_BODY
    assert ".shared .align 8 .b8 mbarriers[32];" in m.text()
    cubin = assemble(m.text())
    assert cubin.resources["ring"].shared_bytes == 32


def test_slot_addresses_with_a_register_base():
    m = Module(line_info=False)
    k = m.kernel("k")
    layout, full, empty = ring_layout()
    base = I.add(k, I.mov(k, m.extern_shared()), 1024, dtype="u32")
    region = S.BarrierRegion(layout, base)
    assert str(region.slot(k, empty, 1).address) == "[%u1+24]"
    stage = k.reg("u32")
    assert str(region.slot(k, full, stage).address) == "[%u4]"
    assert k.body_lines()[-2:] == ["    shl.b32 %u3, %u2, 3;", "    add.u32 %u4, %u1, %u3;"]


def test_slot_and_layout_errors():
    k = Module().kernel("k")
    layout, full, _ = ring_layout()
    region = S.declare_mbarriers(k, layout)
    with pytest.raises(S.MbarrierLayoutError, match="mbarrier 'full' stage = 2: must be in 0..1"):
        region.slot(k, full, 2)
    other = S.MbarrierLayout().add("full", 2, 1)
    with pytest.raises(S.MbarrierLayoutError, match="belongs to another MbarrierLayout"):
        region.slot(k, other, 0)
    with pytest.raises(S.MbarrierLayoutError, match="arrive_count = 0: must be an integer in "
                                                    "1..1048575"):
        S.MbarrierLayout().add("x", 2, 0)
    with pytest.raises(S.MbarrierLayoutError, match="arrive_count = 1048576"):
        S.MbarrierLayout().add("x", 2, 1 << 20)
    with pytest.raises(S.MbarrierLayoutError, match="offset = 4: must be a multiple of 8"):
        S.MbarrierPlacement("x", 1, 1, 4)
    dup = S.MbarrierLayout()
    dup.add("x", 1, 1)
    with pytest.raises(S.MbarrierLayoutError, match="name = 'x': is already an mbarrier array"):
        dup.add("x", 1, 1)
    with pytest.raises(S.MbarrierLayoutError, match="has no arrays"):
        S.declare_mbarriers(Module().kernel("k2"), S.MbarrierLayout())


BOUNDED_BODY = """\
    ld.param.u64 %ud0, [__layoutkit_wait_errors];
    cvta.to.global.u64 %ud1, %ud0;
    mov.u32 %u0, %tid.x;
    setp.eq.u32 %p0, %u0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers], 1;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers+8], 1;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers+16], 128;
    @%p0 mbarrier.init.shared::cta.b64 [mbarriers+24], 128;
    @%p0 fence.mbarrier_init.release.cluster;
    bar.sync 0;
    bra $sync_wait_0;
$sync_timeout_1:
    atom.global.add.u32 %u1, [%ud1], 1;
    setp.ne.u32 %p1, %u1, 0;
    @%p1 exit;
    mov.u32 %u2, %ctaid.x;
    mov.u32 %u3, %ctaid.y;
    mov.u32 %u4, %ctaid.z;
    mov.u32 %u5, %tid.x;
    mov.u32 %u6, %tid.y;
    mov.u32 %u7, %tid.z;
    st.global.u32 [%ud1+8], 0;
    st.global.u32 [%ud1+12], 1;
    st.global.u32 [%ud1+16], 0;
    st.global.u32 [%ud1+20], 0;
    st.global.u32 [%ud1+48], 0x7A120;
    st.global.u32 [%ud1+24], %u2;
    st.global.u32 [%ud1+28], %u3;
    st.global.u32 [%ud1+32], %u4;
    st.global.u32 [%ud1+36], %u5;
    st.global.u32 [%ud1+40], %u6;
    st.global.u32 [%ud1+44], %u7;
    membar.sys;
    st.global.u32 [%ud1+4], 0x4C4B5754;
    membar.sys;
    trap;
$sync_wait_0:
    mov.u64 %ud2, %globaltimer;
    add.u64 %ud3, %ud2, 0x1DCD6500;
$mbar_wait_2:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [mbarriers+8], 0;
    @%p2 bra $mbar_done_3;
    mov.u64 %ud4, %globaltimer;
    setp.lt.u64 %p3, %ud4, %ud3;
    @%p3 bra $mbar_wait_2;
    bra $sync_timeout_1;
$mbar_done_3:
    ret;"""


@requires_ptxas
def test_bounded_wait_golden_table_and_assembled():
    m = Module(line_info=False)
    k = m.kernel("dbg", maxntid=128)
    waits = S.BoundedWaits(k, timeout_s=0.5)
    layout, full, _ = ring_layout()
    region = S.declare_mbarriers(k, layout)
    S.init_mbarriers(k, region)
    S.wait(k, region.slot(k, full, 1), 0, debug=waits); line = _line()  # noqa: E702
    I.ret(k)
    assert "\n".join(k.body_lines()) == BOUNDED_BODY
    assert [p.name for p in k.params] == [S.ERROR_BUFFER_PARAM]
    assert waits.table.barriers == ["full"]
    site = waits.table.sites[0]
    assert site.barrier == "full" and site.location.line == line
    assert site.location.file.endswith("test_emit_mbarrier.py")
    assemble(m.text())


def _line() -> int:
    import sys
    return sys._getframe(1).f_lineno


def test_release_build_waits_cost_nothing_extra():
    k = Module(line_info=False).kernel("rel")
    layout, full, _ = ring_layout()
    region = S.declare_mbarriers(k, layout)
    S.wait(k, region.slot(k, full, 0), 1)
    assert k.body_lines() == ["$mbar_wait_0:",
                              "    mbarrier.try_wait.parity.shared::cta.b64 %p0, [mbarriers], 1;",
                              "    @!%p0 bra $mbar_wait_0;"]
    assert k.params == []


def test_bounded_wait_arguments():
    k = Module().kernel("k")
    with pytest.raises(S.DebugRecordError, match="timeout_s = 0: must be a number of seconds"):
        S.BoundedWaits(k, timeout_s=0)
    waits = S.BoundedWaits(k)
    other = Module().kernel("other")
    layout, full, _ = ring_layout()
    region = S.declare_mbarriers(other, layout)
    with pytest.raises(S.DebugRecordError, match="kernel = 'other': these BoundedWaits belong to "
                                                 "kernel 'k'"):
        S.wait(other, region.slot(other, full, 0), 0, debug=waits)
