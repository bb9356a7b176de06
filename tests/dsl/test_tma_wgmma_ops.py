"""The TMA and wgmma ops are one definition each (sm90/tma/ops.py, sm90/wgmma/ops.py): every
facet of each runs on a kernel that uses it, they exist on sm_90a only, the hardware limits their
checks use are the ptx layer's constants, and an undefined accumulator carried by a loop
lowers."""
import warnings

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.check.extract import extract
from layoutkit.dsl.core.kernel import lower
from layoutkit.dsl.core.opdef import REGISTRY, SM90A
from layoutkit.dsl.core.verifier import verify
from layoutkit.dsl.interpreter import interpret, to_bf16
from layoutkit.dsl.sm90.tma import ops as tma_ops
from layoutkit.dsl.sm90.wgmma import ops as wgmma_ops
from layoutkit.ptx.isa import tma as isa_tma
from layoutkit.ptx.isa import wgmma as isa_wgmma

from .interpreter.hopper_kernels import ring_gemm, store_then_overwrite

TMA_OPS = {"tma_load": tma_ops.TmaLoad, "tma_store": tma_ops.TmaStore,
           "tma_store_commit": tma_ops.TmaStoreCommit, "tma_store_wait": tma_ops.TmaStoreWait}
WGMMA_OPS = {"wgmma": wgmma_ops.Wgmma, "wgmma_fence": wgmma_ops.WgmmaFence,
             "wgmma_commit": wgmma_ops.WgmmaCommit, "wgmma_wait": wgmma_ops.WgmmaWait,
             "wgmma_undef": wgmma_ops.WgmmaUndef}
OPS = {**TMA_OPS, **WGMMA_OPS}
# the ops with events of their own, for which the protocol check walks a kernel (the undefined
# accumulator has none: NoEffects)
SYNCHRONIZING = {"tma_load", "tma_store", "tma_store_commit", "tma_store_wait", "wgmma",
                 "wgmma_fence", "wgmma_commit", "wgmma_wait"}


def test_each_op_is_its_definition_on_sm90a_only():
    for name, cls in OPS.items():
        defn = REGISTRY[name]
        assert type(defn) is cls and defn.targets == frozenset({SM90A}), name
        assert defn.synchronizes == (name in SYNCHRONIZING), name
        assert defn.emits_events == (name in SYNCHRONIZING), name


