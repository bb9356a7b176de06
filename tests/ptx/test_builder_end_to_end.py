"""A whole kernel through the sm90 namespace: assembles, maps SASS lines back with -lineinfo,
is byte-stable, and the arch namespaces re-export as documented."""
from __future__ import annotations

import inspect

from layoutkit.ptx.builder import Module
from layoutkit.ptx.isa import sm80, sm90
from tests.ptx.ptxas_helper import assemble


def online_softmax_row(line_info=True) -> Module:
    """Row max over a quad of lanes, exp2, running sum: the arithmetic of hopper-ptx.md §10."""
    I = sm90
    m = Module(line_info=line_info)
    smem = m.extern_shared("smem")
    k = m.kernel("softmax_row", maxntid=(128,), minnctapersm=1)
    tmap = k.tensormap_param("tmap")
    io = k.pointer_param("io")
    scale = k.param("scale_log2e", "f32")
    I.cvta_param(k, tmap)
    g = I.cvta(k, "global", I.ld_param(k, io))
    c = I.ld_param(k, scale)
    x = I.ld(k, "global", g, "f32", vec=4)
    mx = I.max_(k, I.max_(k, x[0], x[1]), I.max_(k, x[2], x[3]))
    for lane_xor in (1, 2):
        mx = I.max_(k, mx, I.shfl(k, "bfly", mx, lane_xor))
    m_scaled = I.mul(k, mx, c, ftz=True)
    masked = I.setp(k, "eq", m_scaled, float("-inf"))
    m_safe = I.selp(k, 0.0, m_scaled, masked)
    neg_m = I.neg(k, m_safe)
    p = [I.ex2(k, I.fma(k, xi, c, neg_m, ftz=True), ftz=True) for xi in x]
    total = k.var("f32")
    I.mov(k, 0.0, out=total)
    i = k.var("u32")
    I.mov(k, 0, out=i)
    loop = k.label("sum")
    k.place(loop)
    I.add(k, total, p[0], ftz=True, out=total)
    I.add(k, i, 1, out=i)
    again = I.setp(k, "lt", i, 4)
    I.bra(k, loop, pred=again)
    inv = I.rcp(k, total, ftz=True)
    packed = I.cvt_pack(k, hi=p[1], lo=p[0])
    s = I.mov(k, smem)
    I.st(k, "shared", s, packed)
    I.stmatrix(k, s, (packed,))
    tid = I.sreg(k, "tid.x")
    first = I.setp(k, "eq", tid, 0)
    I.st(k, "global", g, inv, pred=first)
    I.ret(k)
    return m


def test_kernel_assembles_with_lineinfo_and_is_stable():
    text = online_softmax_row().text()
    assert text == online_softmax_row().text()
    assert text.startswith(".version 8.0\n.target sm_90a\n.address_size 64\n\n.file 1 ")
    assemble(text)
    from layoutkit.ptx import assemble as lk_assemble
    lk_assemble(text, options=["-lineinfo"], cache=False)


def test_loc_lines_name_the_builder_calls():
    text = online_softmax_row().text()
    source, first = inspect.getsourcelines(online_softmax_row)
    call_lines = {first + i for i, line in enumerate(source) if "I." in line or "k." in line}
    loc_lines = {int(line.split()[2]) for line in text.splitlines() if line.strip().startswith(".loc")}
    assert len(loc_lines) > 20 and loc_lines <= call_lines


def test_without_line_info_no_file_or_loc():
    text = online_softmax_row(line_info=False).text()
    assert ".file" not in text and ".loc" not in text
    assemble(text)


def test_sm90_reexports_sm80():
    assert set(sm80.__all__) < set(sm90.__all__)
    assert {"stmatrix", "cvta_param"} <= set(sm90.__all__) - set(sm80.__all__)
    for name in sm90.__all__:
        assert callable(getattr(sm90, name)), name
