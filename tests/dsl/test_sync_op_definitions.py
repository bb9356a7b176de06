"""The barrier and role ops as one definition each (sm90/mbarrier_ops.py, sm90/role_ops.py): one
cluster kernel that uses all eleven runs every facet (verify and lower through its PTX, effects
through the protocol check, interpret on the CPU); each op's targets follow the PTX it emits."""

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.check.extract import extract
from layoutkit.dsl.core.ir import Op
from layoutkit.dsl.core.opdef import REGISTRY, SM80, SM90A
from layoutkit.dsl.interpreter import interpret, to_bf16
from layoutkit.dsl.sm90 import mbarrier_ops, role_ops
from layoutkit.sync import kernel_model as km

BOTH, HOPPER = frozenset({SM80, SM90A}), frozenset({SM90A})
# name: (module, targets, emits_events, synchronizes)
FAMILY = {
    "mbarrier_init": (mbarrier_ops, BOTH, True, True),
    "fence_mbarrier_init": (mbarrier_ops, HOPPER, True, True),
    "fence_proxy_async": (mbarrier_ops, HOPPER, True, True),
    "mbarrier_arrive": (mbarrier_ops, BOTH, True, True),
    "mbarrier_arrive_expect_tx": (mbarrier_ops, HOPPER, True, True),
    "mbarrier_wait": (mbarrier_ops, HOPPER, True, True),
    "warp_role": (role_ops, BOTH, False, False),
    "elect_one": (role_ops, HOPPER, False, False),
    "named_barrier": (role_ops, BOTH, True, True),
    "special_reg": (role_ops, HOPPER, False, False),
    "cluster_sync": (role_ops, HOPPER, True, True),
}
BF16 = lk.Pointer[lk.bf16]
TILE = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((64, 64), (64, 1)))
ONE = lk.TVLayout((1,), Layout((256, 1), (0, 0)))
# TRANSITION: the sm_80 cases need @lk.kernel(target=...) (issue 13 item 5); drop the mark
# once it is in the tree.

def first(tid: int):
    return lk.if_(lk.eq(lk.thread_id(), tid))


@lk.kernel(num_warps=8, cluster=(2, 1, 1))
def every_sync_op(a: BF16, out: lk.Pointer[lk.i32], M: lk.i32):
    """Producer warpgroup 0: one elected lane TMA-loads a tile (arrive.expect_tx on full) and
    its warp signals named barrier 1. Consumer warpgroup 1 waits on full and the named barrier,
    then thread 128 arrives on `done` here and in the peer CTA; out[block] = cluster rank."""
    A = lk.global_tensor(a, Layout((M, 64), (64, 1)))
    s = lk.shared_tensor(TILE, lk.bf16, name="s")
    full = lk.sm90.mbarrier_array(1, 1, name="full")
    done = lk.sm90.mbarrier_array(1, 2, name="done")
    with first(0):
        lk.sm90.mbarrier_init(full, done)
        lk.sm90.fence_mbarrier_init()
    lk.sm90.cluster_sync()
    rank = lk.sm90.block_rank_in_cluster()
    with lk.sm90.warp_role("producer", warpgroups=0, registers=40):
        with lk.if_(lk.eq(lk.sm90.warp_id_in_warpgroup(), 0)):
            with lk.sm90.elect_one():
                with lk.sm90.expect_tx(full[0]):
                    lk.sm90.tma_load(s, A.tile((64, 64), (lk.block_id(0), 0)), full[0])
            lk.sm90.named_barrier_arrive(1, 160)
    with lk.sm90.warp_role("consumer", warpgroups=1, registers=232):
        lk.sm90.mbarrier_wait(full[0], 0)
        lk.sm90.named_barrier_sync(1, 160)
        lk.sm90.fence_proxy_async()
        with first(128):
            lk.sm90.mbarrier_arrive(done[0])
            lk.sm90.mbarrier_arrive(done[0], cta=(rank + 1) % 2, scope="cta")
        lk.sm90.mbarrier_wait(done[0], 0)
        with first(128):
            mine = lk.global_tensor(out, Layout(2)).tile((1,), (lk.block_id(0),))
            lk.store(mine.partition(ONE), lk.full(ONE, 0, lk.i32) + lk.cast(rank, lk.i32))


ARGS = (BF16, lk.Pointer[lk.i32], 128)


def test_each_op_is_one_definition_in_its_family_module():
    for name, (module, targets, events, syncs) in FAMILY.items():
        defn = REGISTRY[name]
        assert type(defn).__module__ == module.__name__, name
        assert (defn.targets, defn.emits_events, defn.synchronizes) == (targets, events, syncs), \
            name


def test_the_kernel_uses_every_op_and_its_ptx_has_each_instruction():
    ir = every_sync_op.ir(*ARGS)
    used = set()
    pending = [ir.body]
    while pending:
        for op in pending.pop().ops:
            used.add(op.name)
            pending.extend(op.blocks)
    assert set(FAMILY) <= used
    ptx = every_sync_op.ptx(*ARGS)
    for text in ("mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster;",
                 "barrier.cluster.arrive.release.aligned;", "%cluster_ctarank;",
                 "setmaxnreg.dec.sync.aligned.u32 40;", "elect.sync _|",
                 "mbarrier.arrive.expect_tx.shared::cta.b64 _,", "bar.arrive 1, 160;",
                 "mbarrier.try_wait.parity.shared::cta.b64", "bar.sync 1, 160;",
                 "fence.proxy.async.shared::cta;", "mbarrier.arrive.shared::cta.b64 _,",
                 "mapa.shared::cluster.u32", "mbarrier.arrive.release.cta.shared::cluster.b64 _,"):
        assert text in ptx, text
    every_sync_op.resources(*ARGS)                       # assembles


