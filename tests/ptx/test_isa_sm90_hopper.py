"""The Hopper families through the flat `isa.sm90` namespace: a warp-specialized TMA -> wgmma
kernel skeleton (hopper-ptx.md §12 shape) built only from `I.*` names, assembled by ptxas."""
from __future__ import annotations

from layoutkit.ptx.builder import Address, Module
from layoutkit.ptx.isa import sm80
from layoutkit.ptx.isa import sm90 as I
from tests.ptx.ptxas_helper import assemble, requires_ptxas

HOPPER_NAMES = {"mbarrier_init", "mbarrier_wait_parity_bounded", "tma_load", "bulk_wait_group",
                "wgmma_mma_async", "wgmma_descriptor", "setmaxnreg", "bar_sync", "elect_sync",
                "mapa", "st_async", "fence_proxy_async"}


def test_hopper_names_are_sm90_only():
    assert HOPPER_NAMES <= set(I.__all__)
    assert not HOPPER_NAMES & set(sm80.__all__)


@requires_ptxas
def test_producer_consumer_skeleton_assembles():
    m = Module(line_info=False)
    k = m.kernel("gemm_tile", maxntid=256, maxnreg=168)   # cap 168: dec 40 + inc 232 fits
    tmap = I.cvta_param(k, k.tensormap_param("tmap_a"))
    smem = m.extern_shared("smem")
    base, bars = k.reg("u32"), k.reg("u32")
    k.emit("mov.u32", (base, smem), defs=(base,))
    k.emit("mov.u32", (bars, m.shared("bars", 16, align=8)), defs=(bars,))
    full, empty = bars, Address(bars, 8)
    tid = I.sreg(k, "tid.x")
    first = I.setp(k, "eq", tid, 0)
    I.mbarrier_init(k, full, 1, pred=first)
    I.mbarrier_init(k, empty, 128, pred=first)
    I.fence_mbarrier_init(k, pred=first)
    I.bar_sync(k, 0)
    consumer, done, hang = k.label("consumer"), k.label("done"), k.label("hang")
    I.bra(k, consumer, pred=I.setp(k, "ge", tid, 128))
    # producer warpgroup
    I.setmaxnreg(k, "dec", 40)
    I.mbarrier_wait_parity(k, empty, 1)
    leader = I.elect_sync(k)
    I.mbarrier_arrive_expect_tx(k, full, 16384, pred=leader)
    I.prefetch_tensormap(k, tmap, pred=leader)
    I.tma_load(k, base, tmap, (0, 0), full, pred=leader)
    I.bra(k, done, uni=True)
    # consumer warpgroup
    k.place(consumer)
    I.setmaxnreg(k, "inc", 232)
    I.mbarrier_wait_parity_bounded(k, full, 0, timeout_ns=1_000_000_000, on_timeout=hang)
    acc = [k.var("f32") for _ in range(32)]
    desc_a = I.wgmma_make_descriptor(k, base, lbo=16, sbo=1024, swizzle="128B")
    desc_b = I.wgmma_advance_descriptor(k, desc_a, 8192)
    I.wgmma_fence(k)
    for step in range(4):
        a = desc_a if step == 0 else I.wgmma_advance_descriptor(k, desc_a, 32 * step)
        b = desc_b if step == 0 else I.wgmma_advance_descriptor(k, desc_b, 32 * step)
        I.wgmma_mma_async(k, acc, a, b, n=64, scale_d=int(step > 0))
    I.wgmma_commit_group(k)
    I.wgmma_wait_group(k, 0)
    I.mbarrier_arrive(k, empty)
    out = I.cvta(k, "global", I.ld_param(k, k.pointer_param("out")))
    I.st(k, "global", out, acc[0])
    k.place(done)
    I.ret(k)
    k.place(hang)
    I.trap(k)
    assert m.version == (8, 0)
    assemble(m.text())
