"""The PTX of warp roles (setmaxnreg per role), elect_one, named barriers, warp indices and
clusters; assembled for sm_90a with no ignored setmaxnreg (C7508) and no spills."""
import re
import warnings

import sympy

import layoutkit.dsl as lk

from . import sync_kernels as K

PTR = lk.Pointer[lk.f32]


def kernel(body, num_warps=12, **options):
    def fn(x: PTR, n: lk.i32):
        body()
    return lk.Kernel(fn, num_warps, **options)


def lines(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if not line.strip().startswith(".loc")]


def test_roles_branch_on_the_uniform_warpgroup_and_set_registers():
    ptx = K.ring_pingpong.ptx(lk.Pointer[lk.i32], 10)
    assert ".reqntid 384, 1, 1\n.minnctapersm 1" in ptx
    assert re.search(r"shr\.u32 (%u\d+), %u\d+, 5;\s*\n\s*shfl\.sync\.idx\.b32 (%u\d+), \1, 0, "
                     r"31, 0xFFFFFFFF;\s*\n\s*shr\.u32 (%u\d+), \2, 2;\s*\n\s*"
                     r"setp\.lt\.u32 (%p\d+), \3, 1;\s*\n\s*@!\4 bra\.uni \$role_producer_end_\d+;"
                     r"\s*\n\s*setmaxnreg\.dec\.sync\.aligned\.u32 24;", ptx)
    assert re.search(r"sub\.u32 (%u\d+), %u\d+, 1;\s*\n\s*setp\.lt\.u32 (%p\d+), \1, 2;\s*\n\s*"
                     r"@!\2 bra\.uni \$role_consumer_end_\d+;\s*\n\s*"
                     r"setmaxnreg\.inc\.sync\.aligned\.u32 240;", ptx)
    usage = K.ring_pingpong.resources(lk.Pointer[lk.i32], 10)
    assert usage.registers == 168 and not usage.setmaxnreg_ignored


def test_role_at_the_entry_cap_emits_no_setmaxnreg():
    def body():
        with lk.sm90.warp_role("a", warpgroups=0, registers=None):
            pass
        with lk.sm90.warp_role("b", warpgroups=(1,), registers=248):
            pass
    # 2 warpgroups: entry cap 255 -> 248 is a dec; role a keeps the cap
    ptx = kernel(body, num_warps=8).ptx(PTR, 8)
    assert ptx.count("setmaxnreg") == 1 and "setmaxnreg.dec.sync.aligned.u32 248;" in ptx
    ir = kernel(body, num_warps=8).ir(PTR, 8)
    roles = [op.attrs for op in ir.body.ops if op.name == "warp_role"]
    assert [(r["role"], r["setmaxnreg"], r["entry_registers"]) for r in roles] == \
        [("a", None, 255), ("b", "dec", 255)]


def test_elect_one_and_named_barriers():
    def body():
        with lk.sm90.warp_role("producer", warpgroups=(0,), registers=40):
            with lk.if_(sympy.Eq(lk.sm90.warp_id_in_warpgroup(), 0)):
                with lk.sm90.elect_one():
                    lk.sm90.fence_proxy_async()
                lk.sm90.named_barrier_arrive(2, 288)        # this warp + 256 consumers = 288
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=232):
            lk.sm90.named_barrier_sync(2, 288)
            lk.sm90.named_barrier_sync(3, 256)
    k = kernel(body)
    ptx = lines(k.ptx(PTR, 8))
    at = ptx.index("elect.sync _|%p2, 0xFFFFFFFF;")
    assert ptx[at + 1:at + 4] == ["@!%p2 bra $elect_end_2;", "fence.proxy.async.shared::cta;",
                                  "$elect_end_2:"]
    assert "bar.arrive 2, 288;" in ptx and "bar.sync 2, 288;" in ptx and "bar.sync 3, 256;" in ptx
    usage = k.resources(PTR, 8)
    assert usage.barriers == 4 and not usage.setmaxnreg_ignored   # ids 0..3 reserved


