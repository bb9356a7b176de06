"""DSL kernels with TMA copies (also run on the GPU by tests/gpu/test_dsl_tma_gpu.py): their IR
carries what a checker needs, and their PTX assembles for sm_90a."""
import pytest
import sympy

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

BF16 = lk.Pointer[lk.bf16]
THREADS = 128
# swizzle mode -> (Swizzle on bf16 element offsets, elements per swizzled row)
SWIZZLES = {"none": (None, 64), "32B": (Swizzle(1, 3, 3), 16), "64B": (Swizzle(2, 3, 3), 32),
            "128B": (Swizzle(3, 3, 3), 64)}
TILE_M = 64


def tile_layout(mode: str):
    """A (64, 2 * row) bf16 tile in column blocks of `row` elements (two TMA boxes when
    swizzled), or a plain row-major (64, 64) tile without a swizzle."""
    swizzle, row = SWIZZLES[mode]
    if swizzle is None:
        return Layout((TILE_M, row), (row, 1)), (TILE_M, row)
    inner = Layout((TILE_M, (row, 2)), (row, (1, TILE_M * row)))
    return ComposedLayout(swizzle, 0, inner), (TILE_M, 2 * row)


def reader_tv(width: int = 64):
    """128 threads, 8 consecutive elements each, over a (128 * 8 // width, width) sub-tile
    (width 64: 16 rows x 8 threads; width 32: 32 rows x 4 threads)."""
    across = width // 8
    return lk.tv_layout(Layout((THREADS // across, across), (across, 1)), Layout((1, 8), (1, 1)))


def _first_thread():
    return lk.if_(lk.thread_id() < 1)


@lk.kernel(num_warps=THREADS // 32)
def tma_round_trip(a: BF16, out: BF16, c: BF16, pad: BF16, M: lk.i32, K: lk.i32, PM: lk.i32,
                   PK: lk.i32, MODE: lk.constexpr):
    """Load the (m, k) tile of the ragged (M, K) tensor `a` with TMA into a swizzled shared
    tile; every thread reads it back through the shared layout and writes `out` (masked to
    M x K) and `pad` (PM x PK, M and K rounded up to whole tiles, so zero-filled elements
    show); then TMA-store it to `c`."""
    layout, tile = tile_layout(MODE)
    A = lk.global_tensor(a, Layout((M, K), (K, 1)))
    C = lk.global_tensor(c, Layout((M, K), (K, 1)))
    Out = lk.global_tensor(out, Layout((M, K), (K, 1)))
    Pad = lk.global_tensor(pad, Layout((PM, PK), (PK, 1)))
    s_a = lk.shared_tensor(layout, lk.bf16, name="s_a", align=128)
    full = lk.sm90.mbarrier_array(1, arrive_count=1, name="full")
    with _first_thread():
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    m, k = lk.block_id(0), lk.block_id(1)
    with _first_thread():
        with lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(s_a, A.tile(tile, (m, k)), full[0])
    lk.sm90.mbarrier_wait(full[0], 0)
    width = min(tile[1], 64)
    tv, sub = reader_tv(width), (THREADS * 8 // width, width)
    for i in range(tile[0] // sub[0]):
        for j in range(tile[1] // sub[1]):
            values = lk.load(s_a.tile(sub, (i, j)).partition(tv))
            lk.store(Out.tile(tile, (m, k)).tile(sub, (i, j)).partition(tv), values)
            lk.store(Pad.tile(tile, (m, k)).tile(sub, (i, j)).partition(tv), values)
    with _first_thread():
        lk.sm90.tma_store(C.tile(tile, (m, k)), s_a)
        lk.sm90.tma_store_commit()
        lk.sm90.tma_store_wait(0)


@lk.kernel(num_warps=THREADS // 32, cluster=(2, 1, 1))
def tma_multicast(a: BF16, out: BF16, M: lk.i32, K: lk.i32, TILES_M: lk.i32):
    """Both CTAs of a cluster of 2 load the cluster's (128, 64) tile of the ragged (M, K) `a`
    with one multicast (each issues 64 rows to both); CTA r of the cluster writes its copy to
    rows r * 128 * TILES_M + (tile rows) of `out`, (2 * 128 * TILES_M, K)."""
    A = lk.global_tensor(a, Layout((M, K), (K, 1)))
    Out = lk.global_tensor(out, Layout((2 * 128 * TILES_M, K), (K, 1)))
    s_a = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((128, 64), (64, 1))),
                           lk.bf16, name="s_a")
    full = lk.sm90.mbarrier_array(1, arrive_count=1, name="full")
    with _first_thread():
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    lk.sm90.cluster_sync()                       # the peer's barrier is initialised before we issue
    m, k = lk.sm90.cluster_id(0), lk.block_id(1)
    with _first_thread():
        with lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(s_a, A.tile((128, 64), (m, k)), full[0], multicast="x")
    lk.sm90.mbarrier_wait(full[0], 0)
    tv = reader_tv()
    rank = lk.sm90.block_rank_in_cluster()
    mine = Out.tile((128, 64), (rank * TILES_M + m, k))
    for i in range(128 // 16):
        lk.store(mine.tile((16, 64), (i, 0)).partition(tv),
                 lk.load(s_a.tile((16, 64), (i, 0)).partition(tv)))
    lk.sm90.cluster_sync()                       # no CTA exits while its peer may still write to it


def ops_named(fn, name: str) -> list:
    found, pending = [], [fn.body]
    while pending:
        for op in pending.pop().ops:
            pending.extend(op.blocks)
            if op.name == name:
                found.append(op)
    return found


@pytest.mark.parametrize("mode", list(SWIZZLES))
def test_round_trip_assembles_and_its_ops_carry_the_copy(mode):
    spec = tma_round_trip.specialize(BF16, BF16, BF16, BF16, 200, 136, 256, 256, mode)
    assert spec.cubin.resources["tma_round_trip"].registers > 0     # ptxas -arch=sm_90a ran
    loads, stores = ops_named(spec.ir, "tma_load"), ops_named(spec.ir, "tma_store")
    swizzle, row = SWIZZLES[mode]
    boxes = 1 if swizzle is None else 2
    assert len(loads) == len(stores) == boxes
    for n, op in enumerate(loads):
        a = op.attrs
        assert a["box"] == (row, TILE_M) and a["swizzle"] == mode and a["bytes"] == row * 128
        assert a["tensor"] == "a" and a["modes"] == (1, 0) and a["buffer"] == "s_a"
        assert a["barrier"] == "full" and a["stage"] == 0
        assert a["offset"] == n * TILE_M * row           # second box: the next column block
        kx, mx = a["coords"]
        bid_x, bid_y = sorted(sympy.sympify(mx).free_symbols | sympy.sympify(kx).free_symbols,
                              key=str)
        assert sympy.simplify(mx - TILE_M * bid_x) == 0
        assert sympy.simplify(kx - (boxes * row * bid_y + n * row)) == 0
        assert [str(x) for x in a["tensor_dims"]] == ["K", "M"]
        assert [str(x) for x in a["tensor_strides"]] == ["1", "K"]
    reads = ops_named(spec.ir, "shared_load")               # every element read back, 8 at once
    assert sum(op.attrs["vec"] for op in reads) * THREADS == TILE_M * boxes * row
    assert all(op.attrs["vec"] == 8 for op in reads)
    (arrive,) = ops_named(spec.ir, "mbarrier_arrive_expect_tx")
    assert arrive.attrs["tx_bytes"] == boxes * row * 128          # the whole tile, derived
    text = spec.ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" \
        in text
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in text
    assert "cp.async.bulk.commit_group;" in text and "cp.async.bulk.wait_group.read 0;" in text
    assert text.count(".param .align 64 .b8 tmap_") == 2
    assert [op.attrs["name"] for op in spec.ir.hidden] == ["tmap_a", "tmap_c"]


def test_multicast_slices_the_box_and_charges_the_whole_tile():
    spec = tma_multicast.specialize(BF16, BF16, 300, 136, 3)
    assert spec.cubin.resources["tma_multicast"].registers > 0
    (load,) = ops_named(spec.ir, "tma_load")
    a = load.attrs
    assert a["box"] == (64, 64) and a["bytes"] == 64 * 64 * 2           # one slice per CTA
    mc = a["multicast"]
    assert mc["ctas"] == 2 and mc["pattern"] == 0b11 and mc["slice_dim"] == 1
    (rank,) = [s for s in sympy.sympify(mc["slot"]).free_symbols]
    assert str(rank) == "cta_rank"
    for r in (0, 1):
        assert sympy.sympify(a["offset"]).subs(rank, r) == r * 64 * 64      # its half of s_a
        row = sympy.sympify(a["coords"][1]).subs(rank, r)
        assert sympy.simplify(row - sympy.sympify(a["coords"][1]).subs(rank, 0)) == 64 * r
    (arrive,) = ops_named(spec.ir, "mbarrier_arrive_expect_tx")
    assert arrive.attrs["tx_bytes"] == 128 * 64 * 2        # both halves land in every CTA
    assert ".multicast::cluster" in spec.ptx and ".reqnctapercluster 2, 1, 1" in spec.ptx


def test_store_wait_variants_lower_to_bulk_group_waits():
    @lk.kernel(num_warps=1)
    def k(c: BF16, M: lk.i32):
        C = lk.global_tensor(c, Layout((M, 64), (64, 1)))
        s_c = lk.shared_tensor(Layout((32, 64), (64, 1)), lk.bf16, align=128)
        lk.sm90.fence_proxy_async()
        lk.barrier()
        with _first_thread():
            lk.sm90.tma_store(C.tile((32, 64), (lk.block_id(0), 0)), s_c)
            lk.sm90.tma_store_commit()
            lk.sm90.tma_store_wait(1)
            lk.sm90.tma_store_wait(0, writes=True)
    with lk.protocol_check_skipped():       # s_c is never written: lowering only
        text = k.ptx(BF16, 1000)
        k.specialize(BF16, 1000).cubin      # ptxas takes it
    assert "cp.async.bulk.wait_group.read 1;" in text and "cp.async.bulk.wait_group 0;" in text
    assert "fence.proxy.async.shared::cta;" in text


@lk.kernel(num_warps=4)
def ring_loads(a: BF16, M: lk.i32, K: lk.i32):
    A = lk.global_tensor(a, Layout((M, K), (K, 1)))
    ring = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0,
                                           Layout((128, 64, 4), (64, 1, 8192))), lk.bf16)
    full = lk.sm90.mbarrier_array(4, arrive_count=1, name="full")
    empty = lk.sm90.mbarrier_array(4, arrive_count=128, name="empty")
    with _first_thread():
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    for kk in lk.range(0, K // 64):
        p, c = lk.sm90.producer_state(kk, 4), lk.sm90.consumer_state(kk, 4)
        with _first_thread():
            lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
            with lk.sm90.expect_tx(full[p.stage]):
                lk.sm90.tma_load(ring[:, :, p.stage], A.tile((128, 64), (lk.block_id(0), kk)),
                                 full[p.stage])
        lk.sm90.mbarrier_wait(full[c.stage], c.phase)
        lk.sm90.mbarrier_arrive(empty[c.stage])


def test_a_ring_stage_chosen_at_run_time_is_a_tma_destination():
    spec = ring_loads.specialize(BF16, 1024, 1024)
    spec.cubin
    (load,) = ops_named(spec.ir, "tma_load")
    (kk,) = sympy.sympify(load.attrs["stage"]).free_symbols
    assert sympy.simplify(load.attrs["offset"] - 8192 * sympy.Mod(kk, 4)) == 0
    assert load.attrs["bytes"] == 16384 and load.attrs["box"] == (64, 128)
