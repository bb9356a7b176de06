"""isa.warp: shfl.sync modes and clamp/segment operand, vote.sync, bar.warp.sync."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXRangeError, PTXTypeError
from layoutkit.ptx.isa import special, warp
from tests.ptx.ptxas_helper import assemble, written, written_regs


def kernel():
    m = Module(line_info=False)
    return m, m.kernel("k")


def test_golden_warp_index_broadcast():
    m, k = kernel()
    tid = special.sreg(k, "tid.x")
    w = k.reg("u32")
    k.emit("shr.u32", (w, tid, 5), defs=(w,))
    warp.shfl(k, "idx", w, 0)
    v, ok = warp.shfl(k, "up", written(k, "f32"), 1, with_pred=True)
    warp.vote(k, "ballot", ok)
    warp.vote(k, "all", ~ok, membermask=0xFFFF)
    warp.bar_warp_sync(k)
    assert k.body_lines()[2:] == [
        "    shfl.sync.idx.b32 %u2, %u1, 0, 31, 0xFFFFFFFF;",
        "    mov.b32 %f0, 0;",
        "    shfl.sync.up.b32 %f1|%p0, %f0, 1, 0, 0xFFFFFFFF;",
        "    vote.sync.ballot.b32 %u3, %p0, 0xFFFFFFFF;",
        "    vote.sync.all.pred %p1, !%p0, 65535;",
        "    bar.warp.sync 0xFFFFFFFF;",
    ]
    assemble(m.text())


def test_every_form_assembles():
    m, k = kernel()
    lane = special.sreg(k, "laneid")
    p = written(k, "pred")
    for mode in ("up", "down", "bfly", "idx"):
        warp.shfl(k, mode, written(k, "u32"), 1)
        warp.shfl(k, mode, written(k, "b32"), lane, c=lane, membermask=lane, with_pred=True)
    for mode in ("all", "any", "uni", "ballot"):
        warp.vote(k, mode, p, membermask=lane)
    warp.bar_warp_sync(k, lane)
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: warp.shfl(k, "rotate", k.reg("u32"), 1), PTXBuildError, r"shfl.sync: operand mode = 'rotate'"),
    (lambda k: warp.shfl(k, "bfly", k.reg("u32"), 32), PTXBuildError,
     r"shfl.sync.bfly.b32: operand b = 32: must be in 0..31"),
    (lambda k: warp.shfl(k, "idx", k.reg("u32"), 0, c=0x2000), PTXBuildError, r"operand c = 8192"),
    (lambda k: warp.shfl(k, "idx", k.reg("f64"), 0), PTXTypeError,
     r"operand a = %fd0 \(.f64\): a .f64 register cannot be used as .b32"),
    (lambda k: warp.shfl(k, "idx", k.reg("u32"), 0, membermask=1 << 32), PTXRangeError, "does not fit .b32"),
    (lambda k: warp.vote(k, "ballot", k.reg("u32")), PTXTypeError, "cannot be used as .pred"),
    (lambda k: warp.vote(k, "none", k.reg("pred")), PTXBuildError, "operand mode = 'none'"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_warp.py" in str(info.value)
