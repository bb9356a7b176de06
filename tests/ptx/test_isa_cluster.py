"""isa.cluster and isa.dsmem: elect.sync, cluster barriers, mapa/getctarank, cluster special
registers, DSMEM ld/st and st.async/red.async: golden text, ptxas acceptance, refusals."""
from __future__ import annotations

import pytest

from layoutkit.ptx.builder import (Address, Module, PTXBuildError, PTXRangeError, PTXTargetError,
                                   PTXTypeError)
from layoutkit.ptx.isa import cluster, control, dsmem, special
from tests.ptx.ptxas_helper import assemble, requires_ptxas

CLUSTER_REGISTERS = ("cluster_ctarank", "cluster_nctarank", "cluster_ctaid.x", "cluster_ctaid.y",
                     "cluster_ctaid.z", "cluster_nctaid.x", "clusterid.x", "clusterid.z",
                     "nclusterid.x", "nclusterid.y", "is_explicit_cluster")


def kernel(**directives):
    m = Module(line_info=False)
    return m, m.kernel("k", reqnctapercluster=2, **directives)


def test_golden_dsmem_exchange():
    m, k = kernel()
    slot = m.shared("slot", 16)
    rank = special.sreg(k, "cluster_ctarank")
    elected = cluster.elect_sync(k)
    lane, leader = cluster.elect_sync(k, 0x0000FFFF, lane=True)
    cluster.barrier_cluster_arrive(k, sem="release")
    cluster.barrier_cluster_wait(k, acquire=True)
    peer = cluster.mapa(k, slot, rank)
    value = dsmem.ld_shared_cluster(k, peer, "u32")
    dsmem.st_shared_cluster(k, Address(peer, 4), value, pred=elected)
    cluster.getctarank(k, peer)
    cluster.barrier_cluster_arrive(k, sem="relaxed", aligned=False)
    cluster.barrier_cluster_wait(k, aligned=False)
    assert k.body_lines() == [
        "    mov.u32 %u0, %cluster_ctarank;",
        "    elect.sync _|%p0, 0xFFFFFFFF;",
        "    elect.sync %u1|%p1, 65535;",
        "    barrier.cluster.arrive.release.aligned;",
        "    barrier.cluster.wait.acquire.aligned;",
        "    mapa.shared::cluster.u32 %u2, slot, %u0;",
        "    ld.shared::cluster.u32 %u3, [%u2];",
        "    @%p0 st.shared::cluster.u32 [%u2+4], %u3;",
        "    getctarank.shared::cluster.u32 %u4, %u2;",
        "    barrier.cluster.arrive.relaxed;",
        "    barrier.cluster.wait;",
    ]
    assert m.version == (8, 0)


@requires_ptxas
def test_every_form_assembles():
    m, k = kernel()
    slot = m.shared("slot", 64)
    bar = m.shared("bar", 8, align=8)
    for name in CLUSTER_REGISTERS:
        special.sreg(k, name)
    rank, mask = k.reg("u32"), k.reg("b32")
    k.emit("mov.u32", (rank, 1), defs=(rank,))
    k.emit("mov.b32", (mask, 0xFFFFFFFF), defs=(mask,))
    cluster.elect_sync(k)
    cluster.elect_sync(k, mask, lane=True)
    cluster.elect_sync(k, out=k.reg("u32"))
    for sem in (None, "release", "relaxed"):
        for aligned in (True, False):
            cluster.barrier_cluster_arrive(k, sem=sem, aligned=aligned)
            cluster.barrier_cluster_wait(k, acquire=sem is not None, aligned=aligned)
    local = k.reg("u32")
    k.emit("mov.u32", (local, slot), defs=(local,))
    generic = k.reg("u64")
    k.emit("cvta.shared.u64", (generic, slot), defs=(generic,))
    peer = cluster.mapa(k, local, rank)
    peer_sym = cluster.mapa(k, slot, 0)
    peer_wide = cluster.mapa(k, generic, 15)        # a 64-bit shared::cluster mapping
    peer_generic = cluster.mapa(k, generic, rank, space="generic")
    cluster.getctarank(k, peer)
    cluster.getctarank(k, slot)
    cluster.getctarank(k, peer_wide)
    cluster.getctarank(k, peer_generic, space="generic")
    for dtype, vec in (("u32", 1), ("f32", 4), ("b64", 2), ("bf16x2", 2), ("u8", 1)):
        values = dsmem.ld_shared_cluster(k, peer, dtype, vec=vec)
        dsmem.st_shared_cluster(k, peer_sym, values)
    dsmem.ld_shared_cluster(k, peer_wide, "s32")
    peer_bar = cluster.mapa(k, bar, rank)
    for dtype in dsmem.ST_ASYNC_TYPES:
        values = dsmem.ld_shared_cluster(k, local, dtype, vec=2)
        dsmem.st_async(k, peer, values[0], peer_bar)
        dsmem.st_async(k, peer, values, peer_bar)
        if dtype in ("b32", "u32", "s32", "f32"):
            dsmem.st_async(k, peer, values + values, peer_bar)
    for op, dtypes in dsmem.RED_ASYNC_TYPES.items():
        for dtype in dtypes:
            dsmem.red_async(k, op, Address(peer, 8), 1, peer_bar, dtype=dtype)
    dsmem.red_async(k, "add", peer, rank, peer_bar)
    control.ret(k)
    assert m.version == (8, 1)       # st.async / red.async
    assemble(m.text())


