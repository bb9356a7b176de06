"""The PTX and IR of the DSL's mbarrier ops and ring states, assembled with ptxas for sm_90a."""
import re

import pytest
import sympy

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.sm90.mbarrier import attach_copy
from layoutkit.sync import ERROR_BUFFER_PARAM, PipelineState

from . import sync_kernels as K
from .sync_kernels import is_zero

PTR = lk.Pointer[lk.f32]


def build(body, *, num_warps=4, cluster=None, debug=False):
    """A kernel whose body (after a thread-0 init of full[4] (count 1) and empty[4] (count 128)
    and a barrier) is `body(full, empty)`; returns its Kernel."""
    def kernel(x: PTR, n: lk.i32):
        full = lk.sm90.mbarrier_array(4, 1, name="full")
        empty = lk.sm90.mbarrier_array(4, 128, name="empty")
        with lk.if_(is_zero(lk.thread_id())):
            lk.sm90.mbarrier_init(full, empty)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        body(full, empty)
    return lk.Kernel(kernel, num_warps, cluster=cluster, debug=debug)


def lines(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if not line.strip().startswith(".loc")]


def test_init_fence_and_barrier_ptx_in_order():
    k = build(lambda full, empty: None)
    body = lines(k.ptx(PTR, 8))
    start = body.index("mbarrier.init.shared::cta.b64 [%u0], 1;")
    assert body[start:start + 10] == [
        "mbarrier.init.shared::cta.b64 [%u0], 1;", "mbarrier.init.shared::cta.b64 [%u0+8], 1;",
        "mbarrier.init.shared::cta.b64 [%u0+16], 1;", "mbarrier.init.shared::cta.b64 [%u0+24], 1;",
        "mbarrier.init.shared::cta.b64 [%u0+32], 128;",
        "mbarrier.init.shared::cta.b64 [%u0+40], 128;",
        "mbarrier.init.shared::cta.b64 [%u0+48], 128;",
        "mbarrier.init.shared::cta.b64 [%u0+56], 128;",
        "fence.mbarrier_init.release.cluster;", "$endif_0:"]
    assert body[start + 10] == "bar.sync 0;"
    assert "mov.u32 %u0, smem;" in body
    ir = k.ir(PTR, 8)
    assert [(a.name, a.nbytes, a.align, a.offset) for a in ir.shared] == \
        [("full", 32, 8, 0), ("empty", 32, 8, 32)]
    assert k.resources(PTR, 8).spill_store_bytes == 0


def test_arrive_count_and_constant_stage_fold_into_the_address():
    def body(full, empty):
        lk.sm90.mbarrier_arrive(empty[2])
        with lk.if_(is_zero(lk.warp_id())):          # 32 threads x 4 = empty[3]'s 128 arrivals
            lk.sm90.mbarrier_arrive(empty[3], count=4)
    ptx = lines(build(body).ptx(PTR, 8))
    assert "mbarrier.arrive.shared::cta.b64 _, [%u0+48];" in ptx
    assert "mbarrier.arrive.shared::cta.b64 _, [%u0+56], 4;" in ptx


def test_remote_arrive_maps_the_peer_address_in_a_cluster_kernel():
    def body(full, empty):
        lk.sm90.cluster_sync()                             # the peer's init is visible to this CTA
        with lk.if_(is_zero(lk.thread_id())):
            lk.sm90.mbarrier_arrive(full[1], cta=(lk.sm90.block_rank_in_cluster() + 1) % 2)
        lk.sm90.mbarrier_wait(full[1], 0)                  # the peer's arrive landed before exit
    k = build(body, cluster=(2, 1, 1))
    ptx = k.ptx(PTR, 8)
    assert re.search(r"mapa\.shared::cluster\.u32 %u\d+, %u\d+, %u\d+;\s*\n\s*"
                     r"mbarrier\.arrive\.release\.cluster\.shared::cluster\.b64 _, \[%u\d+\];",
                     ptx)
    assert "mov.u32 %u1, %cluster_ctarank;" in ptx
    assert ".reqnctapercluster 2, 1, 1" in ptx
    k.resources(PTR, 8)                                   # assembles for sm_90a


