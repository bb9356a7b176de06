"""The protocol extraction's shortcuts give the protocol of the plain walk: a loop op whose
threads and operand values repeat an earlier trip's replays that trip's events with its own Site
(Extractor.leaf_effects); a loop counter one value at every thread is held as an int
(values.Fixed); compile_expr remembers the forms it cannot evaluate."""
import numpy as np
import pytest
import sympy

import layoutkit.dsl as lk
from layoutkit.dsl.check.extract import Extractor
from layoutkit.dsl.check.values import Fixed, Unevaluable, compile_expr
from layoutkit.dsl.core.opdef import FACET_CALLS
from layoutkit.sync import kernel_model as km

from . import sync_kernels as S
from .wgmma_kernels import consumer_mainloop

P = lk.Pointer
CASES = [(S.ring_pingpong, (P[lk.i32], 10)),
         (consumer_mainloop, (P[lk.bf16], P[lk.bf16], P[lk.f32], 256))]


def effects_calls() -> int:
    """The ops' effects calls so far (conftest.py counts every facet call)."""
    return sum(n for (_, facet), n in FACET_CALLS.items() if facet == "effects")


def walked(fn, replay: bool):
    """(the protocol of `fn`, the effects calls its walk made); without `replay` every trip
    calls each op's effects."""
    ex = Extractor(fn)
    if not replay:
        ex.leaf_effects = lambda op, mask, loops: op.defn.effects(op, ex, mask, loops)
    before = effects_calls()
    return ex.run(), effects_calls() - before


def contents(protocol):
    return ([(c.role, c.cta, c.tids, c.events) for c in protocol.classes], protocol.barriers,
            protocol.assumed, protocol.undecided)


@pytest.mark.parametrize("kernel, args", CASES, ids=["ring_pingpong", "consumer_mainloop"])
def test_replayed_events_are_those_of_the_plain_walk(kernel, args):
    with lk.protocol_check_skipped():       # the extraction alone (a protocol with errors too)
        fn = kernel.ir(*args)
    (replayed, fewer), (plain, every) = walked(fn, replay=True), walked(fn, replay=False)
    assert 0 < fewer < every            # some trips replayed (else the case tests nothing)
    assert contents(replayed) == contents(plain)


def test_a_replayed_event_names_its_own_iteration():
    protocol, _ = walked(S.ring_pingpong.ir(P[lk.i32], 10), replay=True)
    waits = [e for e in protocol.classes[0].events if isinstance(e, km.Wait)]
    line = waits[0].site.context.rsplit(" ", 1)[-1]
    # iteration 8 has iteration 0's stage and parity (a period of 2 * STAGES): a replay
    assert [(e.stage, e.parity, e.site.context) for e in waits] == [
        (k % 4, 1 - (k // 4) % 2, f"iteration {k} of the lk.range at line {line}")
        for k in range(9)]


def test_fixed_holds_a_one_value_array_as_its_int():
    fixed = Fixed()
    fixed[1] = np.full(8, 5, dtype=np.int64)
    fixed[2] = np.arange(8, dtype=np.int64)
    fixed[3] = np.full(8, True)                  # not an integer array: kept
    assert fixed[1] == 5 and type(fixed[1]) is int
    assert fixed[2].tolist() == list(range(8)) and fixed[3].dtype == bool


def test_an_unevaluable_form_stays_unevaluable():
    x = sympy.Symbol("x", integer=True)
    expr = sympy.sqrt(x)
    for _ in range(2):                           # the second answer is the remembered one
        with pytest.raises(Unevaluable, match="sqrt"):
            compile_expr(expr, (x,))
    assert compile_expr(x + 1, (x,))(np.array([1, 2])).tolist() == [2, 3]
