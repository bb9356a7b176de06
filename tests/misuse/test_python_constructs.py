"""Python constructs on runtime values (a kernel integer, a scalar): `if`, `while`, `range()`,
`and`/`or`/`not`, `x if c else y`, `assert`, a comprehension's `if`, a chained comparison, a
Python int, and `==`/`!=` (which Python would decide while tracing, silently keeping one
branch); and a value used outside the `lk.if_`/`lk.range` that made it. Each is a TraceError
naming the construct, the value, the rule, the layoutkit form to use instead and the line."""
import layoutkit.dsl as lk
from layoutkit.algebra import Layout

from ..dsl.source_lines import line_of
from .harness import F32, check, diagnose

TV = lk.tv_layout(Layout(128), Layout(1))

IF_FIX = ("branch at run time with `with lk.if_(cond):`, or pick a value with "
          "lk.where(cond, a, b); a Python `if` takes constexprs and plain ints")
WHILE_FIX = ("loop at run time with `for i in lk.range(start, stop):` (carry= for values that "
             "change per iteration); a Python `while` takes constexprs and plain ints")
RANGE_FIX = ("loop at run time with `for i in lk.range(start, stop):`; Python's range unrolls "
             "while tracing and takes constexprs and plain ints")
NO_TRUTH = "is known only when the kernel runs, so it has no Python truth value while tracing"
CARRY_FIX = ("carry it out of the loop: loop = lk.range(start, stop, carry=(initial,)), "
             "loop.next(new value) in the body, loop.results after it")


def L(marker: str) -> int:
    return line_of(__file__, marker)


def tile(x, n):
    return lk.global_tensor(x, Layout(n)).tile((128,), (0,)).partition(TV)


# ---- truth values ---------------------------------------------------------------------------
def test_if_on_a_comparison_of_kernel_integers():
    def k(x: F32, n: lk.i32):
        if n > lk.thread_id():                                        # IF RELATION
            pass
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# IF RELATION",
          f"an `if` statement on a runtime value: the comparison n > tid of kernel integers "
          f"{NO_TRUTH}; {IF_FIX}")


def test_if_on_a_kernel_integer_itself():
    def k(x: F32, n: lk.i32):
        if n:                                                         # IF INTEGER
            pass
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# IF INTEGER",
          f"an `if` statement on a runtime value: the kernel integer n {NO_TRUTH}; {IF_FIX}")


def test_if_on_a_scalar_comparison():
    def k(x: F32, a: lk.f32):
        if a > 0.0:                                                   # IF SCALAR
            pass
    check(diagnose(k, F32, 1.0, error=lk.TraceError), __file__, "# IF SCALAR",
          f"an `if` statement on a runtime value: a bool scalar (a run-time comparison) "
          f"{NO_TRUTH}; {IF_FIX}")


def test_while_on_a_kernel_integer():
    def k(x: F32, n: lk.i32):
        i = 0
        while i < n:                                                  # WHILE
            i += 1
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# WHILE",
          f"a `while` loop on a runtime value: the comparison n > 1 of kernel integers "
          f"{NO_TRUTH}; {WHILE_FIX}")


def test_range_of_a_kernel_integer():
    def k(x: F32, n: lk.i32):
        for i in range(n):                                            # RANGE
            pass
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# RANGE",
          f"`range()` of a runtime value: `n` is a kernel integer, known only when the kernel "
          f"runs; {RANGE_FIX}")


def test_and_of_comparisons():
    def k(x: F32, n: lk.i32):
        t = lk.thread_id()
        with lk.if_(t < n and t > 3):                                 # AND
            pass
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# AND",
          f"`and` on a runtime value: the comparison n > tid of kernel integers {NO_TRUTH}; "
          "combine run-time conditions with & instead, as in `lk.if_((a < b) & (c < d))`; "
          "Python's `and` needs a trace-time truth value")


def test_or_of_scalar_comparisons():
    def k(x: F32, a: lk.f32):
        keep = a > 1.0 or a < -1.0                                    # OR
    check(diagnose(k, F32, 1.0, error=lk.TraceError), __file__, "# OR",
          f"`or` on a runtime value: a bool scalar (a run-time comparison) {NO_TRUTH}; "
          "combine run-time conditions with | instead, as in `lk.if_((a < b) | (c < d))`; "
          "Python's `or` needs a trace-time truth value")


def test_not_of_a_comparison():
    def k(x: F32, n: lk.i32):
        with lk.if_(not lk.thread_id() < n):                          # NOT
            pass
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# NOT",
          f"`not` on a runtime value: the comparison n > tid of kernel integers {NO_TRUTH}; "
          "flip the comparison instead (`not a < b` is `a >= b`), or swap the arms of lk.where")