def test_the_effects_reach_the_protocol_model():
    protocol = extract(every_sync_op.ir(*ARGS))
    events = [e for c in protocol.classes for e in c.events]
    kinds = {type(e) for e in events}
    assert {km.Init, km.InitFence, km.Arrive, km.Wait, km.Copy, km.ThreadBarrier,
            km.ProxyFence} <= kinds
    assert {e.ident for e in events if isinstance(e, km.ThreadBarrier)} == {1, "cluster"}
    arrives = [e for e in events if isinstance(e, km.Arrive)]
    assert any(e.remote for e in arrives) and any(e.expect for e in arrives)
    roles = {c.role for c in protocol.classes}
    assert {"producer", "consumer"} <= roles
    electing = [c for c in protocol.classes if any(isinstance(e, km.Copy) for e in c.events)]
    assert [(c.cta, c.tids) for c in electing] == [(0, (0,)), (1, (0,))]  # elected lanes


def test_the_interpreter_runs_every_op():
    a = to_bf16(np.random.default_rng(0).standard_normal((128, 64)))
    out = np.full(2, -1, np.int32)
    interpret(every_sync_op, 2, a, out, 128, seed=1)
    np.testing.assert_array_equal(out, [0, 1])


def test_verify_refuses_malformed_ops():
    bad = Op("named_barrier", (), (), {"kind": "sync", "id": 16, "threads": 64, "role": None},
             (), None)
    with pytest.raises(lk.VerifierError, match="is a sync or arrive on id 1..15 with a "
                                               "multiple of 32 threads"):
        REGISTRY["named_barrier"].verify(bad)
    bad = Op("mbarrier_init", (), (), {"barrier": "b", "offset": 4, "stages": 1,
                                       "arrive_count": 1}, (), None)
    with pytest.raises(lk.VerifierError, match="needs an 8-aligned int offset"):
        REGISTRY["mbarrier_init"].verify(bad)


def _sm80(body):
    def fn(x: lk.Pointer[lk.f32]):
        body()
    return lk.kernel(num_warps=8, target="sm_80")(fn)


def _init_and(then):
    def body():
        bars = lk.sm90.mbarrier_array(1, 64, name="bars")
        with first(0):
            lk.sm90.mbarrier_init(bars)
        lk.barrier()
        then(bars)
    return body


def test_sm80_has_init_plain_arrive_named_barriers_and_budgetless_roles():
    def then(bars):
        lk.sm90.mbarrier_arrive(bars[0])
        with lk.sm90.warp_role("a", warpgroups=0):
            lk.sm90.named_barrier_sync(1, 128)
        with lk.sm90.warp_role("b", warpgroups=1):
            lk.sm90.named_barrier_arrive(2, 128)
    with lk.protocol_check_skipped():
        ptx = _sm80(_init_and(then)).ptx(lk.Pointer[lk.f32])
    assert ".target sm_80\n" in ptx and "mbarrier.init.shared::cta.b64" in ptx
    assert "mbarrier.arrive.shared::cta.b64 _," in ptx and "bar.sync 1, 128;" in ptx


def _wait(bars):
    lk.sm90.mbarrier_wait(bars[0], 0)


def _fence(bars):
    lk.sm90.fence_proxy_async()


def _elect(bars):
    with lk.sm90.elect_one():
        pass


def _arrive_twice(bars):
    lk.sm90.mbarrier_arrive(bars[0], count=2)


def _budgets(bars):
    with lk.sm90.warp_role("a", warpgroups=0, registers=40):
        pass
    with lk.sm90.warp_role("b", warpgroups=1, registers=232):
        pass


@pytest.mark.parametrize("then, name", [(_wait, "mbarrier_wait"), (_fence, "fence_proxy_async"),
                                        (_elect, "elect_one")])
def test_sm90_ops_on_sm80_are_trace_errors_naming_both_targets(then, name):
    with pytest.raises(lk.TraceError, match=f"IR op '{name}' exists on sm_90a; this kernel's "
                                            "target is 'sm_80'"):
        with lk.protocol_check_skipped():
            _sm80(_init_and(then)).ptx(lk.Pointer[lk.f32])


@pytest.mark.parametrize("then, what, form, needs", [
    (_arrive_twice, r"lk\.sm90\.mbarrier_arrive\(count=2\) on bars\[0\]",
     "mbarrier.arrive with a count operand", "needs sm_90 or newer"),
    (_budgets, r"lk\.sm90\.warp_role\('a'\) with registers=40", "setmaxnreg", "needs sm_90 or "
                                                                              "newer")])
def test_sm90_forms_of_sm80_ops_are_trace_errors_at_the_users_line(then, what, form, needs):
    with pytest.raises(lk.TraceError, match=f"{what}: lowers to {form}, which {needs}, this "
                                            "kernel's target is sm_80") as info:
        with lk.protocol_check_skipped():
            _sm80(_init_and(then)).ptx(lk.Pointer[lk.f32])
    assert info.value.location.line == then.__code__.co_firstlineno + 1
