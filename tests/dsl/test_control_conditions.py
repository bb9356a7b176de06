"""lk.if_ conditions: run-time relations of kernel integers; a Python bool is refused."""
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout

from .source_lines import line_of


def test_python_equality_of_kernel_integers_is_refused_with_the_fix():
    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32]):
        with lk.if_(lk.thread_id() == 0):  # the mistake: a structural == gives False
            pass

    with pytest.raises(lk.TraceError, match=r"`==` between runtime values.*"
                                            r"lk\.eq\(lk\.thread_id\(\), 0\)") as info:
        k.ir(lk.Pointer[lk.f32])
    assert info.value.location.line == line_of(__file__, "lk.thread_id() == 0)")


def test_a_python_bool_condition_is_refused_with_the_fix():
    def helper_equal(a, b):                     # helpers are not rewritten: == is structural
        return a == b

    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32]):
        with lk.if_(helper_equal(lk.thread_id(), 0)):  # HELPER BOOL
            pass

    with pytest.raises(lk.TraceError, match=r"Python bool False.*lk\.eq\(a, b\)") as info:
        k.ir(lk.Pointer[lk.f32])
    assert info.value.location.line == line_of(__file__, "# HELPER BOOL")


def test_conditions_join_with_and_or():
    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32], n: lk.i32):
        t = lk.thread_id()
        with lk.if_((t < n) & (t > 3) | lk.eq(t, 7)):
            pass

    ir = str(k.ir(lk.Pointer[lk.f32], 9))
    assert "kind='and'" in ir and "kind='or'" in ir


@pytest.mark.parametrize("make, kind", [(lk.eq, "eq"), (lk.ne, "ne")])
def test_eq_and_ne_of_scalars_compare_at_run_time(make, kind):
    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32], a: lk.f32, b: lk.f32):
        with lk.if_(make(a, b)):
            pass

    assert f"cmp %1, %2 {{kind='{kind}'}}" in str(k.ir(lk.Pointer[lk.f32], 1.0, 2.0))


@pytest.mark.parametrize("make, kind", [(lk.eq, "eq"), (lk.ne, "ne")])
def test_eq_and_ne_compare_at_run_time(make, kind):
    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32], n: lk.i32):
        tv = lk.tv_layout(Layout(32), Layout(1))
        X = lk.global_tensor(x, Layout(n)).tile((32,), (0,)).partition(tv)
        with lk.if_(make(lk.thread_id(), n)):
            lk.store(X, lk.full(tv, 1.0))

    ir = str(k.ir(lk.Pointer[lk.f32], 7))
    assert f"kind='{kind}'" in ir and "if " in ir
