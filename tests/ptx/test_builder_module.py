"""Module/kernel builder: header, params, directives, shared memory, registers, labels, text."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import (SINK, Address, Imm, Module, PTXDirectiveError, PTXLabelError,
                                   PTXSSAError, PTXTargetError, PTXTypeError, Requirement, TYPES)
from tests.ptx.ptxas_helper import assemble, requires_ptxas


def build_demo(line_info=False) -> Module:
    m = Module(line_info=line_info)
    smem = m.extern_shared("smem")
    k = m.kernel("demo", maxntid=(384,), minnctapersm=1)
    tmap = k.tensormap_param("tmap_a")
    out = k.pointer_param("out")
    n = k.param("n", "u32")
    scale = k.param("scale", "f32")
    rd = k.reg("b64")
    k.emit("cvta.param.u64", (rd, tmap.symbol), defs=(rd,))
    g = k.reg("u64")
    k.emit("ld.param.u64", (g, out.address), defs=(g,))
    r = k.reg("u32")
    k.emit("ld.param.u32", (r, n.address), defs=(r,))
    f = k.reg("f32")
    k.emit("ld.param.f32", (f, scale.address), defs=(f,))
    s = k.reg("u32")
    k.emit("mov.u32", (s, smem), defs=(s,))
    p = k.reg("pred")
    k.emit("setp.eq.u32", (p, r, Imm(0, TYPES["u32"])), defs=(p,))
    done = k.label("done")
    k.emit("bra.uni", (k.use_label(done, "bra"),), pred=p)
    k.emit("st.shared.u32", (Address(s, 16), r))
    k.place(done)
    k.emit("ret")
    return m


GOLDEN = """\
.version 8.0
.target sm_90a
.address_size 64

.extern .shared .align 1024 .b8 smem[];

