"""isa.wgmma and isa.wgmma_descriptor: golden text, ptxas acceptance of every shape and type,
descriptor encodings against hand-computed values (hopper-ptx.md §5), and every refusal."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import Module, PTXBuildError, PTXRangeError, PTXTargetError, PTXTypeError
from layoutkit.ptx.isa import control, wgmma
from layoutkit.ptx.isa.wgmma_descriptor import (advance_descriptor, descriptor, encode_field,
                                                make_descriptor)
from tests.ptx.ptxas_helper import assemble, requires_ptxas


def kernel(target="sm_90a"):
    m = Module(line_info=False, target=target)
    return m, m.kernel("k", reqntid=128)


def accumulators(k, count, dtype="f32"):
    return [k.var(dtype) for _ in range(count)]


def test_golden_ss_rs_fp8_tf32():
    m, k = kernel()
    d = accumulators(k, 4)
    da, db = k.reg("b64"), k.reg("b64")
    a = [k.var("bf16x2") for _ in range(4)]
    p = k.reg("pred")
    wgmma.fence(k)
    wgmma.mma_async(k, d, da, db, n=8, scale_d=0)
    wgmma.mma_async(k, d, da, db, n=8, scale_d=p, scale_b=-1, trans_b=1)
    wgmma.mma_async(k, d, a, db, n=8, scale_a=-1, trans_b=1)
    wgmma.mma_async(k, d, da, db, n=8, ab_type="e4m3", b_type="e5m2")
    wgmma.mma_async(k, d, [k.reg("b32") for _ in range(4)], db, n=8, ab_type="tf32",
                    scale_d=~p)
    wgmma.mma_async(k, [k.var("f16x2") for _ in range(2)], da, 0x4000004000010040, n=8,
                    ab_type="f16", acc_type="f16", trans_a=1)
    wgmma.commit_group(k)
    wgmma.wait_group(k, 1)
    acc = "{%f0, %f1, %f2, %f3}"
    assert k.body_lines() == [
        "    wgmma.fence.sync.aligned;",
        f"    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {acc}, %rd0, %rd1, 0, 1, 1, 0, 0;",
        f"    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {acc}, %rd0, %rd1, %p0, 1, -1, 0, 1;",
        f"    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {acc}, "
        "{%bff0, %bff1, %bff2, %bff3}, %rd1, 1, -1, 1, 1;",
        f"    wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2 {acc}, %rd0, %rd1, 1, 1, 1;",
        f"    wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {acc}, "
        "{%r0, %r1, %r2, %r3}, %rd1, !%p0, 1, 1;",
        "    wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 {%hh0, %hh1}, %rd0, "
        "0x4000004000010040, 1, 1, 1, 1, 0;",
        "    wgmma.commit_group.sync.aligned;",
        "    wgmma.wait_group.sync.aligned 1;",
    ]
    assert m.version == (8, 0)


@requires_ptxas
def test_every_shape_and_type_assembles():
    m, k = kernel()
    f32 = accumulators(k, 128)
    f16 = accumulators(k, 64, "f16x2")
    smem = m.extern_shared("smem")
    base = k.reg("u32")
    k.emit("mov.u32", (base, smem), defs=(base,))
    da = make_descriptor(k, base, lbo=16, sbo=1024, swizzle="128B")
    db = advance_descriptor(k, da, 8192)
    a_bf16 = [k.var("bf16x2") for _ in range(4)]
    a_f16 = [k.var("f16x2") for _ in range(4)]
    a_bits = [k.var("b32") for _ in range(4)]
    for r in a_bf16 + a_f16 + a_bits:
        k.emit(f"mov.b32", (r, 0), defs=(r,))
    p = k.reg("pred")
    k.emit("setp.ne.u32", (p, base, 0), defs=(p,))
    wgmma.fence(k)
    for n in range(8, 257, 8):
        wgmma.mma_async(k, f32[:n // 2], da, db, n=n, scale_d=0)
    for n in (8, 64, 256):
        c32, c16 = f32[:n // 2], f16[:n // 4]
        for trans_a in (0, 1):
            for trans_b in (0, 1):
                wgmma.mma_async(k, c32, da, db, n=n, ab_type="f16", trans_a=trans_a,
                                trans_b=trans_b, scale_a=-1)
                wgmma.mma_async(k, c16, da, db, n=n, ab_type="f16", acc_type="f16",
                                trans_a=trans_a, trans_b=trans_b, scale_d=p)
        wgmma.mma_async(k, c32, a_bf16, db, n=n, trans_b=1, scale_d=~p)
        wgmma.mma_async(k, c32, a_f16, db, n=n, ab_type="f16", scale_b=-1)
        wgmma.mma_async(k, c16, a_bits, db, n=n, ab_type="f16", acc_type="f16")
        wgmma.mma_async(k, c32, da, db, n=n, ab_type="tf32")
        wgmma.mma_async(k, c32, a_bits, db, n=n, ab_type="tf32")
        for at in ("e4m3", "e5m2"):
            for bt in ("e4m3", "e5m2"):
                wgmma.mma_async(k, c32, da, db, n=n, ab_type=at, b_type=bt)
                wgmma.mma_async(k, c16, a_bits, db, n=n, ab_type=at, b_type=bt, acc_type="f16")
        wgmma.mma_async(k, c32, descriptor(1024, lbo=16, sbo=1024, swizzle="128B"),
                        descriptor(9216, lbo=8192, sbo=1024, swizzle="128B"), n=n, trans_b=1)
    wgmma.commit_group(k)
    for n in range(wgmma.MAX_PENDING_GROUPS + 1):
        wgmma.wait_group(k, n)
    control.ret(k)
    assemble(m.text())


def test_accumulator_counts():
    assert [wgmma.accumulator_count(n) for n in (8, 64, 128, 256)] == [4, 32, 64, 128]
    assert [wgmma.accumulator_count(n, "f16") for n in (8, 64, 256)] == [2, 16, 64]


def test_wgmma_needs_sm90a():
    for target in ("sm_90", "sm_80"):
        m, k = kernel(target)
        with pytest.raises(PTXTargetError, match=f"wgmma.fence.sync.aligned: .*{target}"):
            wgmma.fence(k)
    m, k = kernel("sm_90")
    with pytest.raises(PTXTargetError, match="exists only on sm_90a, the module targets sm_90"):
        wgmma.mma_async(k, accumulators(k, 4), k.reg("b64"), k.reg("b64"), n=8)


# ---- descriptors ------------------------------------------------------------------------------

def test_descriptor_k_major_sw128():
    # enc(0x400) = 0x40; LBO 16 -> 1 << 16; SBO 1024 -> 64 << 32; 128B swizzle -> 1 << 62
    assert descriptor(0x400, lbo=16, sbo=1024, swizzle="128B") == 0x4000004000010040
    assert descriptor(0x400, lbo=16, sbo=1024, swizzle="128B") == \
        (1 << 62) | (64 << 32) | (1 << 16) | 0x40


@pytest.mark.parametrize("address", [0, 0x400, 0x2400, 0x3FFF0])
def test_descriptor_mn_major_sw128(address):
    assert descriptor(address, lbo=8192, sbo=1024, swizzle="128B") == \
        0x4000004002000000 | (address >> 4)


def test_descriptor_other_fields():
    assert descriptor(0, lbo=0, sbo=512, swizzle="64B") == (2 << 62) | (32 << 32)
    assert descriptor(0, lbo=0, sbo=256, swizzle="32B") == (3 << 62) | (16 << 32)
    assert descriptor(0x1230, lbo=128, sbo=256) == 0x123 | (8 << 16) | (16 << 32)
    assert descriptor(0, lbo=0, sbo=0, swizzle="128B", base_offset=7) == (1 << 62) | (7 << 49)
    assert descriptor((1 << 18) - 16, lbo=(1 << 18) - 16, sbo=(1 << 18) - 16) == \
        0x3FFF | (0x3FFF << 16) | (0x3FFF << 32)


def test_descriptor_steps_match_the_emitted_add():
    # a k16 step in a K-major SW128 row is +32 bytes = +2 in the address field
    base = descriptor(0x400, lbo=16, sbo=1024, swizzle="128B")
    assert descriptor(0x420, lbo=16, sbo=1024, swizzle="128B") == base + 2
    m, k = kernel()
    d = k.reg("u64")
    advance_descriptor(k, d, 32)
    advance_descriptor(k, d, 2048)
    advance_descriptor(k, d, -64)
    assert k.body_lines() == ["    add.u64 %ud1, %ud0, 2;", "    add.u64 %ud2, %ud0, 128;",
                              "    add.s64 %ud3, %ud0, -4;"]


def test_make_descriptor_golden():
    m, k = kernel()
    a = k.reg("u32")
    make_descriptor(k, a, lbo=8192, sbo=1024, swizzle="128B")
    assert k.body_lines() == [
        "    bfe.u32 %u1, %u0, 4, 14;",
        "    cvt.u64.u32 %ud0, %u1;",
        "    or.b64 %ud1, %ud0, 0x4000004002000000;",
    ]


@pytest.mark.parametrize("build, message", [
    (lambda: descriptor(0x408, lbo=16, sbo=1024), r"operand start_address = 1032: must be a multiple of 16"),
    (lambda: descriptor(1 << 18, lbo=16, sbo=1024), r"operand start_address = 262144: must be in 0..262128"),
    (lambda: descriptor(0, lbo=-16, sbo=1024), "operand lbo = -16: must be in 0..262128"),
    (lambda: descriptor(0, lbo=16, sbo=1000), "operand sbo = 1000: must be a multiple of 16 bytes"),
    (lambda: descriptor(0, lbo=16, sbo=1024, base_offset=8), "operand base_offset = 8: must be in 0..7"),
    (lambda: descriptor(0, lbo=16, sbo=1024, swizzle=3), "operand swizzle = 3: must be one of none, 128B, 64B, 32B"),
    (lambda: descriptor(0, lbo=16, sbo=1024, swizzle="256B"), "operand swizzle = '256B'"),
    (lambda: encode_field("lbo", 16.0), "operand lbo = 16.0: must be an integer byte offset"),
])
def test_descriptor_refusals(build, message):
    with pytest.raises(PTXBuildError, match="wgmma descriptor: " + message):
        build()


# ---- refusals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("build, error, message", [
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=12), PTXBuildError,
     "wgmma.mma_async: operand n = 12: N must be 8..256 in steps of 8"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=264), PTXBuildError, "operand n = 264"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=0), PTXBuildError, "operand n = 0"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=16), PTXRangeError,
     r"wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16: operand d = .*needs exactly 8 "
     r"registers of .f32, got 4"),
    (lambda k, d, a, b: wgmma.mma_async(k, [k.var("u32") for _ in range(4)], a, b, n=8),
     PTXTypeError, r"operand d\[0\] = %u0 \(.u32\): a .u32 register cannot be used as .f32"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, ab_type="f16", acc_type="f16"),
     PTXRangeError,
     "needs exactly 2 registers of .f16x2, got 4"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, acc_type="bf16"), PTXBuildError,
     "operand acc_type = 'bf16': must be one of 'f32'"),
    (lambda k, d, a, b: wgmma.mma_async(k, d[:2], a, b, n=8, ab_type="tf32", acc_type="f16"),
     PTXBuildError, r"m64n8k8.f16.tf32.tf32: operand acc_type = 'f16': must be one of 'f32'"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, ab_type="s8"), PTXBuildError,
     "wgmma.mma_async: operand ab_type = 's8': must be one of 'f16', 'bf16', 'tf32', 'e4m3'"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, ab_type="f16", b_type="bf16"),
     PTXTypeError, r"operand b_type = 'bf16': A and B types must match \(only e4m3/e5m2 mix\)"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, scale_d=2), PTXRangeError,
     "operand scale_d = 2: must be one of 0, 1"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, scale_d=k.reg("u32")), PTXTypeError,
     r"operand scale_d = %u0 \(.u32\): a .u32 register cannot be used as .pred"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, scale_a=0), PTXRangeError,
     "operand scale_a = 0: must be one of 1, -1"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, scale_b=2), PTXRangeError,
     "operand scale_b = 2: must be one of 1, -1"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, trans_b=2), PTXRangeError,
     "operand trans_b = 2: must be one of 0, 1"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, trans_a=True), PTXTypeError,
     "operand trans_a = True: must be an integer constant"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, [k.reg("b32")] * 4, b, n=8, trans_a=1),
     PTXBuildError, r"operand trans_a = 1: A from registers is always K-major \(the RS form has "
                    "no imm-trans-a\\)"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, ab_type="e4m3", trans_b=1),
     PTXBuildError, r"m64n8k32.f32.e4m3.e4m3: operand trans_b = 1: .e4m3 wgmma has no transpose"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, b, n=8, ab_type="tf32", trans_a=1),
     PTXBuildError, ".tf32 wgmma has no transpose"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, [k.reg("b32")] * 3, b, n=8), PTXRangeError,
     "operand a = .*needs exactly 4 registers of .b32, got 3"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, [k.reg("f32")] * 4, b, n=8, ab_type="tf32"),
     PTXTypeError, r"operand a\[0\] = %f4 \(.f32\): A from registers takes .b32 registers"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, [k.reg("u32")] * 4, b, n=8, ab_type="e5m2"),
     PTXTypeError, r"operand a\[0\] = %u0 \(.u32\): A from registers takes .b32 registers"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, [k.reg("f16x2")] * 4, b, n=8), PTXTypeError,
     r"operand a\[0\] = %hh0 \(.f16x2\): A from registers takes .b32, .bf16x2 registers"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, [k.reg("b64")] * 4, b, n=8), PTXTypeError,
     r"operand a\[0\] = %rd2 \(.b64\): a .b64 register cannot be used as .b32"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, k.reg("u32"), b, n=8), PTXTypeError,
     r"operand a = %u0 \(.u32\): a .u32 register cannot be used as .b64"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, -1, n=8), PTXBuildError,
     "operand b = -1: a matrix descriptor is a 64-bit value"),
    (lambda k, d, a, b: wgmma.mma_async(k, d, a, 1.5, n=8), PTXTypeError,
     "operand b = 1.5: must be a register of type .b64"),
    (lambda k, d, a, b: wgmma.wait_group(k, 8), PTXRangeError,
     "wgmma.wait_group.sync.aligned: operand n = 8: must be in 0..7"),
    (lambda k, d, a, b: wgmma.wait_group(k, k.reg("u32")), PTXTypeError,
     "operand n = %u0 .*must be an integer constant"),
    (lambda k, d, a, b: make_descriptor(k, 1024, lbo=16, sbo=1024), PTXTypeError,
     r"wgmma descriptor: operand start_address = 1024: a runtime start address is a 32-bit "
     r"shared::cta offset register \(use descriptor\(\) for a constant address\)"),
    (lambda k, d, a, b: make_descriptor(k, b, lbo=16, sbo=1024), PTXTypeError,
     "operand start_address = %rd1"),
    (lambda k, d, a, b: advance_descriptor(k, b, 24), PTXRangeError,
     "operand byte_offset = 24: must be a multiple of 16 bytes"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    d = accumulators(k, 4)
    with pytest.raises(error, match=message) as info:
        build(k, d, k.reg("b64"), k.reg("b64"))
    assert "test_isa_wgmma.py" in str(info.value)


def test_accumulating_into_ssa_registers_twice_is_refused():
    from layoutkit.ptx.builder import PTXSSAError
    m, k = kernel()
    d = k.regs("f32", 4)
    wgmma.mma_async(k, d, k.reg("b64"), k.reg("b64"), n=8, scale_d=0)
    with pytest.raises(PTXSSAError, match="already written"):
        wgmma.mma_async(k, d, k.reg("b64"), k.reg("b64"), n=8)
