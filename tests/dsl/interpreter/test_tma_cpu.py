"""TMA copies on the CPU interpreter: ragged round trips through every swizzle mode (zero fill,
clipped stores), the hardware's address-bit swizzle against the derived element swizzle, a
cluster multicast, and the races and hangs of misused copies, each named at its source line."""
import copy
import warnings

import numpy as np
import pytest

from layoutkit.dsl.interpreter import (DeadlockError, MemoryFaultError, RaceError, interpret,
                                       run_ir, to_bf16)
from layoutkit.dsl.sm90.tma.derive import tma_swizzle
from layoutkit.ptx.isa.smem_swizzle import swizzle_address

from .. import source_lines
from ..test_tma_kernels import SWIZZLES, tile_layout, tma_multicast, tma_round_trip
from . import hopper_kernels
from .hopper_kernels import store_then_overwrite, tma_then_read

NAN = 0x7FC0


def line_of(text: str) -> int:
    return source_lines.line_of(hopper_kernels.__file__, text)


def round_trip_args(mode: str, m: int, k: int, seed: int = 0):
    _, tile = tile_layout(mode)
    a = to_bf16(np.random.default_rng(seed).standard_normal((m, k)))
    grid = (-(-m // tile[0]), -(-k // tile[1]))
    pm, pk = grid[0] * tile[0], grid[1] * tile[1]
    out, c = np.full((m, k), NAN, np.uint16), np.full((m, k), NAN, np.uint16)
    pad = np.full((pm, pk), NAN, np.uint16)
    return grid, (a, out, c, pad, m, k, pm, pk, mode)


@pytest.mark.parametrize("mode", list(SWIZZLES))
def test_round_trip_zero_fills_and_clips_in_every_swizzle_mode(mode):
    m, k = 70, 136
    grid, args = round_trip_args(mode, m, k)
    interpret(tma_round_trip, grid, *args, seed=1)
    a, out, c, pad = args[:4]
    np.testing.assert_array_equal(out, a)         # read back through the shared layout
    np.testing.assert_array_equal(c, a)           # TMA store, clipped at the ragged edges
    np.testing.assert_array_equal(pad[:m, :k], a)
    assert not pad[m:].any() and not pad[:, k:].any()      # zero-filled box elements


@pytest.mark.parametrize("element_bytes", [1, 2, 4, 8])
@pytest.mark.parametrize("mode", ["32B", "64B", "128B"])
def test_hardware_swizzle_is_the_derived_element_swizzle(mode, element_bytes):
    elements = np.arange(4096 // element_bytes)
    sw = tma_swizzle(mode, element_bytes)
    derived = np.array([sw(int(x)) for x in elements]) * element_bytes
    np.testing.assert_array_equal(swizzle_address(elements * element_bytes, mode), derived)


def test_a_tma_mode_other_than_the_layouts_swizzle_scrambles_the_tile():
    m, k = 64, 128
    grid, args = round_trip_args("128B", m, k)
    fn = copy.deepcopy(tma_round_trip.ir(*args))
    for op in fn.body.ops:
        for inner in [op] + [o for b in op.blocks for o in b.ops]:
            if inner.name == "tma_load":
                inner.attrs["swizzle"] = "64B"
    run_ir(fn, grid, args, seed=2)
    a, out = args[:2]
    assert (out != a).any()
    np.testing.assert_array_equal(np.sort(out, axis=None), np.sort(a, axis=None))   # moved


@pytest.mark.parametrize("m, k", [(128, 64), (300, 136)])
def test_multicast_delivers_the_tile_to_both_ctas_of_the_cluster(m, k):
    a = to_bf16(np.random.default_rng(m).standard_normal((m, k)))
    tiles_m = -(-m // 128)
    out = np.full((2 * 128 * tiles_m, k), NAN, np.uint16)
    interpret(tma_multicast, (2 * tiles_m, -(-k // 64)), a, out, m, k, tiles_m, seed=3)
    for rank in (0, 1):
        mine = out[rank * 128 * tiles_m:(rank + 1) * 128 * tiles_m]
        np.testing.assert_array_equal(mine[:m], a)
        assert not mine[m:].any()


def test_reading_a_stage_before_waiting_on_its_barrier_is_a_race_at_the_read():
    a = to_bf16(np.random.default_rng(4).standard_normal((64, 64)))
    out = np.zeros_like(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # the protocol check's own finding
        interpret(tma_then_read, 1, a, out, 64, True)
        np.testing.assert_array_equal(out, a)
        for seed in range(6):       # the copy still landing (a claim) or landed (happens-before)
            with pytest.raises(RaceError) as info:
                interpret(tma_then_read, 1, a, np.zeros_like(a), 64, False, seed=seed)
            assert info.value.location.line == line_of("# the stage read")
            assert "TMA load" in str(info.value) and "full[0]" in str(info.value) or \
                "wait on the barrier first" in str(info.value)


def test_overwriting_a_tma_store_source_before_its_wait_is_a_race():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = np.zeros((32, 64), np.uint16)
        interpret(store_then_overwrite, 1, c, True)
        np.testing.assert_array_equal(c, to_bf16(np.ones((32, 64))))
        with pytest.raises(RaceError, match="which the TMA store issued at line") as info:
            interpret(store_then_overwrite, 1, np.zeros((32, 64), np.uint16), False)
    assert info.value.location.line == line_of("# the overwrite")


def test_fewer_bytes_than_expected_is_a_deadlock_naming_the_outstanding_bytes():
    grid, args = round_trip_args("none", 64, 64)
    fn = copy.deepcopy(tma_round_trip.ir(*args))
    found = []

    def walk(block):
        for op in block.ops:
            if op.name == "mbarrier_arrive_expect_tx":
                op.attrs["tx_bytes"] += 128
                found.append(op)
            for inner in op.blocks:
                walk(inner)
    walk(fn.body)
    assert found
    with pytest.raises(DeadlockError, match=r"waits full\[0\] parity 0 .* 128 transaction "
                                            r"bytes outstanding"):
        run_ir(fn, grid, args, seed=0)


def test_a_tensor_larger_than_its_array_is_a_memory_fault():
    grid, args = round_trip_args("none", 64, 64)
    short = args[0].reshape(-1)[:64 * 32].copy()
    with pytest.raises(MemoryFaultError, match="the tensor map of a"):
        interpret(tma_round_trip, grid, short, *args[1:])