def _ring_run():
    rng = np.random.default_rng(0)
    a = to_bf16(rng.standard_normal((64, 128)))
    b = to_bf16(rng.standard_normal((64, 128)))
    c = np.zeros((64, 64), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interpret(ring_gemm, 1, a, b, c, 128, 64, 2, False)
    expected = a.view(np.uint16).astype(np.uint32) << 16
    expected = expected.view(np.float32).astype(np.float64)
    other = (b.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    np.testing.assert_allclose(c, expected @ other.T, rtol=1e-5, atol=1e-4)


def _store_run():
    c = np.zeros((32, 64), np.uint16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interpret(store_then_overwrite, 1, c, True)
    assert (c == 0x3F80).all()                 # 1.0 in bf16: the store read its source first


def _event_key(event) -> tuple:
    kind = type(event).__name__
    detail = {"Copy": "what", "SharedRead": "proxy", "Commit": "kind", "GroupWait": "kind"}
    return kind, getattr(event, detail[kind], None) if kind in detail else None


def test_every_facet_of_every_op_runs(monkeypatch):
    ring = ring_gemm.ir(lk.Pointer[lk.bf16], lk.Pointer[lk.bf16], lk.Pointer[lk.f32], 128, 64,
                        2, False)
    store = store_then_overwrite.ir(lk.Pointer[lk.bf16], True)
    seen = {facet: set() for facet in ("verify", "lower", "interpret", "effects")}
    for name in OPS:
        defn = REGISTRY[name]
        for facet in seen:
            def spy(op, *rest, _inner=getattr(defn, facet), _facet=facet):
                seen[_facet].add(op.name)
                return _inner(op, *rest)
            monkeypatch.setattr(defn, facet, spy)
    events = set()
    for fn in (ring, store):
        verify(fn)
        assert "cp.async.bulk.tensor" in lower(fn)
        for cls in extract(fn).classes:
            events.update(_event_key(e) for e in cls.events)
    _ring_run()
    _store_run()
    assert seen["verify"] == seen["lower"] == seen["interpret"] == seen["effects"] == set(OPS)
    assert {("Copy", "TMA load into sA"), ("Copy", "TMA load into sB"),
            ("SharedRead", "wgmma"), ("SharedRead", "tma_store"), ("Commit", "wgmma"),
            ("Commit", "tma_store"), ("GroupWait", "wgmma"), ("GroupWait", "tma_store")} <= events


def _sm80(body):
    return lk.kernel(num_warps=4, target="sm_80")(body)


@pytest.mark.parametrize("call, op", [(lambda: lk.sm90.tma_store_commit(), "tma_store_commit"),
                                      (lambda: lk.sm90.wgmma_fence(), "wgmma_fence")])
def test_an_sm80_kernel_may_not_use_them(call, op):
    def body(x: lk.Pointer[lk.f32]):
        call()
    with pytest.raises(lk.TraceError, match=f"IR op '{op}' exists on sm_90a"):
        _sm80(body).ir(lk.Pointer[lk.f32])


def test_the_pending_group_limits_are_the_ptx_layers():
    assert isa_wgmma.MAX_PENDING_GROUPS == 7
    limit = isa_wgmma.MAX_PENDING_GROUPS

    def wait(x: lk.Pointer[lk.f32], N: lk.constexpr):
        lk.sm90.wgmma_wait(N)
    k = lk.kernel(num_warps=4)(wait)
    assert f"wgmma.wait_group.sync.aligned {limit};" in k.ptx(lk.Pointer[lk.f32], limit)
    with pytest.raises(lk.TraceError, match=f"pending is a Python int in 0..{limit} "):
        k.ir(lk.Pointer[lk.f32], limit + 1)

    def bulk_wait(x: lk.Pointer[lk.f32], N: lk.constexpr):
        lk.sm90.tma_store_wait(N)
    k = lk.kernel(num_warps=1)(bulk_wait)
    top = isa_tma.MAX_PENDING_BULK_GROUPS
    assert f"cp.async.bulk.wait_group.read {top};" in k.ptx(lk.Pointer[lk.f32], top)
    with pytest.raises(lk.TraceError, match=f"at most {top} "):
        k.ir(lk.Pointer[lk.f32], top + 1)


def test_the_verifier_checks_the_same_wgmma_limit():
    def wait(x: lk.Pointer[lk.f32]):
        lk.sm90.wgmma_wait(1)
    fn = lk.kernel(num_warps=4)(wait).ir(lk.Pointer[lk.f32])
    op = next(op for op in fn.body.ops if op.name == "wgmma_wait")
    op.attrs["pending"] = isa_wgmma.MAX_PENDING_GROUPS + 1
    try:
        with pytest.raises(lk.VerifierError, match=r"pending in 0\.\.7"):
            verify(fn)
    finally:
        op.attrs["pending"] = 1


def test_an_undefined_accumulator_carried_by_a_loop_lowers():
    """Its registers are copied into the loop's before any write (a Kernel.var: allowed)."""
    with lk.protocol_check_skipped():       # s is never written: lowering only
        fn = lk.kernel(num_warps=4)(_undef_in_a_loop).ir(lk.Pointer[lk.f32], 2)
    assert "wgmma.mma_async" in lower(fn)


def _undef_in_a_loop(c: lk.Pointer[lk.f32], K: lk.i32):
    swizzled = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((64, 64), (64, 1)))
    s = lk.shared_tensor(swizzled, lk.bf16, name="s")
    loop = lk.range(0, K, carry=(lk.sm90.wgmma_accumulator(64),))
    for k, (acc,) in loop:
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(acc, s, s, accumulate=k > 0)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        loop.next(acc)
    (acc,) = loop.results
    lk.store(lk.global_tensor(c, Layout((64, 64), (64, 1))).partition(acc.layout), acc)
