"""The sm_80 op definitions (layoutkit/dsl/sm80/ops.py): each of cp_async, cp_async_commit,
cp_async_wait, ldmatrix and mma_sync is one registered OpDef on both targets whose four facets
run - verify refuses a malformed op, lower emits its instruction (sm_80 and sm_90a), interpret
runs it (tests/dsl/test_mma_interpreter.py), and effects gives the protocol check its events
(mma.sync none: registers only)."""
import dataclasses
import re

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.check.extract import extract
from layoutkit.dsl.core.errors import VerifierError
from layoutkit.dsl.core.opdef import ALL_TARGETS, NoEffects, definition
from layoutkit.dsl.interpreter import interpret, to_bf16
from layoutkit.dsl.sm80 import ops
from layoutkit.sync import kernel_model as km

from . import source_lines
from .mma_kernels import one_mma

P = lk.Pointer
ARGS = (P[lk.bf16], P[lk.bf16], P[lk.f32], True)
NAMES = {"cp_async": ops.CpAsync, "cp_async_commit": ops.CpAsyncCommit,
         "cp_async_wait": ops.CpAsyncWait, "ldmatrix": ops.Ldmatrix, "mma_sync": ops.MmaSync}


def _ops(fn):
    return [op for op in fn.body.ops if op.name in NAMES]


def test_each_op_is_one_definition_on_both_targets():
    for name, cls in NAMES.items():
        defn = definition(name)
        assert type(defn) is cls and defn.targets == ALL_TARGETS
    assert [definition(n).synchronizes for n in NAMES] == [True, True, True, False, False]
    assert isinstance(definition("mma_sync"), NoEffects)
    assert not definition("mma_sync").emits_events


def test_every_facet_runs_on_the_ops_of_a_kernel():
    fn = one_mma.ir(*ARGS)
    assert sorted({op.name for op in _ops(fn)}) == sorted(NAMES)
    for op in _ops(fn):
        op.defn.verify(op)
    for target, isa in (("sm_80", ".target sm_80"), ("sm_90a", ".target sm_90a")):
        ptx = lk.Kernel(one_mma.fn, 1, target=target).ptx(*ARGS)
        assert isa in ptx
        for text in ("cp.async.cg.shared.global", "cp.async.commit_group",
                     "cp.async.wait_group 0", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                     "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"):
            assert text in ptx, (target, text)
    a = np.arange(256, dtype=np.float32).reshape(16, 16) % 7 - 3
    b = np.arange(128, dtype=np.float32).reshape(8, 16) % 5 - 2
    c = np.zeros((16, 8), np.float32)
    interpret(one_mma, 1, to_bf16(a), to_bf16(b), c, True)
    assert np.array_equal(c, a @ b.T)


def test_effects_are_the_protocol_events():
    line = lambda marker: source_lines.line_of(one_mma.fn.__code__.co_filename, marker)
    (threads,) = extract(one_mma.ir(*ARGS)).classes
    kinds = [(type(e).__name__, e.site.location.line) for e in threads.events]
    first = one_mma.fn.__code__.co_firstlineno
    assert [k for k, _ in kinds] == ["AsyncWrite", "AsyncWrite", "Commit", "GroupWait",
                                     "ThreadBarrier", "SharedRead", "SharedRead"]
    writes = [e for e in threads.events if isinstance(e, km.AsyncWrite)]
    reads = [e for e in threads.events if isinstance(e, km.SharedRead)]
    assert [w.bytes for w in writes] == [km.ByteRange(0, "smem0", 0, 512),
                                         km.ByteRange(0, "smem1", 0, 256)]
    assert [r.bytes for r in reads] == [w.bytes for w in writes]
    assert all(r.proxy == "generic" and r.collective for r in reads)
    assert all(line > first for _, line in kinds)
    assert line("lk.sm80.cp_async_commit()") == kinds[2][1]


@pytest.mark.parametrize("name, change, rule", [
    ("cp_async", {"bytes": 2}, "copies (4, 8, 16) bytes"),
    ("cp_async_wait", {"pending": 256}, "pending is an int in 0..255"),
    ("ldmatrix", {"num": 3}, "loads 1, 2 or 4 matrices"),
    ("mma_sync", {"shape": "m16n8k32"}, "shape is one of"),
])
def test_verify_refuses_a_malformed_op(name, change, rule):
    op = next(op for op in _ops(one_mma.ir(*ARGS)) if op.name == name)
    bad = dataclasses.replace(op, attrs=dict(op.attrs, **change))
    with pytest.raises(VerifierError, match=re.escape(rule)):
        bad.defn.verify(bad)


def test_group_ops_take_no_operands():
    fn = one_mma.ir(*ARGS)
    copy = next(op for op in _ops(fn) if op.name == "cp_async")
    for group in (op for op in _ops(fn) if op.name in ("cp_async_commit", "cp_async_wait")):
        with pytest.raises(VerifierError, match="takes no operands and has no results"):
            group.defn.verify(dataclasses.replace(group, operands=copy.operands[:1]))
