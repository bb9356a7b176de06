"""isa.named_barrier: golden text, ptxas acceptance of every form, and every refusal."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXRangeError, PTXTypeError
from layoutkit.ptx.isa import control
from layoutkit.ptx.isa.named_barrier import (bar_arrive, bar_red, bar_sync, barrier_arrive,
                                             barrier_sync)
from tests.ptx.ptxas_helper import assemble, requires_ptxas


def kernel():
    m = Module(line_info=False)
    return m, m.kernel("k", maxntid=384)


def test_golden_producer_consumer_and_ping_pong():
    m, k = kernel()
    wg_bar, other, p = k.reg("u32"), k.reg("u32"), k.reg("pred")
    bar_sync(k, 0)
    bar_arrive(k, 2, 288)
    bar_sync(k, 2, 288)
    barrier_sync(k, wg_bar, 256)
    barrier_arrive(k, other, 256)
    barrier_sync(k, 6, 128, aligned=True)
    barrier_arrive(k, 7, 32, aligned=True)
    bar_red(k, "or", 1, p, 256)
    bar_red(k, "and", 1, ~p, aligned=False)
    assert k.body_lines() == [
        "    bar.sync 0;",
        "    bar.arrive 2, 288;",
        "    bar.sync 2, 288;",
        "    barrier.sync %u0, 256;",
        "    barrier.arrive %u1, 256;",
        "    barrier.sync.aligned 6, 128;",
        "    barrier.arrive.aligned 7, 32;",
        "    bar.red.or.pred %p1, 1, 256, %p0;",
        "    barrier.red.and.pred %p2, 1, !%p0;",
    ]


@requires_ptxas
def test_every_form_assembles():
    m, k = kernel()
    reg_id, reg_count, p = k.reg("u32"), k.reg("u32"), k.reg("pred")
    k.emit("mov.u32", (reg_id, 3), defs=(reg_id,))
    k.emit("mov.u32", (reg_count, 64), defs=(reg_count,))
    k.emit("setp.ne.u32", (p, reg_id, 0), defs=(p,))
    for barrier_id in (0, 15, reg_id):
        for count in (None, 32, 1024, reg_count):
            bar_sync(k, barrier_id, count)
            for aligned in (False, True):
                barrier_sync(k, barrier_id, count, aligned=aligned)
                for op in ("popc", "and", "or"):
                    bar_red(k, op, barrier_id, p if aligned else ~p, count, aligned=aligned)
            if count is not None:
                bar_arrive(k, barrier_id, count)
                barrier_arrive(k, barrier_id, count)
                barrier_arrive(k, barrier_id, count, aligned=True)
    control.ret(k)
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: bar_sync(k, 16), PTXRangeError,
     r"bar.sync: operand barrier_id = 16: must be in 0..15 \(a CTA has 16 named barriers\)"),
    (lambda k: bar_sync(k, -1), PTXRangeError, "operand barrier_id = -1: must be in 0..15"),
    (lambda k: bar_sync(k, 1, 33), PTXRangeError,
     r"bar.sync: operand count = 33: must be a multiple of 32 \(whole warps, at most one CTA\)"),
    (lambda k: bar_sync(k, 1, 0), PTXRangeError, "operand count = 0: must be in 32..1024"),
    (lambda k: bar_sync(k, 1, 1056), PTXRangeError, "operand count = 1056: must be in 32..1024"),
    (lambda k: bar_sync(k, k.reg("f32")), PTXTypeError,
     r"operand barrier_id = %f0 \(.f32\): a .f32 register cannot be used as .u32"),
    (lambda k: bar_sync(k, 1, k.reg("u64")), PTXTypeError, r"operand count = %ud0 \(.u64\)"),
    (lambda k: bar_arrive(k, 2, None), PTXBuildError,
     "bar.arrive: operand count = None: arrive needs the thread count"),
    (lambda k: barrier_arrive(k, 2, None, aligned=True), PTXBuildError,
     "barrier.arrive.aligned: operand count = None: arrive needs the thread count"),
    (lambda k: barrier_arrive(k, 2, 48), PTXRangeError, "barrier.arrive: operand count = 48"),
    (lambda k: barrier_sync(k, 2, aligned=1), PTXTypeError, "operand aligned = 1: must be True or False"),
    (lambda k: bar_red(k, "xor", 1, k.reg("pred")), PTXBuildError,
     "bar.red: operand op = 'xor': must be one of 'popc', 'and', 'or'"),
    (lambda k: bar_red(k, "popc", 1, k.reg("u32")), PTXTypeError,
     r"bar.red.popc.u32: operand c = %u0 \(.u32\): a .u32 register cannot be used as .pred"),
    (lambda k: bar_red(k, "popc", 1, True), PTXTypeError, "operand c = True: must be a register"),
    (lambda k: bar_red(k, "and", 1, k.reg("pred"), out=k.reg("u32")), PTXTypeError,
     "a .u32 register cannot (receive|be used as)"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_named_barrier.py" in str(info.value)
