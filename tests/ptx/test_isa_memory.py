"""isa.memory and isa.atomic: ld/st/cvta forms, cache hints, vectors, atomics; ptxas and refusals."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXTypeError
from layoutkit.ptx.isa import atomic, memory
from tests.ptx.ptxas_helper import assemble, written, written_regs


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k")


def test_golden_param_to_store():
    m, k = kernel()
    tmap = k.tensormap_param("tmap")
    out = k.pointer_param("out")
    n = k.param("n", "u32")
    memory.cvta_param(k, tmap)
    g = memory.cvta(k, "global", memory.ld_param(k, out))
    count = memory.ld_param(k, n)
    xs = memory.ld(k, "global", g, "f32", vec=4, eviction="evict_last", prefetch="128B")
    p = written(k, "pred")
    memory.st(k, "global", memory_address(g, 16), xs[:2], cache="cs", pred=p)
    atomic.red(k, "global", "add", g, count)
    assert k.body_lines() == [
        "    cvta.param.u64 %rd0, tmap;",
        "    ld.param.u64 %ud0, [out];",
        "    cvta.to.global.u64 %ud1, %ud0;",
        "    ld.param.u32 %u0, [n];",
        "    ld.global.L1::evict_last.L2::128B.v4.f32 {%f0, %f1, %f2, %f3}, [%ud1];",
        "    mov.pred %p0, 1;",
        "    @%p0 st.global.cs.v2.f32 [%ud1+16], {%f0, %f1};",
        "    red.global.add.u32 [%ud1], %u0;",
    ]
    assemble(m.text())


def memory_address(base, offset):
    from layoutkit.ptx.builder import Address
    return Address(base, offset)


def test_every_form_assembles():
    m, k = kernel()
    smem = m.extern_shared()
    g = written(k, "u64")
    s32 = written(k, "u32")
    local = k.shared("buf", 64)
    for t in memory.MEM_TYPES + ("f16", "bf16x2"):
        for vec in (1, 2, 4):
            if vec * max(written(k, t).type.bits // 8, 1) > 16:
                continue
            vals = memory.ld(k, "global", g, t, vec=vec)
            memory.st(k, "global", g, vals)
            vals = memory.ld(k, "shared", s32, t, vec=vec)
            memory.st(k, "shared", memory_address(smem, 32), vals)
    for c in memory.LD_CACHE:
        memory.ld(k, "global", g, "u32", cache=c)
    for c in memory.ST_CACHE:
        memory.st(k, "global", g, 1, dtype="u32", cache=c)
    for e in memory.L1_EVICTION:
        memory.ld(k, "global", g, "u32", eviction=e)
        memory.st(k, "global", g, written(k, "u32"), eviction=e)
    memory.ld(k, "global", g, "u32", nc=True, eviction="no_allocate")
    memory.ld(k, "shared", s32, "u32", volatile=True)
    memory.st(k, "global", g, 1.0, dtype="f32", volatile=True)
    memory.ld(k, "local", g, "u32")
    memory.ld(k, "shared", local, "u32")
    memory.cvta(k, "shared", g, to_generic=True)
    memory.cvta(k, "shared", smem, to_generic=True)
    for op, types in atomic.OP_TYPES.items():
        for t in types:
            for space, addr in (("global", g), ("shared", s32)):
                v = written(k, t)
                atomic.atom(k, space, op, addr, v, compare=v if op == "cas" else None)
                if op not in ("exch", "cas"):
                    atomic.red(k, space, op, addr, v)
    atomic.atom(k, "global", "add", g, 1, dtype="u32", sem="acq_rel", scope="gpu")
    atomic.red(k, "shared", "max", s32, written(k, "s32"), sem="release", scope="cluster")
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: memory.ld(k, "global", k.reg("u32"), "u32"), PTXTypeError,
     r"ld.global.u32: operand address = %u0 \(.u32\): an address register is a 64-bit integer"),
    (lambda k: memory.ld(k, "global", k.reg("f64"), "u32"), PTXTypeError, "an address register"),
    (lambda k: memory.ld(k, "texture", k.reg("u64"), "u32"), PTXBuildError, r"ld: operand space = 'texture'"),
    (lambda k: memory.ld(k, "global", k.reg("u64"), "f64", vec=4), PTXBuildError,
     r"operand vec = 4: a vector access moves at most 16 bytes; 4 x .f64 is 32"),
    (lambda k: memory.ld(k, "global", k.reg("u64"), "u32", vec=3), PTXBuildError, "operand vec = 3"),
    (lambda k: memory.ld(k, "shared", k.reg("u32"), "u32", cache="cg"), PTXBuildError,
     "cache operators apply to .global"),
    (lambda k: memory.ld(k, "global", k.reg("u64"), "u32", cache="cg", eviction="no_allocate"),
     PTXBuildError, "cannot be combined with a cache operator"),
    (lambda k: memory.ld(k, "global", k.reg("u64"), "u32", cache="wb"), PTXBuildError, "operand cache = 'wb'"),
    (lambda k: memory.st(k, "global", k.reg("u64"), k.reg("u32"), cache="lu"), PTXBuildError, "operand cache = 'lu'"),
    (lambda k: memory.ld(k, "shared", k.reg("u32"), "u32", nc=True), PTXBuildError, ".nc"),
    (lambda k: memory.ld(k, "local", k.reg("u32"), "u32", volatile=True), PTXBuildError, ".volatile"),
    (lambda k: memory.ld(k, "global", k.reg("u64"), "u32", prefetch="512B"), PTXBuildError, "prefetch"),
    (lambda k: memory.ld(k, "global", k.reg("u64"), "pred"), PTXBuildError, "operand type = 'pred'"),
    (lambda k: memory.ld(k, "global", k.reg("u64"), "u32", vec=2, out=(k.reg("u32"),)), PTXBuildError,
     "needs exactly 2 registers"),
    (lambda k: memory.ld(k, "param", k.reg("u64"), "u32"), PTXTypeError, "ld.param reads a kernel parameter"),
    (lambda k: memory.ld_param(k, k.tensormap_param("t")), PTXTypeError, "ld_param reads a scalar Param"),
    (lambda k: memory.st(k, "param", k.reg("u64"), k.reg("u32")), PTXBuildError, "operand space = 'param'"),
    (lambda k: memory.st(k, "global", k.reg("u64"), 3), PTXTypeError, "cannot be inferred from immediates"),
    (lambda k: memory.st(k, "global", k.reg("u64"), (k.reg("u32"), k.reg("f32"))), PTXTypeError,
     r"operand values\[1\] = %f0 \(.f32\)"),
    (lambda k: memory.cvta(k, "texture", k.reg("u64")), PTXBuildError, "operand space"),
    (lambda k: atomic.atom(k, "global", "add", k.reg("u64"), k.reg("s64")), PTXTypeError,
     "atom.add: operand type = 's64'"),
    (lambda k: atomic.atom(k, "global", "mul", k.reg("u64"), k.reg("u32")), PTXBuildError, "operand op = 'mul'"),
    (lambda k: atomic.red(k, "global", "cas", k.reg("u64"), k.reg("b32")), PTXBuildError, "operand op = 'cas'"),
    (lambda k: atomic.atom(k, "global", "cas", k.reg("u64"), k.reg("b32")), PTXBuildError, "cas needs compare="),
    (lambda k: atomic.atom(k, "global", "add", k.reg("u64"), k.reg("u32"), compare=1), PTXBuildError,
     "compare= applies to cas only"),
    (lambda k: atomic.atom(k, "local", "add", k.reg("u64"), k.reg("u32")), PTXBuildError, "operand space = 'local'"),
    (lambda k: atomic.red(k, "global", "add", k.reg("u64"), k.reg("u32"), sem="acquire"), PTXBuildError,
     "operand sem = 'acquire'"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_memory.py" in str(info.value)
