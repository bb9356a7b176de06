"""Every warp-role, named-barrier, elect and cluster mistake is a trace-time error naming the
rule and the user's source line (a whole-CTA barrier inside a role would hang: refused)."""
import pytest
import sympy

import layoutkit.dsl as lk

from . import source_lines

PTR = lk.Pointer[lk.f32]


def line_of(text: str) -> int:
    return source_lines.line_of(__file__, text)


def trace_error(body, num_warps=12, error=lk.TraceError, **options):
    def fn(x: PTR, n: lk.i32):
        body()
    with pytest.raises(error) as info:
        lk.Kernel(fn, num_warps, **options).ptx(PTR, 8)
    return info.value


def check(error, marker: str, *fragments: str) -> None:
    message = str(error)
    for fragment in fragments:
        assert fragment in message, message
    assert error.location is not None and error.location.line == line_of(marker), message


def test_whole_cta_barrier_inside_a_role_is_refused():
    def body():
        with lk.sm90.warp_role("producer", warpgroups=0, registers=24):
            lk.barrier()  # BARRIER IN ROLE
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
            pass
    check(trace_error(body), "# BARRIER IN ROLE", "lk.barrier()", "inside warp role 'producer'",
          "hangs", "lk.sm90.named_barrier_sync")


def test_cluster_sync_inside_a_role_is_refused():
    def body():
        with lk.sm90.warp_role("all", warpgroups=(0,)):
            lk.sm90.cluster_sync()  # CLUSTER IN ROLE
    check(trace_error(body, num_warps=4, cluster=2), "# CLUSTER IN ROLE", "lk.sm90.cluster_sync()",
          "inside warp role 'all'")


def test_overlapping_roles():
    def body():
        with lk.sm90.warp_role("a", warpgroups=(0, 1)):
            pass
        with lk.sm90.warp_role("b", warpgroups=(1, 2)):  # OVERLAP
            pass
    check(trace_error(body), "# OVERLAP", "warpgroups 1..2 overlap role 'a'", "disjoint")


def test_roles_must_cover_the_block():
    def body():
        with lk.sm90.warp_role("a", warpgroups=(0,)):  # NOT COVERING
            pass
        with lk.sm90.warp_role("b", warpgroups=(2,)):
            pass
    check(trace_error(body), "# NOT COVERING", "warpgroup(s) [1]", "cover the block")


def test_register_budget_over_the_pool():
    def body():
        with lk.sm90.warp_role("producer", warpgroups=0, registers=240):  # OVER BUDGET
            pass
        with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
            pass
    check(trace_error(body), "# OVER BUDGET", "128*240 (producer) + 256*240 (consumer)",
          "exceed the CTA's pool of 64512", "block forever")


@pytest.mark.parametrize("registers", [20, 100, 264])
def test_register_count_is_a_setmaxnreg_immediate(registers):
    def body():
        with lk.sm90.warp_role("r", warpgroups=(0, 1, 2), registers=registers):  # BAD REGS
            pass
    check(trace_error(body), "# BAD REGS", f"registers = {registers}", "multiple of 8 in 24..256")


def test_role_placement_rules():
    def nested():
        with lk.sm90.warp_role("a", warpgroups=(0, 1, 2)):
            with lk.sm90.warp_role("b", warpgroups=0):  # NESTED
                pass
    check(trace_error(nested), "# NESTED", "top level")

    def after():
        with lk.sm90.warp_role("a", warpgroups=(0, 1, 2)):
            pass
        lk.barrier()  # AFTER ROLES
    check(trace_error(after), "# AFTER ROLES", "code after the warp roles")

    def twice():
        with lk.sm90.warp_role("a", warpgroups=0):
            pass
        with lk.sm90.warp_role("a", warpgroups=(1, 2)):  # TWICE
            pass
    check(trace_error(twice), "# TWICE", "opened twice")

    def gaps():
        with lk.sm90.warp_role("a", warpgroups=(0, 2)):  # GAPS
            pass
    check(trace_error(gaps), "# GAPS", "must be consecutive")

    def odd():
        with lk.sm90.warp_role("a", warpgroups=0):  # ODD WARPS
            pass
    check(trace_error(odd, num_warps=6), "# ODD WARPS", "num_warps=6 is not a multiple of 4")