def test_expect_tx_arrives_with_the_total_of_attached_copies_before_them():
    def body(full, empty):
        with lk.if_(is_zero(lk.warp_id())), lk.sm90.elect_one():     # one thread: full[0] counts 1
            with lk.sm90.expect_tx(full[0]) as ref:
                attach_copy(ref, 8192, "A tile")
                attach_copy(full[0], 4096, "B tile")
    k = build(body)
    assert "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%u0], 12288;" in lines(k.ptx(PTR, 8))
    (warp0,) = [o for o in k.ir(PTR, 8).body.ops if o.name == "if"][-1:]
    (op,) = [o for o in warp0.blocks[0].ops if o.name == "elect_one"][0].blocks[0].ops[-1:]
    assert op.name == "mbarrier_arrive_expect_tx"
    assert op.attrs["copies"] == (("A tile", 8192), ("B tile", 4096))
    assert op.attrs["barrier"] == "full" and op.attrs["stage"] == 0


def test_wait_is_a_try_wait_loop_with_runtime_stage_and_phase():
    def body(full, empty):
        for k in lk.range(0, 100):
            c = lk.sm90.consumer_state(k, 4)
            p = lk.sm90.producer_state(k, 4)
            with lk.if_(is_zero(lk.thread_id())):     # thread 0 fills, all 128 release
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                lk.sm90.mbarrier_arrive(full[p.stage])
            lk.sm90.mbarrier_wait(full[c.stage], c.phase)
            lk.sm90.mbarrier_arrive(empty[c.stage])
    ptx = build(body).ptx(PTR, 8)
    # power-of-two ring: stage = k & 3, phase = (k >> 2) & 1, both without division
    assert re.search(r"and\.b32 (%s\d+), %s\d+, 3;", ptx)
    assert re.search(r"shr\.s32 (%s\d+), %s\d+, 2;\s*\n\s*and\.b32 %s\d+, \1, 1;", ptx)
    assert "div" not in ptx and "rem" not in ptx
    assert re.search(r"\$mbar_wait_(\d+):\s*\n\s*mbarrier\.try_wait\.parity\.shared::cta\.b64 "
                     r"(%p\d+), \[%u\d+\], %u\d+;\s*\n\s*@!\2 bra \$mbar_wait_\1;", ptx)


def test_constant_phase_wait_and_proxy_fence():
    def body(full, empty):
        lk.sm90.mbarrier_wait(empty[1], 1)
        lk.sm90.fence_proxy_async()
    ptx = lines(build(body).ptx(PTR, 8))
    assert "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%u0+40], 1;" in ptx
    assert "fence.proxy.async.shared::cta;" in ptx


def test_ir_ops_carry_barrier_stage_phase_and_counts():
    ir = K.ring_pingpong.ir(lk.Pointer[lk.i32], 10)
    ops = {}

    def walk(block):
        for op in block.ops:
            ops.setdefault(op.name, []).append(op)
            for inner in op.blocks:
                walk(inner)
    walk(ir.body)
    inits = {o.attrs["barrier"]: o.attrs for o in ops["mbarrier_init"]}
    assert inits["full"]["arrive_count"] == 128 and inits["empty"]["arrive_count"] == 256
    waits = [(o.attrs["barrier"], str(o.attrs["stage"]), str(o.attrs["phase"]))
             for o in ops["mbarrier_wait"]]
    assert waits == [("empty", "Mod(i0, 4)", "Mod(floor(i0/4) + 1, 2)"),
                     ("full", "Mod(i1, 4)", "Mod(floor(i1/4), 2)")]
    assert [o.attrs["role"] for o in ops["warp_role"]] == ["producer", "consumer"]


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5])
def test_ring_states_follow_the_sync_pipeline_state(stages):
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    for start, make in ((PipelineState.producer_start(stages), lk.sm90.producer_state),
                        (PipelineState.consumer_start(stages), lk.sm90.consumer_state)):
        symbolic = make(i, stages)
        for k in range(3 * stages + 2):
            expected = start.advance_by(k)
            concrete = make(k, stages)
            assert (concrete.stage, concrete.phase) == (expected.index, expected.phase)
            assert (symbolic.stage.subs(i, k), symbolic.phase.subs(i, k)) == \
                (expected.index, expected.phase)