def test_conditional_expression_on_a_scalar():
    def k(x: F32, a: lk.f32):
        scale = 2.0 if a > 0.0 else 0.5                               # IFEXP
    check(diagnose(k, F32, 1.0, error=lk.TraceError), __file__, "# IFEXP",
          f"a conditional expression (`a if cond else b`) on a runtime value: a bool scalar "
          f"(a run-time comparison) {NO_TRUTH}; pick a value at run time with "
          "lk.where(cond, a, b)")


def test_assert_of_a_runtime_condition():
    def k(x: F32, n: lk.i32):
        assert lk.thread_id() < n                                     # ASSERT
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# ASSERT",
          f"an `assert` on a runtime value: the comparison n > tid of kernel integers "
          f"{NO_TRUTH}; an assert runs while tracing, so it can check only constexprs and "
          "plain ints")


def test_chained_comparison():
    def k(x: F32, n: lk.i32):
        with lk.if_(1 <= lk.thread_id() < n):                         # CHAIN
            pass
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# CHAIN",
          f"a chained comparison (`a < b < c`) on a runtime value: the comparison tid >= 1 of "
          f"kernel integers {NO_TRUTH}; write it as two comparisons joined with &: "
          "`(a < b) & (b < c)`")


def test_kernel_integer_as_a_list_index():
    def k(x: F32, n: lk.i32):
        scale = [1.0, 2.0, 4.0][n]                                    # LIST INDEX
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# LIST INDEX",
          "a runtime value used as a Python int: `n` is a kernel integer, known only when the "
          "kernel runs; Python ints (list indices, sizes, int()) must be known while tracing: "
          "use a constexpr, or keep the value in kernel arithmetic")


def test_max_of_kernel_integers():
    def k(x: F32, n: lk.i32):
        last = max(n, lk.thread_id())                                 # MAX
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# MAX",
          f"`max()`/`min()`/`sorted()` on a runtime value: the comparison n < tid of kernel "
          f"integers {NO_TRUTH}; pick at run time with lk.where(a > b, a, b), or "
          "lk.maximum(a, b) / lk.minimum(a, b) for scalars and tensors; Python's max and min "
          "compare while tracing")


# ---- == and != ------------------------------------------------------------------------------
def test_equality_of_kernel_integers_is_not_decided_while_tracing():
    def k(x: F32, n: lk.i32, m: lk.i32):
        if n == m:                                                    # EQ INTEGERS
            lk.store(tile(x, n), lk.full(TV, 1.0))
    check(diagnose(k, F32, 8, 9, error=lk.TraceError), __file__, "# EQ INTEGERS",
          "`==` between runtime values: in `n == m`, n is a kernel integer and m is a kernel "
          "integer, known only when the kernel runs; Python's == would decide it while tracing "
          "(comparing the expressions, not their values) and silently keep one branch; write "
          "lk.eq(n, m) and branch on it with lk.if_ or pick with lk.where")


def test_inequality_of_the_thread_index_and_a_constant():
    def k(x: F32, n: lk.i32):
        with lk.if_(lk.thread_id() != 0):                             # NE THREAD
            pass
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# NE THREAD",
          "`!=` between runtime values: in `lk.thread_id() != 0`, lk.thread_id() is a kernel "
          "integer (tid), known only when the kernel runs; Python's != would decide it while "
          "tracing (comparing the expressions, not their values) and silently keep one branch; "
          "write lk.ne(lk.thread_id(), 0) and branch on it with lk.if_ or pick with lk.where")


def test_equality_of_scalars():
    def k(x: F32, a: lk.f32, b: lk.f32):
        if a == b:                                                    # EQ SCALARS
            pass
    check(diagnose(k, F32, 1.0, 2.0, error=lk.TraceError), __file__, "# EQ SCALARS",
          "`==` between runtime values: in `a == b`, a is an f32 scalar and b is an f32 scalar, "
          "known only when the kernel runs; Python's == would decide it while tracing "
          "(comparing the expressions, not their values) and silently keep one branch; write "
          "lk.eq(a, b) and branch on it with lk.if_ or pick with lk.where")


# ---- in a helper the kernel calls (not rewritten: found where Python raises) -----------------
def below(t, n):
    if t < n:                                                         # HELPER IF
        return 1
    return 0


def halve_until_small(a):
    while a > 1.0:                                                    # HELPER WHILE
        a = a / 2.0
    return a