def test_cluster_forms_need_sm90():
    m = Module(target="sm_80")
    k = m.kernel("k")
    with pytest.raises(PTXTargetError, match="elect.sync: needs sm_90 or newer"):
        cluster.elect_sync(k)
    with pytest.raises(PTXTargetError, match="mapa.shared::cluster.u32: needs sm_90"):
        cluster.mapa(k, k.reg("u32"), 0)
    with pytest.raises(PTXTargetError, match="barrier.cluster.wait.aligned: needs sm_90"):
        cluster.barrier_cluster_wait(k)
    with pytest.raises(PTXTargetError, match="mov.pred: needs sm_90"):
        special.sreg(k, "is_explicit_cluster")


@pytest.mark.parametrize("build, error, message", [
    (lambda k: cluster.elect_sync(k, 0), PTXRangeError,
     r"elect.sync: operand membermask = 0: must be in 1..4294967295 \(a nonzero lane mask\)"),
    (lambda k: cluster.elect_sync(k, k.reg("u64")), PTXTypeError,
     r"operand membermask = %ud0 \(.u64\): a .u64 register cannot be used as .u32"),
    (lambda k: cluster.elect_sync(k, out=k.reg("pred")), PTXTypeError,
     "operand lane = %p0 .*cannot"),
    (lambda k: cluster.elect_sync(k, lane="yes"), PTXTypeError, "operand lane = 'yes': must be True or False"),
    (lambda k: cluster.barrier_cluster_arrive(k, sem="acquire"), PTXBuildError,
     "barrier.cluster.arrive: operand sem = 'acquire': must be one of 'release', 'relaxed'"),
    (lambda k: cluster.barrier_cluster_wait(k, acquire="yes"), PTXTypeError,
     "barrier.cluster.wait: operand acquire = 'yes': must be True or False"),
    (lambda k: cluster.mapa(k, k.reg("u32"), 16), PTXRangeError,
     r"mapa.shared::cluster.u32: operand rank = 16: must be in 0..15 \(a cluster has at most 16 CTAs\)"),
    (lambda k: cluster.mapa(k, k.reg("u32"), k.reg("f32")), PTXTypeError,
     r"operand rank = %f0 \(.f32\): a .f32 register cannot be used as .u32"),
    (lambda k: cluster.mapa(k, k.reg("u32"), 0, space="generic"), PTXTypeError,
     r"mapa: operand a = %u0 \(.u32\): a generic address is 64-bit"),
    (lambda k: cluster.mapa(k, k.reg("f32"), 0), PTXTypeError,
     "operand a = %f0 .*the address is a 32- or 64-bit integer register or a shared Symbol"),
    (lambda k: cluster.mapa(k, k.param("p", "u64").symbol, 0), PTXTypeError,
     "a symbol operand must be a shared variable"),
    (lambda k: cluster.mapa(k, k.reg("u32"), 0, space="global"), PTXBuildError,
     "mapa: operand space = 'global': must be one of 'shared::cluster', 'generic'"),
    (lambda k: cluster.getctarank(k, k.reg("u32"), space="generic"), PTXTypeError,
     "getctarank: operand a = %u0 .*a generic address is 64-bit"),
    (lambda k: dsmem.ld_shared_cluster(k, k.reg("u32"), "f64", vec=4), PTXBuildError,
     "a vector access moves at most 16 bytes; 4 x .f64 is 32"),
    (lambda k: dsmem.ld_shared_cluster(k, k.reg("f32"), "u32"), PTXTypeError,
     "ld.shared::cluster.u32: operand address = %f0"),
    (lambda k: dsmem.st_shared_cluster(k, k.reg("u32"), 5), PTXTypeError,
     "st.shared::cluster: operand values = 5: the type cannot be inferred"),
    (lambda k: dsmem.st_async(k, k.reg("u32"), k.reg("u16"), k.reg("u32")), PTXBuildError,
     "st.async: operand type = 'u16': must be one of 'b32', 'b64'"),
    (lambda k: dsmem.st_async(k, k.reg("u32"), [k.reg("u64")] * 4, k.reg("u32")), PTXTypeError,
     "st.async: operand values = 'u64': st.async.v4 stores 32-bit types only"),
    (lambda k: dsmem.st_async(k, k.reg("u32"), k.reg("u32"), k.reg("f32")), PTXTypeError,
     "operand bar = %f0"),
    (lambda k: dsmem.red_async(k, "mul", k.reg("u32"), 1, k.reg("u32"), dtype="u32"),
     PTXBuildError, "red.async: operand op = 'mul': must be one of 'inc', 'dec'"),
    (lambda k: dsmem.red_async(k, "inc", k.reg("u32"), 1, k.reg("u32"), dtype="s32"),
     PTXBuildError, "red.async: operand type = 's32': must be one of 'u32'"),
    (lambda k: dsmem.red_async(k, "and", k.reg("u32"), k.reg("b64"), k.reg("u32")),
     PTXBuildError, "red.async: operand type = 'b64': must be one of 'b32'"),
    (lambda k: dsmem.red_async(k, "add", k.reg("u32"), [k.reg("u32")] * 2, k.reg("u32")),
     PTXTypeError, "red.async takes one value"),
    (lambda k: dsmem.red_async(k, "add", k.reg("u32"), 1 << 40, k.reg("u32"), dtype="u32"),
     PTXRangeError, "operand value = 1099511627776: does not fit .u32"),
])
def test_refusals(build, error, message):
    m, k = kernel()
    with pytest.raises(error, match=message) as info:
        build(k)
    assert "test_isa_cluster.py" in str(info.value)