.visible .entry demo(
    .param .align 64 .b8 tmap_a[128],
    .param .u64 out,
    .param .u32 n,
    .param .f32 scale
)
.maxntid 384, 1, 1
.minnctapersm 1
{
    .reg .pred %p<1>;
    .reg .u32 %u<2>;
    .reg .b64 %rd<1>;
    .reg .u64 %ud<1>;
    .reg .f32 %f<1>;
    cvta.param.u64 %rd0, tmap_a;
    ld.param.u64 %ud0, [out];
    ld.param.u32 %u0, [n];
    ld.param.f32 %f0, [scale];
    mov.u32 %u1, smem;
    setp.eq.u32 %p0, %u0, 0;
    @%p0 bra.uni $done_0;
    st.shared.u32 [%u1+16], %u0;
$done_0:
    ret;
}
"""


def test_golden_module_text():
    assert build_demo().text() == GOLDEN


def test_text_is_byte_stable():
    assert build_demo(True).text() == build_demo(True).text()


@requires_ptxas
def test_demo_assembles_with_and_without_line_info():
    assemble(build_demo().text())
    assemble(build_demo(line_info=True).text())


def test_line_info_points_at_this_file():
    m = Module()
    k = m.kernel("loc")
    k.emit("ret")  # the .loc must name this line
    import inspect
    line = inspect.currentframe().f_lineno - 2
    text = m.text()
    assert f'.file 1 "{__file__}"' in text
    assert f"    .loc 1 {line} 0\n    ret;" in text


def test_loc_only_when_line_changes():
    m = Module()
    k = m.kernel("loc2")
    for _ in range(3):
        k.emit("trap")
    assert m.text().count(".loc") == 1


def test_at_overrides_location():
    from layoutkit.ptx.builder import SourceLocation
    m = Module()
    k = m.kernel("loc3")
    with k.at(SourceLocation("/user/kernel.py", 42)):
        k.emit("ret")
    assert '.file 1 "/user/kernel.py"' in m.text() and ".loc 1 42 0" in m.text()


def test_all_register_types_declare_and_assemble():
    m = Module(line_info=False)
    k = m.kernel("regs")
    for name in TYPES:
        k.reg(name)
    text = m.text()
    assert "    .reg .b16 %bf<1>;" in text and "    .reg .b32 %bff<1>;" in text
    assert "    .reg .f16x2 %hh<1>;" in text
    assemble(text)


def test_registers_are_fresh_and_distinct():
    k = Module().kernel("k")
    names = [k.reg("b32").name for _ in range(3)] + [k.reg("u32").name, k.reg("s32").name]
    assert names == ["%r0", "%r1", "%r2", "%u0", "%s0"]
    assert len({t.prefix for t in TYPES.values()}) == len(TYPES)


def test_ssa_register_written_twice_is_refused():
    k = Module().kernel("k")
    r = k.reg("u32")
    k.emit("mov.u32", (r, Imm(1, TYPES["u32"])), defs=(r,))
    with pytest.raises(PTXSSAError, match=r"mov.u32: operand destination = %u0 \(.u32\): is already "
                                          r"written.*KernelBuilder.var.*test_builder_module.py"):
        k.emit("mov.u32", (r, Imm(2, TYPES["u32"])), defs=(r,))


def test_var_may_be_rewritten():
    k = Module().kernel("k")
    v = k.var("u32")
    k.emit("mov.u32", (v, Imm(1, TYPES["u32"])), defs=(v,))
    k.emit("add.u32", (v, v, Imm(1, TYPES["u32"])), defs=(v,))


def test_register_of_another_kernel_is_refused():
    m = Module()
    a, b = m.kernel("a"), m.kernel("b")
    r = a.reg("u32")
    b.reg("u32")
    c = m.kernel("c")
    with pytest.raises(Exception, match="belongs to another kernel, not c"):
        c.emit("mov.u32", (r, Imm(0, TYPES["u32"])), defs=(r,))


def test_guarded_context_and_negation():
    m = Module(line_info=False)
    k = m.kernel("g")
    p = k.reg("pred")
    k.emit("setp.eq.u32", (p, Imm(0, TYPES["u32"]), Imm(0, TYPES["u32"])), defs=(p,))
    with k.guarded(~p):
        k.emit("trap")
    k.emit("ret", pred=p)
    assert k.body_lines()[1:] == ["    @!%p0 trap;", "    @%p0 ret;"]
    with pytest.raises(PTXTypeError, match="a guard is a .pred register"):
        with k.guarded(k.reg("u32")):
            pass
    with pytest.raises(PTXTypeError, match="only a .pred register can be negated"):
        ~k.reg("u32")


def test_unplaced_label_is_reported_at_render():
    m = Module()
    k = m.kernel("l")
    target = k.label("loop")
    k.emit("bra.uni", (k.use_label(target, "bra"),))
    with pytest.raises(PTXLabelError, match=r"operand label = '\$loop_0': is branched "
                                            r"to but never placed in kernel l"):
        m.text()


def test_label_placed_twice_and_foreign_label():
    m = Module()
    k, other = m.kernel("l"), m.kernel("l2")
    lab = k.label()
    k.place(lab)
    with pytest.raises(PTXLabelError, match="already placed"):
        k.place(lab)
    other.label()
    with pytest.raises(PTXLabelError, match="was not made by this kernel"):
        other.place(lab)


def test_raw_is_marked_unchecked():
    m = Module(line_info=False)
    k = m.kernel("raw")
    k.raw("nanosleep.u32 100")
    assert k.body_lines() == ["    nanosleep.u32 100;  // unchecked"]
    assemble(m.text())


@pytest.mark.parametrize("kwargs, message", [
    (dict(maxntid=128, reqntid=128), ".maxntid and .reqntid cannot both be given"),
    (dict(maxntid=(32, 32, 2)), "a CTA has at most 1024 threads"),
    (dict(minnctapersm=1), "ptxas ignores .minnctapersm unless .maxntid or .reqntid"),
    (dict(maxnreg=16), r"operand .maxnreg = 16: must be in 24..255"),
    (dict(maxnreg=256), r"operand .maxnreg = 256: must be in 24..255"),
    (dict(reqnctapercluster=(4, 4, 2)), "a cluster has at most 16 CTAs"),
    (dict(reqnctapercluster=2, maxclusterrank=4), "cannot be combined with .reqnctapercluster"),
    (dict(maxntid=(1, 2, 3, 4)), "takes 1 to 3 positive integers"),
    (dict(reqntid=0), "takes 1 to 3 positive integers"),
])
def test_directive_errors(kwargs, message):
    with pytest.raises(PTXDirectiveError, match=message):
        Module().kernel("k", **kwargs)


@requires_ptxas
def test_all_directives_assemble():
    m = Module(line_info=False)
    m.kernel("a", maxntid=(128, 2), minnctapersm=2, maxnreg=168).emit("ret")
    m.kernel("b", reqntid=256).emit("ret")
    m.kernel("c", reqnctapercluster=(2, 1, 1)).emit("ret")
    m.kernel("d", explicitcluster=True, maxclusterrank=8).emit("ret")
    text = m.text()
    assert ".maxntid 128, 2, 1\n.minnctapersm 2\n.maxnreg 168\n{" in text
    assert ".explicitcluster\n.maxclusterrank 8\n{" in text
    assemble(text)


def test_cluster_directives_need_sm90():
    with pytest.raises(PTXTargetError, match="needs sm_90 or newer, the module targets sm_80"):
        Module(target="sm_80").kernel("k", reqnctapercluster=2)


def test_version_is_raised_by_requirements_and_fixed_version_refuses():
    m = Module()
    k = m.kernel("k")
    k.emit("fence.proxy.tensormap::generic.release.gpu", requires=Requirement(version=(8, 3), sm=90))
    assert m.text().startswith(".version 8.3\n")
    fixed = Module(version="8.0").kernel("k")
    with pytest.raises(PTXTargetError, match="needs PTX ISA 8.3 but the module fixes .version 8.0"):
        fixed.emit("fence.proxy.tensormap::generic.release.gpu",
                   requires=Requirement(version=(8, 3), sm=90))
    with pytest.raises(PTXTargetError, match="exists only on sm_90a, the module targets sm_90"):
        Module(target="sm_90").kernel("k").emit("wgmma.fence.sync.aligned",
                                                requires=Requirement((8, 0), 90, True))


@pytest.mark.parametrize("kwargs, message", [
    (dict(version="9.1"), r"operand .version = '9.1': must be in 8.0..9.0"),
    (dict(version="7.8"), r"must be in 8.0..9.0 for .target sm_90a"),
    (dict(version="eight"), "MAJOR.MINOR"),
    (dict(target="sm_91"), "unsupported target"),
    (dict(address_size=32), "64-bit modules only"),
])
def test_module_errors(kwargs, message):
    with pytest.raises(Exception, match=message):
        Module(**kwargs)


def test_other_target_header():
    m = Module(target="sm_80", line_info=False)
    m.kernel("k").emit("ret")
    assert m.text().startswith(".version 8.0\n.target sm_80\n")
    assemble(m.text(), arch="sm_80")


def test_shared_declarations_and_limits():
    m = Module(line_info=False)
    m.shared("bars", 72, align=8)
    k = m.kernel("k")
    k.shared("tile", 2048, align=128)
    k.emit("ret")
    text = m.text()
    assert ".shared .align 8 .b8 bars[72];\n" in text
    assert "{\n    .shared .align 128 .b8 tile[2048];\n" in text
    assemble(text)
    with pytest.raises(PTXDirectiveError, match="static shared memory would total 51272 bytes"):
        m.shared("big", 48 * 1024)
    with pytest.raises(PTXDirectiveError, match="alignment must be a power of two"):
        m.shared("odd", 16, align=24)
    with pytest.raises(PTXDirectiveError, match="is already declared in this module"):
        m.extern_shared("bars")


def test_param_errors():
    k = Module().kernel("k")
    k.param("n", "u32")
    with pytest.raises(PTXDirectiveError, match="parameter names must be unique"):
        k.param("n", "u64")
    with pytest.raises(PTXTypeError, match="a parameter has a plain scalar type"):
        k.param("p", "pred")
    with pytest.raises(PTXDirectiveError, match="a PTX identifier"):
        k.param("1bad", "u32")
    with pytest.raises(PTXDirectiveError, match="64- or 128-byte aligned"):
        k.tensormap_param("t", align=32)
    with pytest.raises(PTXTypeError, match="unknown PTX type"):
        k.reg("f128")


def test_sink_prints_underscore():
    assert str(SINK) == "_"