def arrive_then_wait(full, empty):
    """Thread 0 arrives on full[0] (count 1); every thread waits for its phase 0."""
    with lk.if_(is_zero(lk.thread_id())):
        lk.sm90.mbarrier_arrive(full[0])
    lk.sm90.mbarrier_wait(full[0], 0)


def test_debug_build_differs_from_release_only_by_the_bounded_waits():
    release = build(arrive_then_wait, debug=False)
    debug = build(arrive_then_wait, debug=True)
    rel, dbg = release.ptx(PTR, 8), debug.ptx(PTR, 8)
    for marker in (ERROR_BUFFER_PARAM, "%globaltimer", "trap;", "membar.sys"):
        assert marker not in rel and marker in dbg
    assert f".param .u64 {ERROR_BUFFER_PARAM}" in dbg
    # everything else is the same program: the release lines equal the debug lines once the
    # debug-only parameter, register declarations and the bounded wait region are dropped
    def program(ptx, wait_region):
        kept, inside = [], False
        for ln in lines(ptx):
            if ln.startswith(wait_region[0]):
                inside = True
            if not inside and not ln.startswith(".reg") and ERROR_BUFFER_PARAM not in ln:
                kept.append(ln.rstrip(","))
            if inside and re.fullmatch(wait_region[1], ln):
                inside = False
        return kept
    assert program(rel, ("$mbar_wait", r"@!%p\d+ bra \$mbar_wait_\d+;")) == \
        program(dbg, ("cvta.to.global", r"\$mbar_done_\d+:"))
    assert release.key(PTR, 8)[-1] == (None, False, "sm_90a") and debug.key(PTR, 8)[-1] == (None, True, "sm_90a")
    assert debug.resources(PTR, 8).registers > 0                       # assembles


def test_layoutkit_debug_env_selects_the_debug_build(monkeypatch):
    k = build(arrive_then_wait, debug=None)
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "0")
    assert ERROR_BUFFER_PARAM not in k.ptx(PTR, 8)
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "1")
    assert k.key(PTR, 8)[-1].debug is True
    assert ERROR_BUFFER_PARAM in k.ptx(PTR, 8)
    spec = k.specialize(PTR, 8)
    assert [op.attrs["name"] for op in spec.ir.hidden] == [ERROR_BUFFER_PARAM]


def test_debug_table_names_barrier_and_source_line_of_each_wait():
    from layoutkit.dsl.sm90.debug_waits import sink_of
    spec = K.wrong_parity.specialize(lk.Pointer[lk.i32])
    sink = sink_of(spec.ir)
    assert sink.table.barriers == ["empty"]
    (site,) = sink.table.sites
    assert site.location.line == K.line_of_wrong_parity()
    assert site.location.file.endswith("sync_kernels.py")


@pytest.mark.parametrize("kernel, args", [
    (K.ring_pingpong, (lk.Pointer[lk.i32], 1000)),
    (K.wrong_parity, (lk.Pointer[lk.i32],)),
    (K.cluster_ring, (lk.Pointer[lk.i32], 8)),
])
def test_gpu_kernels_assemble_without_spills_or_ignored_setmaxnreg(kernel, args):
    usage = kernel.resources(*args)
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0
    assert not usage.setmaxnreg_ignored


def test_shared_layout_of_the_pingpong_slots_follows_the_barriers():
    ir = K.ring_pingpong.ir(lk.Pointer[lk.i32], 10)
    slots = [a for a in ir.shared if a.name == "slots"][0]
    assert slots.offset == 64 and slots.nbytes == 4 * 128 * K.STAGES
    assert Layout(4) is not None
