"""isa.mbarrier and isa.mbarrier_wait: golden text, ptxas acceptance of every form, versions,
and every refusal."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import (SINK, Address, Module, PTXBuildError, PTXLabelError,
                                   PTXRangeError, PTXTargetError, PTXTypeError)
from layoutkit.ptx.isa import control, mbarrier as mb, mbarrier_wait as mw
from tests.ptx.ptxas_helper import assemble, requires_ptxas, written, written_regs


def kernel(target="sm_90a", **directives):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k", **directives)


def test_golden_producer_consumer_forms():
    m, k = kernel()
    bars = m.shared("bars", 16, align=8)
    bar, phase = k.reg("u32"), k.var("u32")
    mb.init(k, bars, 1)
    mb.init(k, Address(bars, 8), 256)
    mb.fence_init(k)
    mb.arrive_expect_tx(k, bar, 8192)
    mb.expect_tx(k, bar, 16, scope="cta")
    token = mb.arrive(k, bar, token=True)
    mb.arrive(k, bar, 2, sem="release", scope="cluster")
    mb.arrive_drop(k, bar)
    mb.try_wait_parity(k, bar, phase, hint=1000000, sem="acquire", scope="cta")
    mb.test_wait_parity(k, bar, 1)
    mb.try_wait(k, bar, token)
    mb.test_wait(k, bar, token)
    mb.arrive_remote(k, bar, 1)
    mb.inval(k, bar)
    assert k.body_lines() == [
        "    mbarrier.init.shared::cta.b64 [bars], 1;",
        "    mbarrier.init.shared::cta.b64 [bars+8], 256;",
        "    fence.mbarrier_init.release.cluster;",
        "    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%u0], 8192;",
        "    mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%u0], 16;",
        "    mbarrier.arrive.shared::cta.b64 %rd0, [%u0];",
        "    mbarrier.arrive.release.cluster.shared::cta.b64 _, [%u0], 2;",
        "    mbarrier.arrive_drop.shared::cta.b64 _, [%u0];",
        "    mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p0, [%u0], %u1, 0xF4240;",
        "    mbarrier.test_wait.parity.shared::cta.b64 %p1, [%u0], 1;",
        "    mbarrier.try_wait.shared::cta.b64 %p2, [%u0], %rd0;",
        "    mbarrier.test_wait.shared::cta.b64 %p3, [%u0], %rd0;",
        "    mapa.shared::cluster.u32 %u2, %u0, 1;",
        "    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%u2];",
        "    mbarrier.inval.shared::cta.b64 [%u0];",
    ]
    assert m.version == (8, 0)


@requires_ptxas
def test_every_form_assembles():
    m, k = kernel(reqnctapercluster=2)
    bars = m.shared("bars", 64, align=8)
    bar = k.reg("u32")
    k.emit("mov.u32", (bar, bars), defs=(bar,))
    wide = k.reg("u64")
    k.emit("cvta.shared.u64", (wide, bars), defs=(wide,))
    count, parity, nbytes, rank = written(k, "u32"), written(k, "u32"), written(k, "u32"), written(k, "u32")
    mb.init(k, bar, (1 << 20) - 1)
    mb.init(k, Address(bars, 8), count)
    mb.fence_init(k)
    for sem, scope in [(None, None), ("release", None), (None, "cluster"), ("release", "cta")]:
        for space in ("cta", "cluster"):
            mb.arrive(k, bar, sem=sem, scope=scope, space=space)
            mb.arrive(k, bar, count, sem=sem, scope=scope, space=space)
            mb.arrive_drop(k, bar, 3, sem=sem, scope=scope, space=space)
            mb.arrive_expect_tx(k, bar, nbytes, sem=sem, scope=scope, space=space)
            mb.arrive_expect_tx(k, bar, (1 << 20) - 1, sem=sem, scope=scope, space=space)
        mb.arrive(k, bar, token=True, sem=sem, scope=scope)
        mb.arrive_drop(k, bar, out=k.reg("b64"), sem=sem, scope=scope)
    for scope in (None, "cta", "cluster"):
        for space in ("cta", "cluster"):
            mb.expect_tx(k, bar, 0, scope=scope, space=space)
    token = mb.arrive(k, Address(wide, 0), token=True)
    for sem, scope in [(None, None), ("acquire", "cta"), (None, "cluster")]:
        for hint in (None, 0, 20000, count):
            mb.try_wait_parity(k, bar, parity, hint=hint, sem=sem, scope=scope)
            mb.try_wait(k, bar, token, hint=hint, sem=sem, scope=scope)
        mb.test_wait_parity(k, bar, 0, sem=sem, scope=scope)
        mb.test_wait(k, bar, token, sem=sem, scope=scope)
    mb.arrive_remote(k, bar, rank)
    mb.arrive_remote(k, bar, 0, 4)
    mw.wait_parity(k, bar, parity)
    mw.wait_parity(k, Address(bars, 8), 1, hint=1000, sem="acquire", scope="cluster")
    hang = k.label("hang")
    mw.wait_parity_bounded(k, bar, 0, timeout_ns=2_000_000_000, on_timeout=hang)
    mw.wait_parity_bounded(k, bar, parity, timeout_ns=written(k, "u64"), on_timeout=hang, hint=500)
    mb.inval(k, bar)
    control.ret(k)
    k.place(hang)
    control.trap(k)
    assert m.version == (8, 0)
    assemble(m.text())


@requires_ptxas
def test_relaxed_raises_the_version_to_8_6():
    m, k = kernel()
    bar = k.reg("u32")
    k.emit("mov.u32", (bar, m.shared("bar", 8, align=8)), defs=(bar,))
    mb.arrive(k, bar, sem="relaxed")
    mw.wait_parity(k, bar, 0, sem="relaxed", scope="cta")
    assert m.text().startswith(".version 8.6")
    assert "mbarrier.arrive.relaxed.cta.shared::cta.b64 _, [%u0];" in m.text()
    assemble(m.text())


@requires_ptxas
def test_plain_sm90_keeps_ptx_7_8_until_a_feature_needs_8_0():
    m = Module(line_info=False, target="sm_90", version=None)
    k = m.kernel("k")
    bar = k.reg("u32")
    k.emit("mov.u32", (bar, m.shared("bar", 8, align=8)), defs=(bar,))
    mb.init(k, bar, 1)
    mb.arrive(k, bar, 2)
    mw.wait_parity(k, bar, 0, hint=100)
    assert m.version == (8, 0)       # the module floor is 8.0; a fixed 7.8 shows the need:
    fixed = Module(line_info=False, target="sm_90", version="7.8")
    k78 = fixed.kernel("k")
    bar78 = k78.reg("u32")
    k78.emit("mov.u32", (bar78, fixed.shared("bar", 8, align=8)), defs=(bar78,))
    mb.init(k78, bar78, 1)
    mb.arrive(k78, bar78, 2)
    mw.wait_parity(k78, bar78, 0, hint=100)
    control.ret(k78)
    assemble(fixed.text(), "sm_90")
    with pytest.raises(PTXTargetError, match=r"mbarrier.arrive.expect_tx.shared::cta.b64: needs "
                                             r"PTX ISA 8.0 but the module fixes .version 7.8"):
        mb.arrive_expect_tx(k78, bar78, 16)
    with pytest.raises(PTXTargetError, match="needs PTX ISA 8.0"):
        mb.arrive(k78, bar78, sem="release")
    with pytest.raises(PTXTargetError, match="fence.mbarrier_init.release.cluster: needs PTX ISA"):
        mb.fence_init(k78)


def test_try_wait_needs_sm90():
    m, k = kernel(target="sm_80")
    bar = k.reg("u32")
    mb.init(k, bar, 1)
    mb.test_wait_parity(k, bar, 0)
    with pytest.raises(PTXTargetError, match=r"mbarrier.try_wait.parity.shared::cta.b64: needs "
                                             "sm_90 or newer, the module targets sm_80"):
        mb.try_wait_parity(k, bar, 0)
    with pytest.raises(PTXTargetError, match="needs sm_90"):
        mb.arrive(k, bar, 2)


@pytest.mark.parametrize("build, error, message", [
    (lambda k, b: mb.init(k, b, 0), PTXRangeError,
     r"mbarrier.init.shared::cta.b64: operand count = 0: must be in 1..1048575 "
     r"\(mbarrier counts are limited to 2\^20-1\)"),
    (lambda k, b: mb.init(k, b, 1 << 20), PTXRangeError, "operand count = 1048576: must be in 1..1048575"),
    (lambda k, b: mb.init(k, b, k.reg("f32")), PTXTypeError,
     r"operand count = %f0 \(.f32\): a .f32 register cannot be used as .u32"),
    (lambda k, b: mb.init(k, k.reg("f32"), 1), PTXTypeError,
     "operand bar = %f0 \\(.f32\\): an address register is a 32-bit/64-bit integer register"),
    (lambda k, b: mb.init(k, k.param("n", "u32").symbol, 1), PTXTypeError,
     "operand bar = Symbol.*a .param symbol is not a shared-memory address"),
    (lambda k, b: mb.arrive(k, b, 0), PTXRangeError,
     "mbarrier.arrive.shared::cta.b64: operand count = 0: must be in 1..1048575"),
    (lambda k, b: mb.arrive(k, b, sem="acquire"), PTXBuildError,
     "mbarrier.arrive: operand sem = 'acquire': must be one of 'release', 'relaxed'"),
    (lambda k, b: mb.arrive(k, b, scope="gpu"), PTXBuildError,
     "mbarrier.arrive: operand scope = 'gpu': must be one of 'cta', 'cluster'"),
    (lambda k, b: mb.arrive(k, b, space="global"), PTXBuildError,
     "mbarrier.arrive: operand space = 'global': must be one of 'cta', 'cluster'"),
    (lambda k, b: mb.arrive(k, b, token=True, space="cluster"), PTXBuildError,
     "mbarrier.arrive.shared::cluster.b64: operand out = 'token=True': an arrive on a "
     r"shared::cluster barrier cannot return a state; the destination must be the sink _"),
    (lambda k, b: mb.arrive(k, b, out=k.reg("b64"), space="cluster"), PTXBuildError,
     "cannot return a state"),
    (lambda k, b: mb.arrive(k, b, out=k.reg("u32")), PTXTypeError,
     r"operand state = %u1 \(.u32\): a .u32 register cannot receive a .b64 result"),
    (lambda k, b: mb.arrive_expect_tx(k, b, 1 << 20), PTXRangeError,
     "mbarrier.arrive.expect_tx.shared::cta.b64: operand tx_bytes = 1048576: must be in 0..1048575"),
    (lambda k, b: mb.arrive_expect_tx(k, b, -16), PTXRangeError, "operand tx_bytes = -16"),
    (lambda k, b: mb.expect_tx(k, b, 1 << 21), PTXRangeError,
     "mbarrier.expect_tx.shared::cta.b64: operand tx_bytes = 2097152"),
    (lambda k, b: mb.try_wait_parity(k, b, 2), PTXRangeError,
     r"mbarrier.try_wait.parity.shared::cta.b64: operand parity = 2: must be in 0..1 \(the "
     "parity of the phase waited for\\)"),
    (lambda k, b: mb.test_wait_parity(k, b, True), PTXTypeError, "operand parity = True"),
    (lambda k, b: mb.try_wait_parity(k, b, 0, hint=-1), PTXRangeError,
     "operand hint = -1: must be in 0..4294967295"),
    (lambda k, b: mb.try_wait_parity(k, b, 0, sem="release"), PTXBuildError,
     "operand sem = 'release': must be one of 'acquire', 'relaxed'"),
    (lambda k, b: mb.try_wait(k, b, k.reg("u32")), PTXTypeError,
     r"mbarrier.try_wait.shared::cta.b64: operand state = %u1 \(.u32\): a .u32 register cannot be used as .b64"),
    (lambda k, b: mb.try_wait(k, b, 0), PTXTypeError, "operand state = 0: must be a register of type .b64"),
    (lambda k, b: mb.try_wait_parity(k, b, 0, out=k.reg("u32")), PTXTypeError,
     "a .u32 register cannot receive a .pred result"),
    (lambda k, b: mb.arrive_remote(k, b, 16), PTXRangeError,
     r"mapa.shared::cluster.u32: operand rank = 16: must be in 0..15 \(a cluster has at most 16 CTAs\)"),
    (lambda k, b: mw.wait_parity_bounded(k, b, 0, timeout_ns=0, on_timeout=k.label("t")),
     PTXBuildError, r"mbarrier.try_wait.parity \(bounded\): operand timeout_ns = 0: must be in 1.."),
    (lambda k, b: mw.wait_parity_bounded(k, b, 0, timeout_ns=k.reg("u32"), on_timeout=k.label("t")),
     PTXTypeError, "a timeout is an int \\(ns\\) or a 64-bit integer register"),
    (lambda k, b: mw.wait_parity_bounded(k, b, 0, timeout_ns=10, on_timeout="$fail"),
     PTXTypeError, "operand on_timeout = '\\$fail': must be a Label"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k, k.reg("u32"))
    assert "test_isa_mbarrier.py" in str(info.value)


def test_wait_loop_inside_a_guard_is_refused():
    m, k = kernel()
    bar, p = k.reg("u32"), k.reg("pred")
    with k.guarded(p), pytest.raises(PTXBuildError, match="an explicit pred inside `guarded`"):
        mw.wait_parity(k, bar, 0)


def test_unplaced_timeout_label_is_reported():
    m, k = kernel()
    mw.wait_parity_bounded(k, k.reg("u32"), 0, timeout_ns=100, on_timeout=k.label("hang"))
    with pytest.raises(PTXLabelError, match=r"\$hang_0.*is branched to but never placed"):
        m.text()


def test_sink_state_is_accepted_explicitly():
    m, k = kernel()
    assert mb.arrive(k, k.reg("u32"), out=SINK) is None
    assert k.body_lines()[-1] == "    mbarrier.arrive.shared::cta.b64 _, [%u0];"
