"""The launch plan's writing-down (layoutkit.dsl.core.launch_plan): tensor-map expressions as JSON
trees evaluate to what sympy gives, a plan round-trips, and the environment memo is used only
while the files it describes are unchanged."""
import json

import pytest
import sympy
from hypothesis import given, settings, strategies as st

import layoutkit.dsl as lk
from layoutkit.algebra import symbol
from layoutkit.sync import ERROR_BUFFER_PARAM
from layoutkit.dsl.core import fingerprint
from layoutkit.dsl.core.fingerprint import NotCacheable
from layoutkit.dsl.core.launch_plan import evaluate, expression_json, plan_from_json, plan_to_json

from . import spec_cache_kernels as K

M, N = symbol("M", 16), symbol("N", 1)
ATOMS = st.sampled_from([M, N, sympy.Integer(3), sympy.Integer(64), sympy.Rational(1, 16)])


def expressions():
    return st.recursive(ATOMS, lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
        inner.map(lambda a: sympy.floor(a / 7)),
        inner.map(lambda a: sympy.ceiling(a / 5)),
        inner.map(lambda a: sympy.Mod(a, 9)),
        inner.map(lambda a: a ** 2)), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(expr=expressions(), m=st.integers(1, 10**6).map(lambda v: 16 * v),
       n=st.integers(1, 10**6))
def test_a_written_expression_evaluates_as_sympy_does(expr, m, n):
    tree = json.loads(json.dumps(expression_json(expr)))      # through JSON, as on disk
    want = expr.subs({M: m, N: n})
    got = evaluate(tree, {"M": m, "N": n}.__getitem__)
    assert got == want


def test_an_expression_outside_the_tree_is_not_cacheable():
    with pytest.raises(NotCacheable, match="has a Abs, which the specialization cache does not"):
        expression_json(sympy.Abs(M - N))


def test_a_plan_round_trips_through_json():
    B = lk.TensorSpec(lk.bf16, (256, 128))
    spec = K.tma_copy_debug.specialize(B, B, lk.Pointer[lk.bf16], 256, 128)
    data = json.loads(json.dumps(plan_to_json(spec.plan, spec.ir)))
    plan = plan_from_json(data)
    assert plan.params == spec.plan.params
    assert (plan.name, plan.num_warps, plan.shared_bytes, plan.cluster, plan.debug) == \
        ("tma_copy", 4, spec.plan.shared_bytes, None, True)
    assert [n for n, _ in plan.hidden] == [n for n, _ in spec.plan.hidden] == \
        ["tmap_a", ERROR_BUFFER_PARAM, "tmap_c"]
    for (_, traced), (_, rebuilt) in zip(spec.plan.hidden, plan.hidden):
        if hasattr(traced, "dims"):
            args = (Shaped((200, 72), (80, 1)), None, None, 200, 72)
            assert [f(args) for f in rebuilt.dims] == [f(args) for f in traced.dims]
            assert [f(args) for f in rebuilt.strides] == [f(args) for f in traced.strides]
            assert (rebuilt.box, rebuilt.swizzle, rebuilt.modes) == \
                (traced.box, traced.swizzle, traced.modes)
    with pytest.raises((KeyError, TypeError, ValueError)):
        plan_from_json({**data, "params": "garbage"})


class Shaped:
    """A tensor argument's shape and strides, as the resolvers read them."""

    def __init__(self, shape, strides):
        self.shape, self.strides = shape, strides

    def stride(self, mode=None):
        return self.strides if mode is None else self.strides[mode]


def test_the_environment_memo_holds_while_the_files_do(tmp_path):
    memo = tmp_path / "environment.json"
    compute = fingerprint.layoutkit_source_digest.__wrapped__
    real = compute(None)
    assert compute(memo) == real and json.loads(memo.read_text())["source_digest"] == real
    data = json.loads(memo.read_text())
    memo.write_text(json.dumps({**data, "source_digest": "remembered"}))
    assert compute(memo) == "remembered"                  # same files: the memo is read
    memo.write_text(json.dumps({**data, "source_stats": "other", "source_digest": "stale"}))
    assert compute(memo) == real                          # other files: computed again
    env = fingerprint.environment(memo)
    assert env["ptxas"] == json.loads(memo.read_text())["ptxas"] and "V13" in env["ptxas"]
