"""The PTX of warp roles (setmaxnreg per role), elect_one, named barriers, warp indices and
clusters; assembled for sm_90a with no ignored setmaxnreg (C7508) and no spills."""
import re

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
        with lk.warp_role("a", warpgroups=0, registers=None):
            pass
        with lk.warp_role("b", warpgroups=(1,), registers=248):
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
        with lk.warp_role("producer", warpgroups=(0,), registers=40):
            with lk.if_(sympy.Eq(lk.warp_id_in_warpgroup(), 0)):
                with lk.elect_one():
                    lk.fence_proxy_async()
            lk.named_barrier_arrive(2, 288)
        with lk.warp_role("consumer", warpgroups=(1, 2), registers=232):
            lk.named_barrier_sync(2, 288)
            lk.named_barrier_sync(3, 256)
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
        assert lk.warpgroup_id() == sympy.floor(tid / 128)
        assert lk.lane_id() == sympy.Mod(tid, 32)
        assert lk.thread_id_in_warpgroup() == sympy.Mod(tid, 128)
        assert lk.warp_id_in_warpgroup() == sympy.Mod(sympy.floor(tid / 32), 4)
    kernel(body).ptx(PTR, 8)


def test_cluster_kernel_directives_special_registers_and_barrier():
    def body():
        assert lk.cluster_shape() == (2, 2, 1) and lk.cluster_size() == 4
        rank = lk.block_rank_in_cluster()
        assert lk.block_rank_in_cluster() is rank           # one symbol per register
        lk.cluster_sync()
        for axis in range(3):
            lk.cast(lk.block_id_in_cluster(axis) + lk.cluster_id(axis) + lk.num_clusters(axis) +
                    rank, lk.i32)
    k = kernel(body, num_warps=4, cluster=(2, 2))
    ptx = k.ptx(PTR, 8)
    assert ".reqntid 128, 1, 1\n.reqnctapercluster 2, 2, 1" in ptx
    assert "barrier.cluster.arrive.release.aligned;\n" in ptx
    assert "barrier.cluster.wait.acquire.aligned;\n" in ptx
    for reg in ("cluster_ctarank", "cluster_ctaid.x", "clusterid.z", "nclusterid.y"):
        assert f", %{reg};" in ptx
    assert k.key(PTR, 8)[-1] == ((2, 2, 1), False)
    assert "cluster=(2, 2, 1)" in repr(k)
    k.resources(PTR, 8)


def test_cluster_is_part_of_the_key_and_the_launch():
    fn = K.cluster_ring.fn
    plain = lk.Kernel(fn, 4, debug=True)
    assert plain.key(lk.Pointer[lk.i32], 8)[-1] != K.cluster_ring.key(lk.Pointer[lk.i32], 8)[-1]
    spec = K.cluster_ring.specialize(lk.Pointer[lk.i32], 8)
    assert spec.cluster == (2, 1, 1)
    assert spec.compiled.signature.reqnctapercluster == (2, 1, 1)
