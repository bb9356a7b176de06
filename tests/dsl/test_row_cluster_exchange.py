"""recipes/_rowwise_kernel.py's cluster exchange (row sums of rows split over a cluster, through
distributed shared memory) on the CPU interpreter: the sums against numpy, and why a
persistent loop with one exchange a round needs the exchange's first cluster barrier or a
buffer doubled by round parity (without either a CTA overwrites a slot its peer has not read
yet: the static check's cluster race, and the interpreter's)."""
import numpy as np
import pytest

import layoutkit as lk
from layoutkit.dsl.check.protocol import protocol_check_skipped
from layoutkit.dsl.interpreter import interpret
from layoutkit.dsl.interpreter.errors import RaceError
from recipes import _rowwise_kernel as rk

P, ROWS, C, K, CLUSTER = 32, 1, 4, 1, 2      # a warp per CTA, 128 columns a CTA, 2 CTAs a row
N = CLUSTER * P * C * K
F32 = lk.Pointer[lk.f32]


def persistent_sums(start: bool, doubled: bool = False):
    """y[r] = sum of row r of x (m, N), rows r = i * ctas + cluster, one exchange a round
    (into a buffer doubled by round parity when `doubled`)."""
    def sums(x: F32, y: F32, m: lk.i32, rounds: lk.i32, ctas: lk.i32):
        tv = rk.row_layout(P, ROWS, C, K)
        lk.sm90.cluster_sync()                           # the peers have started
        for i in lk.range(0, rounds):
            row = rk.row_block(CLUSTER) + i * ctas
            v = lk.load(rk.rows_view(x, m, N, tv, row, CLUSTER))
            (total,) = rk.row_sums([v], row, P, ROWS, CLUSTER, start=start,
                                   parity=i % 2 if doubled else None)
            with lk.if_(rk.first_of_row(P, CLUSTER)):
                lk.store(rk.scalars_view(y, m, P, ROWS, row), total)
    return lk.kernel(sums, num_warps=1, cluster=(CLUSTER, 1, 1))


@pytest.mark.parametrize("start, doubled", [(True, False), (False, True)])
def test_row_sums_over_a_cluster_match_numpy_in_every_round(start, doubled):
    m, ctas = 5, 2
    kernel = persistent_sums(start, doubled)
    kernel.ptx(F32, F32, m, 3, ctas)                     # the static check passes it
    x = np.random.default_rng(0).standard_normal((m, N)).astype(np.float32)
    for seed in (0, 1):
        y = np.full(m, np.nan, np.float32)
        interpret(kernel, CLUSTER * ctas, x, y, m, 3, ctas, seed=seed)
        np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_an_exchange_without_its_first_barrier_races_with_the_previous_round():
    kernel = persistent_sums(False)
    with pytest.raises(lk.ProtocolError) as info:
        kernel.ptx(F32, F32, 5, 3, 2)
    assert {f.kind for f in info.value.findings} == {"cluster race"}
    x = np.ones((5, N), np.float32)
    with protocol_check_skipped(), pytest.raises(RaceError, match="no lk.sm90.cluster_sync"):
        for seed in range(4):                            # some interleaving shows it
            interpret(kernel, CLUSTER * 2, x, np.zeros(5, np.float32), 5, 3, 2, seed=seed)


@pytest.fixture
def late_peers_barrier(monkeypatch):
    """rk.PEERS_STARTED_LATE on, every row kernel built afresh (make_kernel's cache holds
    kernels traced with the flag off), and afresh again after the test."""
    monkeypatch.setattr(rk, "PEERS_STARTED_LATE", True)
    rk.make_kernel.cache_clear()
    yield
    rk.make_kernel.cache_clear()


@pytest.mark.parametrize("recipe", ["softmax", "layernorm", "rmsnorm", "softmax_backward"])
def test_the_late_peers_barrier_is_ordered_and_correct(late_peers_barrier, monkeypatch, recipe):
    """The single-exchange kernels with their relaxed cluster barrier right before the
    exchange (bench_rows --peers late): the static check passes their cluster cases and the
    interpreter matches float64 (each recipe's check_cpu has a row split over a cluster).
    rmsnorm's check_cpu runs only its cases split over a cluster (5 of 12): the flag changes
    no kernel of one CTA a row (no exchange, peers_started a no-op), and
    tests/dsl/test_recipe_rmsnorm.py runs every case."""
    import importlib
    module = importlib.import_module(f"recipes.{recipe}")
    if recipe == "rmsnorm":
        cases = module.cpu_cases()
        clustered = tuple([c for c in group if c[3].CLUSTER > 1] for group in cases)
        assert all(clustered)                       # forward and backward cluster kernels
        monkeypatch.setattr(module, "cpu_cases", lambda: clustered)
    assert module.check_cpu() <= 2 ** -7