def test_warp_index_helpers_are_warp_uniform_integers():
    def body():
        tid = lk.thread_id()
        assert lk.warp_id() == sympy.floor(tid / 32)
        assert lk.sm90.warpgroup_id() == sympy.floor(tid / 128)
        assert lk.lane_id() == sympy.Mod(tid, 32)
        assert lk.sm90.thread_id_in_warpgroup() == sympy.Mod(tid, 128)
        assert lk.sm90.warp_id_in_warpgroup() == sympy.Mod(sympy.floor(tid / 32), 4)
    kernel(body).ptx(PTR, 8)


def test_cluster_kernel_directives_special_registers_and_barrier():
    def body():
        assert lk.sm90.cluster_shape() == (2, 2, 1) and lk.sm90.cluster_size() == 4
        rank = lk.sm90.block_rank_in_cluster()
        assert lk.sm90.block_rank_in_cluster() is rank           # one symbol per register
        lk.sm90.cluster_sync()
        for axis in range(3):
            lk.cast(lk.sm90.block_id_in_cluster(axis) + lk.sm90.cluster_id(axis)
                    + lk.sm90.num_clusters(axis) + rank, lk.i32)
    k = kernel(body, num_warps=4, cluster=(2, 2))
    ptx = k.ptx(PTR, 8)
    assert ".reqntid 128, 1, 1\n.reqnctapercluster 2, 2, 1" in ptx
    assert "barrier.cluster.arrive.release.aligned;\n" in ptx
    assert "barrier.cluster.wait.acquire.aligned;\n" in ptx
    for reg in ("cluster_ctarank", "cluster_ctaid.x", "clusterid.z", "nclusterid.y"):
        assert f", %{reg};" in ptx
    assert k.key(PTR, 8)[-1] == ((2, 2, 1), False, "sm_90a")
    assert "cluster=(2, 2, 1)" in repr(k)
    k.resources(PTR, 8)


def test_cluster_is_part_of_the_key_and_the_launch():
    fn = K.cluster_ring.fn
    plain = lk.Kernel(fn, 4, debug=True)
    assert plain.key(lk.Pointer[lk.i32], 8)[-1] != K.cluster_ring.key(lk.Pointer[lk.i32], 8)[-1]
    spec = K.cluster_ring.specialize(lk.Pointer[lk.i32], 8)
    assert spec.cluster == (2, 1, 1)
    assert spec.compiled.signature.reqnctapercluster == (2, 1, 1)


def test_warp_specialized_skeleton_assembles_without_c7508_or_spills():
    """One producer warpgroup (an elected thread of its warp 0 arms full[s] with the bytes of
    two attached copies), two consumer warpgroups (wait full, sync on a named barrier, release
    empty) over a 4-stage ring of persistent tiles: ptxas reports no ignored setmaxnreg and no
    spills (a warning of either fails this test)."""
    from layoutkit.dsl.sm90.mbarrier import attach_copy

    def fn(x: PTR, tiles: lk.i32, k_tiles: lk.i32):
        full = lk.sm90.mbarrier_array(4, 1, name="full")
        empty = lk.sm90.mbarrier_array(4, 256, name="empty")
        with lk.if_(sympy.Eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full, empty)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        with lk.sm90.warp_role("producer", warpgroups=(0,), registers=24):
            with lk.if_(sympy.Eq(lk.sm90.warp_id_in_warpgroup(), 0)):
                for t in lk.range(0, tiles):
                    for k in lk.range(0, k_tiles):
                        p = lk.sm90.producer_state(t * k_tiles + k, 4)
                        lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                        with lk.sm90.elect_one(), lk.sm90.expect_tx(full[p.stage]) as slot:
                            attach_copy(slot, 128 * 64 * 2, "A tile")
                            attach_copy(slot, 256 * 64 * 2, "B tile")
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
            for t in lk.range(0, tiles):
                for k in lk.range(0, k_tiles):
                    c = lk.sm90.consumer_state(t * k_tiles + k, 4)
                    lk.sm90.mbarrier_wait(full[c.stage], c.phase)
                    lk.sm90.named_barrier_sync(1, 256)
                    lk.sm90.mbarrier_arrive(empty[c.stage])
    k = lk.Kernel(fn, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        usage = k.resources(PTR, 8, 6)
    assert not usage.setmaxnreg_ignored and usage.spill_store_bytes == 0
    assert "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%u" in k.ptx(PTR, 8, 6)
    assert ", 49152;" in k.ptx(PTR, 8, 6)                 # 16 KB + 32 KB per stage
