"""mbarrier rings, warp roles, clusters on the CPU interpreter: results, deadlocks that name who
waits on what (and who last arrived where), and races through a missing wait."""
import numpy as np
import pytest

from layoutkit.dsl.interpreter import DeadlockError, RaceError, interpret

from .. import source_lines
from ..sync_kernels import cluster_ring, ring_pingpong, wrong_parity
from . import kernels
from .kernels import ring


def line_of(text: str) -> int:
    return source_lines.line_of(kernels.__file__, text)


@pytest.mark.parametrize("seed", [0, 1])
def test_ring_pingpong_with_warp_roles(seed):
    n, out = 5, np.zeros(384, np.int32)
    interpret(ring_pingpong, 1, out, n, seed=seed)
    t = np.arange(128, 384)
    np.testing.assert_array_equal(out[128:], 3 * n * (n - 1) // 2 + n * (1 + t % 128))


def test_wrong_parity_is_a_deadlock_naming_the_barrier_and_parity():
    with pytest.raises(DeadlockError) as info:
        interpret(wrong_parity, 1, np.zeros(4, np.int32))
    assert "warps 0-3 (threads 0-127) waits empty[0] parity 0 (its phase 0, parity 0, is " \
           "open: 0 of 128 arrivals" in str(info.value)


def test_short_producer_deadlock_names_roles_and_last_arrivals():
    with pytest.raises(DeadlockError) as info:
        interpret(ring, 1, np.zeros(256, np.int32), 3, 1, True, seed=4)
    text = str(info.value)
    assert (f"consumer warpgroup 1: warps 4-7 (threads 128-255) waits full[0] parity 1 "
            f"(its phase 1, parity 1, is open: 0 of 128 arrivals, 0 transaction bytes "
            f"outstanding) (line {line_of('# consumer wait')})") in text
    assert (f"producer warpgroup 0: warps 0-3 (threads 0-127) exited (ran off the end of the "
            f"kernel); last arrived on full[1] (line {line_of('# producer arrive')})") in text


def test_reading_a_slot_without_waiting_on_full_is_a_race():
    lines = {line_of("# consumer load"), line_of("# producer store")}
    for seed in range(3):
        with pytest.raises(RaceError) as info:
            interpret(ring, 1, np.zeros(256, np.int32), 3, 0, False, seed=seed)
        assert info.value.location.line in lines


def test_ring_result_is_the_same_for_every_seed():
    outs = []
    for seed in range(3):
        out = np.zeros(256, np.int32)
        interpret(ring, 1, out, 4, 0, True, seed=seed)
        outs.append(out)
    t = np.arange(128, 256)
    np.testing.assert_array_equal(outs[0][128:], 6 + 4 * (t % 128))
    assert all((o == outs[0]).all() for o in outs)


def test_cluster_remote_arrive_and_ranks():
    out = np.full(4, -1, np.int32)
    interpret(cluster_ring, 4, out, 4, seed=3)
    np.testing.assert_array_equal(out, [0, 1, 0, 1])