@pytest.mark.parametrize("barrier_id, threads, fragment", [
    (0, 128, "id 0 is the whole-CTA barrier of lk.barrier()"),
    (16, 128, "must be in 0..15"),
    (3, 48, "multiple of 32"),
    (3, 512, "exceed the block's 384"),
])
def test_named_barrier_id_and_count_rules(barrier_id, threads, fragment):
    def body():
        lk.sm90.named_barrier_sync(barrier_id, threads)  # NAMED RULE
    check(trace_error(body), "# NAMED RULE", fragment)


def test_named_barrier_counts_must_agree_and_fit_the_roles():
    def disagree():
        with lk.sm90.warp_role("p", warpgroups=0, registers=24):
            lk.sm90.named_barrier_arrive(2, 288)
        with lk.sm90.warp_role("c", warpgroups=(1, 2), registers=240):
            lk.sm90.named_barrier_sync(2, 256)  # DISAGREE
    check(trace_error(disagree), "# DISAGREE", "named barrier 2 counts 256 threads here but 288",
          "same count")

    def too_many():
        with lk.sm90.warp_role("p", warpgroups=0, registers=24):
            pass
        with lk.sm90.warp_role("c", warpgroups=(1, 2), registers=240):
            lk.sm90.named_barrier_sync(4, 288)  # TOO MANY
    check(trace_error(too_many), "# TOO MANY", "named barrier 4", "exceeds the 256 threads of "
          "role(s) c")


def test_elect_and_barriers_need_whole_warps():
    def divergent():
        with lk.if_(lk.thread_id() < 5):
            with lk.sm90.elect_one():  # DIVERGENT ELECT
                pass
    check(trace_error(divergent), "# DIVERGENT ELECT", "lk.sm90.elect_one()",
          "may differ between the lanes of a warp")

    def sync_in_elect():
        with lk.sm90.elect_one():
            lk.sm90.named_barrier_sync(1, 384)  # SYNC IN ELECT
    check(trace_error(sync_in_elect), "# SYNC IN ELECT", "inside lk.sm90.elect_one()")

    def barrier_in_elect():
        with lk.sm90.elect_one():
            lk.barrier()  # BARRIER IN ELECT
    check(trace_error(barrier_in_elect), "# BARRIER IN ELECT", "lk.barrier()",
          "inside lk.sm90.elect_one()", "hangs")

    def uniform():   # a warp-uniform condition is fine
        with lk.if_(sympy.Eq(lk.warp_id(), 3)):
            with lk.sm90.elect_one():
                lk.sm90.fence_proxy_async()

    def fn(x: PTR, n: lk.i32):
        uniform()
    assert "elect.sync" in lk.Kernel(fn, 12).ptx(PTR, 8)


def test_cluster_rules():
    def no_cluster():
        lk.sm90.cluster_sync()  # NO CLUSTER SYNC
    check(trace_error(no_cluster), "# NO CLUSTER SYNC", "needs a cluster kernel")

    def rank_outside():
        lk.sm90.block_rank_in_cluster()  # NO CLUSTER RANK
    check(trace_error(rank_outside), "# NO CLUSTER RANK", "needs a cluster kernel")

    def in_branch():
        with lk.if_(lk.thread_id() < 5):
            lk.sm90.cluster_sync()  # CLUSTER IN IF
    check(trace_error(in_branch, cluster=2), "# CLUSTER IN IF", "inside lk.if_")


@pytest.mark.parametrize("cluster, fragment", [
    ((3, 3), "9 CTAs; a portable cluster has at most 8"),
    ((0, 1), "tuple of 1 to 3 positive ints"),
    ("2", "tuple of 1 to 3 positive ints"),
])
def test_bad_cluster_shapes_are_definition_errors(cluster, fragment):
    with pytest.raises(lk.KernelDefinitionError, match=fragment):
        @lk.kernel(num_warps=4, cluster=cluster)
        def k(x: PTR):
            pass


def test_bad_debug_option_is_a_definition_error():
    with pytest.raises(lk.KernelDefinitionError, match="debug='yes'"):
        @lk.kernel(debug="yes")
        def k(x: PTR):
            pass
