"""The release scope of a remote mbarrier arrive: cluster (the default, MEMBAR.ALL.GPU in
SASS) or cta (no fence: for releasing a stage that only async-proxy reads touched)."""
import pytest

import layoutkit.dsl as lk

from .source_lines import line_of


def make(scope):
    @lk.kernel(num_warps=1, cluster=(2, 1, 1))
    def k(x: lk.Pointer[lk.i32]):
        bar = lk.sm90.mbarrier_array(1, 64, name="bar")
        with lk.if_(lk.thread_id() < 1):
            lk.sm90.mbarrier_init(bar)
            lk.sm90.fence_mbarrier_init()
        lk.sm90.cluster_sync()
        for peer in range(2):
            lk.sm90.mbarrier_arrive(bar[0], cta=peer, **({} if scope is None else {"scope": scope}))
        lk.sm90.mbarrier_wait(bar[0], 0)
        lk.sm90.cluster_sync()
    return k


@pytest.mark.parametrize("scope, text", [(None, "mbarrier.arrive.release.cluster.shared::cluster"),
                                         ("cta", "mbarrier.arrive.release.cta.shared::cluster")])
def test_remote_arrive_scope_reaches_the_ptx(scope, text):
    ptx = make(scope).ptx(lk.Pointer[lk.i32])
    assert ptx.count(text) == 2


def test_a_cta_scoped_remote_arrive_has_no_gpu_fence_in_sass():
    release_cluster = make(None).sass(lk.Pointer[lk.i32]).count("MEMBAR.ALL.GPU")
    release_cta = make("cta").sass(lk.Pointer[lk.i32]).count("MEMBAR.ALL.GPU")
    assert release_cluster - release_cta == 2


def test_unknown_scope_is_refused_with_the_line():
    with pytest.raises(lk.TraceError, match=r"scope = 'gpu' must be 'cluster' or 'cta'") as info:
        make("gpu").ir(lk.Pointer[lk.i32])
    assert info.value.location.line == line_of(__file__, "lk.sm90.mbarrier_arrive(bar[0], cta=peer")