def differs(a, b):
    return a != b                                                     # HELPER NE


def test_if_in_a_helper_names_the_helper_line():
    def k(x: F32, n: lk.i32):
        below(lk.thread_id(), n)
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# HELPER IF",
          f"an `if` statement on a runtime value: the comparison n > tid of kernel integers "
          f"{NO_TRUTH}; {IF_FIX}")


def test_while_on_a_scalar_in_a_helper():
    def k(x: F32, a: lk.f32):
        halve_until_small(a)
    check(diagnose(k, F32, 4.0, error=lk.TraceError), __file__, "# HELPER WHILE",
          f"a `while` loop on a runtime value: a bool scalar (a run-time comparison) "
          f"{NO_TRUTH}; {WHILE_FIX}")


def test_scalar_inequality_in_a_helper():
    def k(x: F32, a: lk.f32):
        differs(1.0, a)
    check(diagnose(k, F32, 4.0, error=lk.TraceError), __file__, "# HELPER NE",
          "`!=` between runtime values: in `a != b`, b is an f32 scalar, known only when the "
          "kernel runs; Python's != would decide it while tracing (comparing the expressions, "
          "not their values) and silently keep one branch; write lk.ne(a, b) and branch on it "
          "with lk.if_ or pick with lk.where")


# ---- values escaping their region -------------------------------------------------------------
def test_value_made_in_a_branch_used_after_it():
    def k(x: F32, n: lk.i32):
        X = tile(x, n)
        with lk.if_(lk.thread_id() < n):                              # BRANCH OPENS
            v = lk.load(X)                                            # BRANCH DEFINES
        lk.store(X, v)                                                # BRANCH USE
    err = diagnose(k, F32, 8, error=lk.TraceError)
    check(err, __file__, "# BRANCH USE",
          f"`v` (an f32 register tensor) is defined at line {L('# BRANCH DEFINES')} (by "
          f"`load`) inside the lk.if_ opened at line {L('# BRANCH OPENS')}; it is used at line "
          f"{L('# BRANCH USE')} (by `store`), outside it: a value made inside a branch exists "
          "only there; compute it before the lk.if_ (pick between values with lk.where), or "
          "use it inside the branch")


def test_scalar_made_in_a_loop_body_used_after_it():
    def k(x: F32, n: lk.i32, a: lk.f32):
        for i in lk.range(0, n):                                      # LOOP OPENS
            s = a * 2.0                                               # LOOP DEFINES
        lk.store(tile(x, n), lk.full(TV, 1.0) * s)                    # LOOP USE
    check(diagnose(k, F32, 8, 1.0, error=lk.TraceError), __file__, "# LOOP USE",
          f"`s` (an f32 scalar) is defined at line {L('# LOOP DEFINES')} (by `binary mul`) "
          f"inside the lk.range opened at line {L('# LOOP OPENS')}; it is used at line "
          f"{L('# LOOP USE')} (by `binary mul`), outside it: a value made inside a loop body "
          f"exists only there; {CARRY_FIX}")


def test_loop_index_used_after_the_loop():
    def k(x: F32, n: lk.i32):
        for i in lk.range(0, n):                                      # INDEX LOOP
            pass
        lk.store(tile(x, n), lk.full(TV, 0.0) + lk.cast(i, lk.f32))   # INDEX USE
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# INDEX USE",
          f"`i` (the kernel integer i0) is the loop index of the lk.range opened at line "
          f"{L('# INDEX LOOP')}; it is used at line {L('# INDEX USE')} (by `index`), outside "
          "it: a value made inside a loop body exists only there; after the loop, use its "
          "bounds instead (the last index of a step-1 loop is stop - 1), or carry a value out "
          "with carry=")


def test_value_kept_in_a_list_is_named_by_its_item():
    def k(x: F32, n: lk.i32):
        X, kept = tile(x, n), []
        with lk.if_(lk.thread_id() < n):                              # LIST OPENS
            kept.append(lk.load(X))                                   # LIST DEFINES
        lk.store(X, kept[0])                                          # LIST USE
    check(diagnose(k, F32, 8, error=lk.TraceError), __file__, "# LIST USE",
          f"`kept[0]` (an f32 register tensor) is defined at line {L('# LIST DEFINES')} (by "
          f"`load`) inside the lk.if_ opened at line {L('# LIST OPENS')}; it is used at line "
          f"{L('# LIST USE')} (by `store`), outside it: a value made inside a branch exists "
          "only there; compute it before the lk.if_ (pick between values with lk.where), or "
          "use it inside the branch")
