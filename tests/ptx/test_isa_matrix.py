"""isa.async_copy and isa.matrix: cp.async groups, ldmatrix/stmatrix, mma.sync m16n8k{8,16}."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXRangeError, PTXTargetError, PTXTypeError
from layoutkit.ptx.isa import async_copy, matrix
from tests.ptx.ptxas_helper import assemble, written, written_regs


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k")


def test_golden_cp_async_ldmatrix_mma():
    m, k = kernel()
    tile = m.shared("tile", 4096, align=128)
    s, g, size = written(k, "u32"), written(k, "u64"), written(k, "u32")
    async_copy.cp_async(k, s, g, 16)
    async_copy.cp_async(k, tile, g, 8, cache="ca", src_size=size, prefetch="128B")
    async_copy.commit_group(k)
    async_copy.wait_group(k, 1)
    async_copy.wait_all(k)
    a = matrix.ldmatrix(k, s, 4)
    b = matrix.ldmatrix(k, s, 2, trans=True)
    acc = tuple(k.var("f32") for _ in range(4))
    matrix.mma_sync(k, a, b, acc, out=acc)
    matrix.stmatrix(k, s, a, trans=True)
    assert k.body_lines() == [
        "    mov.b32 %u0, 0;",
        "    mov.b64 %ud0, 0;",
        "    mov.b32 %u1, 0;",
        "    cp.async.cg.shared.global [%u0], [%ud0], 16;",
        "    cp.async.ca.shared.global.L2::128B [tile], [%ud0], 8, %u1;",
        "    cp.async.commit_group;",
        "    cp.async.wait_group 1;",
        "    cp.async.wait_all;",
        "    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r0, %r1, %r2, %r3}, [%u0];",
        "    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r4, %r5}, [%u0];",
        "    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0, %f1, %f2, %f3}, "
        "{%r0, %r1, %r2, %r3}, {%r4, %r5}, {%f0, %f1, %f2, %f3};",
        "    stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%u0], {%r0, %r1, %r2, %r3};",
    ]
    assemble(m.text())


def test_every_form_assembles():
    m, k = kernel()
    s, g = written(k, "u32"), written(k, "u64")
    for cache, sizes in async_copy.SIZES.items():
        for size in sizes:
            async_copy.cp_async(k, s, g, size, cache=cache, src_size=size // 2)
            for pf in ("64B", "128B", "256B"):
                async_copy.cp_async(k, written(k, "u64"), g, size, cache=cache, prefetch=pf)
    for num in (1, 2, 4):
        for trans in (False, True):
            frag = matrix.ldmatrix(k, s, num, trans=trans, dtype="bf16x2")
            matrix.stmatrix(k, s, frag, trans=trans)
    for shape, (na, nb) in matrix.MMA_SHAPES.items():
        for ab, acc in (("bf16", "f32"), ("f16", "f32"), ("f16", "f16")):
            c = written_regs(k, "f32" if acc == "f32" else "f16x2", 4 if acc == "f32" else 2)
            matrix.mma_sync(k, written_regs(k, "b32", na), written_regs(k, "b32", nb), c, shape=shape, ab_type=ab,
                            acc_type=acc)
    assemble(m.text())


@pytest.mark.parametrize("build, error, message", [
    (lambda k: async_copy.cp_async(k, k.reg("u32"), k.reg("u64"), 8), PTXBuildError,
     r"cp.async.cg.shared.global: operand size = 8: cp.async.cg copies 16 bytes"),
    (lambda k: async_copy.cp_async(k, k.reg("u32"), k.reg("u64"), 2, cache="ca"), PTXBuildError,
     "cp.async.ca copies 4, 8, 16 bytes"),
    (lambda k: async_copy.cp_async(k, k.reg("u32"), k.reg("u64"), 16, src_size=17), PTXRangeError,
     "operand src_size = 17: must be in 0..16"),
    (lambda k: async_copy.cp_async(k, k.reg("u32"), k.reg("u32"), 16), PTXTypeError,
     r"operand src = %u1 \(.u32\): an address register is a 64-bit"),
    (lambda k: async_copy.cp_async(k, k.reg("u32"), k.reg("u64"), 16, cache="cs"), PTXBuildError,
     "operand cache = 'cs'"),
    (lambda k: async_copy.wait_group(k, -1), PTXRangeError, "operand n = -1: must be in 0..255"),
    (lambda k: matrix.ldmatrix(k, k.reg("u32"), 3), PTXBuildError, "operand num = 3"),
    (lambda k: matrix.ldmatrix(k, k.reg("u32"), 2, dtype="f64"), PTXTypeError, "cannot receive a .b32"),
    (lambda k: matrix.stmatrix(k, k.reg("u32"), k.regs("b32", 3)), PTXBuildError, "operand num = 3"),
    (lambda k: matrix.stmatrix(k, k.reg("u32"), (k.reg("f64"),)), PTXTypeError,
     r"operand values\[0\] = %fd0 \(.f64\)"),
    (lambda k: matrix.mma_sync(k, k.regs("b32", 4), k.regs("b32", 2), k.regs("f16x2", 2), acc_type="f16"),
     PTXBuildError, "f16 accumulators need f16 inputs"),
    (lambda k: matrix.mma_sync(k, k.regs("b32", 3), k.regs("b32", 2), k.regs("f32", 4)), PTXRangeError,
     r"operand a = .*needs exactly 4 registers of .b32, got 3"),
    (lambda k: matrix.mma_sync(k, k.regs("b32", 4), k.regs("b32", 2), k.regs("f16x2", 2)), PTXRangeError,
     "needs exactly 4 registers of .f32, got 2"),
    (lambda k: matrix.mma_sync(k, k.regs("b32", 4), k.regs("b32", 2), k.regs("f16x2", 4)), PTXTypeError,
     r"operand c\[0\] = %hh0 \(.f16x2\): a .f16x2 register cannot be used as .f32"),
    (lambda k: matrix.mma_sync(k, k.regs("b32", 4), k.regs("b32", 2), k.regs("f32", 4), shape="m16n8k32"),
     PTXBuildError, "operand shape = 'm16n8k32'"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_matrix.py" in str(info.value)


def test_stmatrix_needs_sm90_and_cp_async_sm80():
    m, k = kernel("sm_80")
    with pytest.raises(PTXTargetError, match="stmatrix.sync.aligned.m8n8.x1.shared.b16: needs sm_90"):
        matrix.stmatrix(k, k.reg("u32"), k.reg("b32"))
