"""isa.control and isa.special: branches, ret/exit/trap, fences, special registers."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXLabelError, PTXTargetError
from layoutkit.ptx.isa import compare, control, special
from tests.ptx.ptxas_helper import assemble


def test_golden_loop():
    m = Module(line_info=False)
    k = m.kernel("loop")
    i = k.var("u32")
    k.emit("mov.u32", (i, 0), defs=(i,))
    top = k.label("loop")
    k.place(top)
    k.emit("add.u32", (i, i, 1), defs=(i,))
    p = compare.setp(k, "lt", i, 10)
    control.bra(k, top, pred=p)
    control.trap(k, pred=~p)
    control.fence(k, "sc", "cta")
    control.membar(k, "gl")
    control.exit_(k)
    assert k.body_lines() == [
        "    mov.u32 %u0, 0;",
        "$loop_0:",
        "    add.u32 %u0, %u0, 1;",
        "    setp.lt.u32 %p0, %u0, 10;",
        "    @%p0 bra $loop_0;",
        "    @!%p0 trap;",
        "    fence.sc.cta;",
        "    membar.gl;",
        "    exit;",
    ]
    assemble(m.text())


def test_every_form_assembles():
    m = Module(line_info=False)
    k = m.kernel("k", reqnctapercluster=2)
    for name in special.SPECIAL_REGISTERS:
        if name != "aggr_smem_size":
            special.sreg(k, name)
    for level in ("cta", "gl", "sys"):
        control.membar(k, level)
    for sem in ("sc", "acq_rel"):
        for scope in control.FENCE_SCOPES:
            control.fence(k, sem, scope)
    done = k.label("done")
    control.bra(k, done, uni=True)
    k.place(done)
    control.ret(k)
    assert m.version == (8, 0)
    assemble(m.text())


def test_aggr_smem_size_raises_version():
    m = Module(line_info=False)
    k = m.kernel("k")
    special.sreg(k, "%aggr_smem_size")
    assert m.text().startswith(".version 8.1")
    assemble(m.text())


def test_refusals():
    m = Module(target="sm_80")
    k = m.kernel("k")
    with pytest.raises(PTXBuildError, match="unknown special register"):
        special.sreg(k, "tid.w")
    with pytest.raises(PTXTargetError, match=r"mov.u32: needs sm_90 or newer, the module targets sm_80"):
        special.sreg(k, "cluster_ctarank")
    with pytest.raises(PTXBuildError, match=r"fence: operand scope = 'block'"):
        control.fence(k, "sc", "block")
    with pytest.raises(PTXBuildError, match=r"membar: operand level = 'gpu'"):
        control.membar(k, "gpu")
    with pytest.raises(PTXTargetError, match="fence.sc.cluster: needs sm_90"):
        control.fence(k, "sc", "cluster")
    with pytest.raises(PTXLabelError, match="a branch target must be a Label made by this kernel"):
        control.bra(k, "$L_0")
