"""Python constructs that stay legal in a kernel: `if`, `while`, `range()`, `and`/`or`/`not` and
`==` on constexprs and plain ints (decided while tracing, loops unrolled), comparisons that the
declared facts decide, and the recompiled kernel function (layoutkit.dsl.core.rewrite) being
the same function as the original: same closure, same PTX and lines. The misuse side is
tests/misuse/test_python_constructs.py."""
import linecache

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.core import rewrite

F32 = lk.Pointer[lk.f32]
TV = lk.tv_layout(Layout(128), Layout(1))


def stores(kernel, *args, **kwargs) -> int:
    return str(kernel.ir(*args, **kwargs)).count(" store ")


@lk.kernel(num_warps=4)
def unrolled(x: F32, n: lk.i32, M: lk.constexpr, MODE: lk.constexpr):
    X = lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)
    if MODE == "twice" and M > 0 or not M:                       # constexpr truth tests
        lk.store(X, lk.full(TV, 2.0))
    for i in range(M):                                           # unrolled at trace time
        if i % 2 == 0:                                           # a plain int
            lk.store(X, lk.full(TV, float(i)))
    j = 0
    while j < M:                                                 # a plain-int while
        j += 1
    kept = [i for i in range(M) if i != 1]
    assert len(kept) == max(M - 1, 0)
    value = 1.0 if MODE != "twice" else 3.0
    lk.store(X, lk.full(TV, value))


@pytest.mark.parametrize("M, MODE, count", [(4, "twice", 4), (3, "once", 3), (0, "once", 2),
                                            (0, "twice", 2)])
def test_constexprs_and_plain_ints_decide_while_tracing(M, MODE, count):
    assert stores(unrolled, F32, 1000, M=M, MODE=MODE) == count


@lk.kernel(num_warps=4)
def decided(x: F32, n: lk.i32):
    X = lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)
    if n > 0 and n == n and n != n + 1 and not n < 1:          # the declared facts decide
        lk.store(X, lk.full(TV, 1.0))
    if n == n + 1 or n is None:
        lk.store(X, lk.full(TV, 2.0))


def test_comparisons_the_declared_facts_decide_are_constants():
    assert stores(decided, F32, 1000) == 1               # n is positive: its '+' specialization


def test_n_of_one_is_a_plain_int():
    @lk.kernel(num_warps=4)
    def k(x: F32, n: lk.i32):
        if n == 1:                                        # the '1' specialization: a plain int
            lk.store(lk.global_tensor(x, Layout(128)).tile((128,), (0,)).partition(TV),
                     lk.full(TV, 1.0))
    assert stores(k, F32, 1) == 1


def test_the_rewritten_function_keeps_its_closure_and_nested_functions():
    scale = 3.0

    @lk.kernel(num_warps=4)
    def k(x: F32, n: lk.i32, M: lk.constexpr):
        X = lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)

        def value(i):
            return scale * i if i == M - 1 else 0.0

        for i in range(M):
            if value(i):
                lk.store(X, lk.full(TV, value(i)))

    assert rewrite.checked(k.fn) is not k.fn
    ir = str(k.ir(F32, 1000, M=3))
    assert ir.count(" store ") == 1 and "value=6.0" in ir


def test_rewritten_kernels_lower_to_the_same_ptx_and_lines():
    def k(x: F32, n: lk.i32, a: lk.f32, M: lk.constexpr):
        X = lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)
        v = lk.load(X)
        for i in range(M):
            if i == 1:
                v = v * a
        with lk.if_(lk.eq(lk.thread_id(), 0) | (lk.thread_id() > n)):
            lk.store(X, lk.where(lk.ne(v, a), v, a))

    checked, plain = lk.Kernel(k, 4), lk.Kernel(k, 4)
    plain._body = plain.fn
    args = (F32, 1000, 2.0)
    assert checked.ptx(*args, M=3) == plain.ptx(*args, M=3)
    assert checked._body is not checked.fn


def test_a_function_without_source_is_traced_as_it_is():
    namespace = {"lk": lk, "Layout": Layout, "TV": TV, "F32": F32}
    exec("def k(x: F32, n: lk.i32):\n"
         "    if 2 == 2:\n"
         "        lk.store(lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV),\n"
         "                 lk.full(TV, 1.0))\n", namespace)
    fn = namespace["k"]
    assert rewrite.checked(fn) is fn
    assert stores(lk.Kernel(fn, 4), F32, 1000) == 1


def test_a_source_that_no_longer_matches_the_function_is_not_used(tmp_path):
    path = str(tmp_path / "edited.py")
    source = "def k(x, n):\n    return n\n"
    namespace = {}
    exec(compile(source, path, "exec"), namespace)
    linecache.cache[path] = (0, None, ["def k(x, n):\n", "    return n + 1\n"], path)
    try:
        assert rewrite.checked(namespace["k"]) is namespace["k"]
    finally:
        del linecache.cache[path]


def test_values_defined_before_a_region_and_carried_out_of_a_loop_stay_usable():
    @lk.kernel(num_warps=4)
    def k(x: F32, n: lk.i32):
        X = lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)
        v = lk.load(X)
        loop = lk.range(0, n, carry=(v,))
        for i, (acc,) in loop:
            loop.next(acc + v)
        (total,) = loop.results
        with lk.if_(lk.thread_id() < n):
            lk.store(X, total + v)
        lk.store(X, total)

    assert stores(k, F32, 1000) == 2


def test_where_picks_between_kernel_integers_on_a_relation():
    @lk.kernel(num_warps=4)
    def k(x: F32, n: lk.i32):
        t = lk.thread_id()
        X = lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)
        last = lk.where(t < n, t, n)                          # an i32 scalar: min(t, n)
        lk.store(X, lk.full(TV, 1.0) * lk.cast(last, lk.f32))

    ir = str(k.ir(F32, 1000))
    assert "cmp" in ir and "select" in ir and "kind='lt'" in ir


def test_runtime_values_compare_unequal_to_none_strings_and_containers():
    @lk.kernel(num_warps=4)
    def k(x: F32, n: lk.i32, a: lk.f32):
        X = lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)
        v = lk.load(X)
        assert a != None and n != "n" and v not in (None, "v")  # noqa: E711
        assert a in [a] and (n, a) == (n, a)                    # identity first
        lk.store(X, v)

    assert stores(k, F32, 1000, 1.0) == 1
