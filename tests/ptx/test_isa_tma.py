"""isa.tma and isa.proxy_fence: golden text, ptxas acceptance of every form, versions, refusals."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import (Address, Module, PTXBuildError, PTXRangeError, PTXTargetError,
                                   PTXTypeError)
from layoutkit.ptx.isa import control, memory, tma
from layoutkit.ptx.isa.proxy_fence import fence_proxy_async, fence_proxy_tensormap
from tests.ptx.ptxas_helper import assemble, requires_ptxas, written, written_regs


def setup(**directives):
    """A kernel with a tensor-map param (generic address %rd0), a 1024-aligned smem tile and
    a barrier (both 32-bit shared offsets)."""
    m = Module(line_info=False)
    k = m.kernel("k", **directives)
    tmap = memory.cvta_param(k, k.tensormap_param("tmap"))
    smem = m.extern_shared("smem")
    tile, bar = k.reg("u32"), k.reg("u32")
    k.emit("mov.u32", (tile, smem), defs=(tile,))
    k.emit("mov.u32", (bar, m.shared("bar", 8, align=8)), defs=(bar,))
    return m, k, tmap, tile, bar


def test_golden_load_store_reduce():
    m, k, tmap, tile, bar = setup()
    x, y = k.reg("s32"), k.reg("s32")
    policy = tma.create_policy(k, "evict_first", 0.5, secondary="evict_unchanged")
    tma.prefetch_tensormap(k, tmap)
    tma.load(k, tile, tmap, (x, y), bar)
    tma.load(k, Address(tile, 8192), tmap, (x, y, 0), bar, multicast=0b11, cache_policy=policy)
    fence_proxy_async(k, "shared::cta")
    tma.store(k, tmap, (x, y), tile)
    tma.reduce(k, "max", tmap, (x,), tile, dtype="f16", cache_policy=policy)
    tma.commit_group(k)
    tma.wait_group(k, 0, read=True)
    tma.wait_group(k, 1)
    tma.prefetch(k, tmap, (x, y, 1, 2, 3))
    tma.bulk_copy(k, tile, k.reg("u64"), 4096, bar=bar)
    assert k.body_lines()[3:] == [
        "    createpolicy.fractional.L2::evict_first.L2::evict_unchanged.b64 %rd1, 0f3F000000;",
        "    prefetch.tensormap [%rd0];",
        "    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%u0], [%rd0, {%s0, %s1}], [%u1];",
        "    cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster.L2::cache_hint [%u0+8192], [%rd0, {%s0, %s1, 0}], [%u1], 3, %rd1;",
        "    fence.proxy.async.shared::cta;",
        "    cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd0, {%s0, %s1}], [%u0];",
        "    cp.reduce.async.bulk.tensor.1d.global.shared::cta.max.tile.bulk_group.L2::cache_hint "
        "[%rd0, {%s0}], [%u0], %rd1;",
        "    cp.async.bulk.commit_group;",
        "    cp.async.bulk.wait_group.read 0;",
        "    cp.async.bulk.wait_group 1;",
        "    cp.async.bulk.prefetch.tensor.5d.L2.global.tile [%rd0, {%s0, %s1, 1, 2, 3}];",
        "    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%u0], [%ud0], 4096, [%u1];",
    ]
    assert m.version == (8, 0)


@requires_ptxas
def test_every_form_assembles():
    m, k, tmap, tile, bar = setup(reqnctapercluster=2)
    coord, mask, size = written(k, "u32"), written(k, "u16"), written(k, "u32")
    gptr, frac = written(k, "u64"), written(k, "f32")
    policies = [tma.create_policy(k, p) for p in tma.EVICTION]
    policies.append(tma.create_policy(k, "evict_normal", frac, secondary="evict_first"))
    policy = policies[-1]
    tma.prefetch_tensormap(k, tmap)
    for n in range(1, 6):
        coords = tuple(coord if i % 2 else -i for i in range(n))
        tma.load(k, tile, tmap, coords, bar)
        tma.load(k, tile, tmap, coords, bar, multicast=mask, cache_policy=policy)
        tma.load(k, tile, tmap, coords, bar, multicast=0xFFFF)
        tma.store(k, tmap, coords, tile)
        tma.store(k, tmap, coords, tile, cache_policy=policy)
        tma.prefetch(k, tmap, coords)
        tma.prefetch(k, tmap, coords, cache_policy=policy)
        for op, dtypes in tma.REDUCE_TYPES.items():
            tma.reduce(k, op, tmap, coords, tile, dtype=dtypes[0],
                       cache_policy=policy if n == 2 else None)
    tma.bulk_copy(k, tile, gptr, size, bar=bar)
    tma.bulk_copy(k, tile, gptr, 16, bar=bar, multicast=mask, cache_policy=policy)
    tma.bulk_copy(k, tile, Address(tile, 4096), 1024, bar=bar, kind="shared_to_cluster")
    tma.bulk_copy(k, gptr, tile, 64, kind="shared_to_global", cache_policy=policy)
    for space in (None,) + tuple(("global", "shared::cta", "shared::cluster")):
        fence_proxy_async(k, space)
    tma.commit_group(k)
    tma.wait_group(k, 3, read=True)
    tma.wait_group(k)
    control.ret(k)
    assert m.version == (8, 0)
    assemble(m.text())


@requires_ptxas
def test_versioned_forms():
    m, k, tmap, tile, bar = setup()
    tma.load(k, tile, tmap, (0, 0), bar, dst_space="cta")
    assert m.version == (8, 6)
    assert "cp.async.bulk.tensor.2d.shared::cta.global.tile" in k.body_lines()[-1]
    fence_proxy_tensormap(k, "release", "gpu")
    fence_proxy_tensormap(k, "acquire", "cta", tmap)
    assert k.body_lines()[-1] == "    fence.proxy.tensormap::generic.acquire.cta [%rd0], 128;"
    control.ret(k)
    assemble(m.text())
    fixed = Module(line_info=False, version="8.0")
    kf = fixed.kernel("k")
    with pytest.raises(PTXTargetError, match="fence.proxy.tensormap::generic.release.gpu: needs "
                                             "PTX ISA 8.3 but the module fixes .version 8.0"):
        fence_proxy_tensormap(kf, "release")
    with pytest.raises(PTXTargetError, match="needs sm_90 or newer"):
        tma.commit_group(Module(target="sm_80").kernel("k"))


@pytest.mark.parametrize("build, error, message", [
    (lambda k, t, s, b: tma.load(k, s, t, (), b), PTXRangeError,
     r"cp.async.bulk.tensor: operand coords = \(\): a tensor copy has 1..5 coordinates"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,) * 6, b), PTXRangeError, "has 1..5 coordinates"),
    (lambda k, t, s, b: tma.load(k, s, t, (k.reg("f32"), 0), b), PTXTypeError,
     r"operand coords\[0\] = %f0 \(.f32\): a .f32 register cannot be used as .s32"),
    (lambda k, t, s, b: tma.load(k, s, t, (0, 1 << 32), b), PTXRangeError,
     r"operand coords\[1\] = 4294967296: does not fit .s32"),
    (lambda k, t, s, b: tma.load(k, s, k.tensormap_param("tm2"), (0,), b), PTXTypeError,
     r"operand tensormap = 'tm2': pass the tensor map's generic address \(cvta_param"),
    (lambda k, t, s, b: tma.load(k, s, s, (0,), b), PTXTypeError,
     r"operand tensormap = %u0 \(.u32\): an address register is a 64-bit integer register"),
    (lambda k, t, s, b: tma.load(k, s, Address(t, 8), (0,), b), PTXBuildError,
     "a tensor map operand takes no offset"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,), b, multicast=k.reg("u32")), PTXTypeError,
     r"operand multicast = %u2 \(.u32\): a .u32 register cannot be used as .b16"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,), b, multicast=0), PTXRangeError,
     "operand multicast = 0: must be in 1..65535"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,), b, multicast=1 << 16), PTXRangeError,
     "operand multicast = 65536"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,), b, multicast=3, dst_space="cta"), PTXBuildError,
     "multicast needs the .shared::cluster destination"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,), b, cache_policy=k.reg("u32")), PTXTypeError,
     r"operand cache_policy = %u2 \(.u32\): a .u32 register cannot be used as .b64"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,), k.reg("f32")), PTXTypeError,
     r"operand bar = %f0 \(.f32\): an address register is a 32-bit/64-bit integer register"),
    (lambda k, t, s, b: tma.load(k, s, t, (0,), k.param("n", "u32").symbol), PTXTypeError,
     "a .param symbol is not a shared-memory address"),
    (lambda k, t, s, b: tma.store(k, t, (0,) * 7, s), PTXRangeError, "has 1..5 coordinates"),
    (lambda k, t, s, b: tma.reduce(k, "mul", t, (0,), s, dtype="f32"), PTXBuildError,
     "cp.reduce.async.bulk.tensor: operand op = 'mul': must be one of 'add', 'min'"),
    (lambda k, t, s, b: tma.reduce(k, "add", t, (0,), s, dtype="f64"), PTXTypeError,
     r"cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group: operand dtype = "
     r"'f64': .add reduces tensors of .u32, .s32, .u64, .f32, .f16, .bf16 only"),
    (lambda k, t, s, b: tma.reduce(k, "max", t, (0,), s, dtype="f32"), PTXTypeError,
     ".max reduces tensors of"),
    (lambda k, t, s, b: tma.reduce(k, "inc", t, (0,), s, dtype="s32"), PTXTypeError,
     ".inc reduces tensors of .u32 only"),
    (lambda k, t, s, b: tma.reduce(k, "xor", t, (0,), s, dtype="f32"), PTXTypeError,
     ".xor reduces tensors of"),
    (lambda k, t, s, b: tma.bulk_copy(k, s, k.reg("u64"), 24, bar=b), PTXRangeError,
     r"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes: operand size = 24: "
     r"must be a multiple of 16 \(bulk copies move 16-byte multiples\)"),
    (lambda k, t, s, b: tma.bulk_copy(k, s, k.reg("u64"), 0, bar=b), PTXRangeError,
     "operand size = 0: must be in 16.."),
    (lambda k, t, s, b: tma.bulk_copy(k, s, k.reg("u64"), 16), PTXBuildError,
     "cp.async.bulk: operand bar = None: global_to_shared and shared_to_cluster complete on an mbarrier"),
    (lambda k, t, s, b: tma.bulk_copy(k, t, s, 16, bar=b, kind="shared_to_global"), PTXBuildError,
     "shared_to_global completes through bulk groups"),
    (lambda k, t, s, b: tma.bulk_copy(k, s, s, 16, bar=b, kind="shared_to_cluster", multicast=3),
     PTXBuildError, "multicast exists only for global_to_shared"),
    (lambda k, t, s, b: tma.bulk_copy(k, s, s, 16, bar=b, kind="shared_to_cluster",
                                      cache_policy=k.reg("b64")),
     PTXBuildError, "an L2 hint applies to copies that touch global memory"),
    (lambda k, t, s, b: tma.bulk_copy(k, s, t, 16, kind="global_to_global"), PTXBuildError,
     "operand kind = 'global_to_global': must be one of"),
    (lambda k, t, s, b: tma.wait_group(k, -1), PTXRangeError,
     "cp.async.bulk.wait_group: operand n = -1: must be in 0.."),
    (lambda k, t, s, b: tma.wait_group(k, k.reg("u32"), read=True), PTXTypeError,
     "cp.async.bulk.wait_group.read: operand n = %u2 .*must be an integer constant"),
    (lambda k, t, s, b: tma.create_policy(k, "evict_later"), PTXBuildError,
     "createpolicy: operand primary = 'evict_later': must be one of"),
    (lambda k, t, s, b: tma.create_policy(k, secondary="evict_last"), PTXBuildError,
     "operand secondary = 'evict_last': must be one of 'evict_first', 'evict_unchanged'"),
    (lambda k, t, s, b: tma.create_policy(k, fraction=0.0), PTXRangeError,
     r"createpolicy.fractional.L2::evict_last.b64: operand fraction = 0.0: must be in \(0, 1\]"),
    (lambda k, t, s, b: tma.create_policy(k, fraction=1.5), PTXRangeError, "operand fraction = 1.5"),
    (lambda k, t, s, b: tma.prefetch_tensormap(k, s), PTXTypeError,
     "prefetch.tensormap: operand tensormap = %u0"),
    (lambda k, t, s, b: fence_proxy_async(k, "local"), PTXBuildError,
     "fence.proxy.async: operand space = 'local': must be one of 'global', 'shared::cta'"),
    (lambda k, t, s, b: fence_proxy_tensormap(k, "acquire"), PTXBuildError,
     "the acquire form names the tensor map address"),
    (lambda k, t, s, b: fence_proxy_tensormap(k, "release", "gpu", t), PTXBuildError,
     "the release form takes none"),
    (lambda k, t, s, b: fence_proxy_tensormap(k, "acq_rel"), PTXBuildError,
     "operand sem = 'acq_rel'"),
])
def test_refusals(build, error, message):
    m, k, tmap, tile, bar = setup()
    with pytest.raises(error, match=message) as info:
        build(k, tmap, tile, bar)
    assert "test_isa_tma.py" in str(info.value)
