"""The builder's whole-kernel checks: a register read but never written, and what raw() accepts
(statements that stay inside the kernel body, layoutkit.ptx.builder.raw_text)."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import (Address, Imm, Module, PTXBuildError, PTXSSAError, TYPES,
                                   Vector)
from tests.ptx.ptxas_helper import assemble, requires_ptxas

U32 = TYPES["u32"]


def kernel(name="k"):
    m = Module(line_info=False)
    return m, m.kernel(name)


def test_reading_a_register_never_written_names_it_the_reader_and_the_line():
    m, k = kernel()
    a, b = k.reg("u32"), k.reg("u32")
    k.emit("add.u32", (b, a, Imm(1, U32)), defs=(b,))
    line = test_reading_a_register_never_written_names_it_the_reader_and_the_line.__code__.co_firstlineno + 3
    with pytest.raises(PTXSSAError, match=rf"add.u32: operand source = %u0 \(.u32\): is read but never "
                                          rf"written in kernel k .*\(at .*test_builder_checks.py:{line}\)"):
        m.text()


@pytest.mark.parametrize("kind", ["address", "vector", "guard"])
def test_reads_inside_addresses_vectors_and_guards_are_checked(kind):
    m, k = kernel()
    base = k.reg("u64")
    k.emit("mov.u64", (base, Imm(0, TYPES["u64"])), defs=(base,))
    if kind == "address":
        r = k.reg("u64")
        v = k.reg("u32")
        k.emit("ld.global.u32", (v, Address(r)), defs=(v,))
    elif kind == "vector":
        r = k.reg("u32")
        k.emit("st.global.v2.u32", (Address(base), Vector((r, r))))
    else:
        r = k.reg("pred")
        k.emit("ret", pred=~r)
    with pytest.raises(PTXSSAError, match=rf"operand source = {r.name} \(.{r.type.name}\): is read "
                                          r"but never written in kernel k"):
        m.text()


def test_a_mutable_register_written_later_in_a_loop_is_written():
    m, k = kernel()
    i = k.var("u32")
    top = k.label("loop")
    k.place(top)
    k.emit("add.u32", (i, i, Imm(1, U32)), defs=(i,))   # read and written by one instruction
    p = k.reg("pred")
    k.emit("setp.lt.u32", (p, i, Imm(8, U32)), defs=(p,))
    k.emit("bra", (k.use_label(top, "bra"),), pred=p)
    assert "add.u32 %u0, %u0, 1;" in m.text()


def test_a_mutable_register_may_hold_an_undefined_value():
    # the DSL's wgmma accumulator: KernelBuilder.var registers read before any write (scale-d = 0)
    m, k = kernel()
    acc, copy = k.var("f32"), k.var("f32")
    k.emit("mov.f32", (copy, acc), defs=(copy,))
    assert "mov.f32 %f1, %f0;" in m.text()


def test_a_register_named_by_raw_text_counts_as_written():
    m, k = kernel()
    r, out = k.reg("u32"), k.reg("u32")
    k.raw(f"mov.u32 {r}, %tid.x;")
    k.emit("add.u32", (out, r, Imm(1, U32)), defs=(out,))
    assert "mov.u32 %u0, %tid.x;  // unchecked" in m.text()


@pytest.mark.parametrize("text, message", [
    ("ret;\n}\n.visible .entry evil()\n{\nret;", r"raw: .*closes a block it did not open"),
    ("ret; } .entry evil() {", r"closes a block it did not open"),
    (".visible .entry evil()\n{\nret;\n}", r"contains the directive .visible, which belongs to the module or "
                                           r"the entry, not to a kernel body"),
    ("call.uni f; .func f() { ret; }", r"contains the directive .func"),
    ("{ ret;", r"opens 1 block\(s\) it does not close"),
    ("ret;\n.version 8.0", r"contains the directive .version"),
    ("ret;\n.target sm_80", r"contains the directive .target"),
    ("nop; .maxnreg 32", r"contains the directive .maxnreg"),
    (".loc 1 2 0", r"contains the directive .loc"),
    (".shared .b8 more[4096];", r"declares with .shared; raw text may declare only .reg"),
    ("{ .global .u32 g; }", r"declares with .global"),
    (".param .u32 p;", r"declares with .param"),
    ("ret; /* open", r"a /\* comment is never closed"),
    ("ret;\x00", r"no NUL or carriage-return"),
    ("ret;\r\n", r"no NUL or carriage-return"),
    (b"ret;", r"raw: b'ret;': raw text is a str of PTX statements"),
    (None, r"raw text is a str"),
])
def test_raw_refuses_text_that_leaves_the_kernel_body(text, message):
    m, k = kernel()
    with pytest.raises(PTXBuildError, match=message):
        k.raw(text)
    assert k.lines == []


@requires_ptxas
def test_raw_accepts_statements_scoped_blocks_and_comments():
    m, k = kernel()
    out, v = k.reg("u64"), k.reg("u32")
    k.emit("mov.u64", (out, Imm(0, TYPES["u64"])), defs=(out,))
    k.raw("nanosleep.u32 100")                                      # a ';' is added
    k.raw("{\n  .reg .pred %q;\n  setp.eq.u32 %q, 1, 1;  // { a brace in a comment\n}")
    k.raw(f"ld.global.u32 {v}, [{out}]; /* }} */ st.global.u32 [{out}], {v};")
    k.raw('.pragma "nounroll";')
    k.raw("membar.gl // no ';' before this comment")
    k.emit("ret")
    lines = k.body_lines()
    assert lines[1] == "    nanosleep.u32 100;  // unchecked"
    assert lines[2].split("\n") == ["    {  // unchecked", "      .reg .pred %q;",
                                     "      setp.eq.u32 %q, 1, 1;  // { a brace in a comment", "    }"]
    assert lines[-2] == "    membar.gl; // no ';' before this comment  // unchecked"
    assemble(m.text())
