"""TMA derivation from layouts (box, swizzle, tensor-map dims/strides, coordinates) against
hand-computed values, for K-major and MN-major bf16 tiles and every swizzle mode."""
import pytest
import sympy

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle, symbol
from layoutkit.dsl.sm90.tma.derive import plan_copies, swizzle_mode, tensor_modes, tma_swizzle

BF16 = lk.Pointer[lk.bf16]
M, N, K = symbol("M", 1), symbol("N", 16), symbol("K", 16)


@pytest.mark.parametrize("mode, bits, element_bytes, base", [
    ("32B", 1, 2, 3), ("64B", 2, 2, 3), ("128B", 3, 2, 3),
    ("128B", 3, 1, 4), ("128B", 3, 4, 2), ("64B", 2, 8, 1)])
def test_swizzle_modes_on_element_offsets(mode, bits, element_bytes, base):
    # hopper-ptx.md: 128B = byte bits [6:4] ^= [9:7] = Sw<3,4,3> on bytes; on b-byte elements
    # the 16-byte chunk starts at bit 4 - log2(b)
    assert tma_swizzle(mode, element_bytes) == Swizzle(bits, base, 3)
    assert swizzle_mode(Swizzle(bits, base, 3), element_bytes, "t") == mode
    for offset in range(0, 4096, 7):       # bytes agree with the byte-level pattern
        byte_level = Swizzle(bits, 4, 3)(offset * element_bytes) // element_bytes
        assert Swizzle(bits, base, 3)(offset) == byte_level


@pytest.mark.parametrize("mode, row", [("none", 64), ("32B", 16), ("64B", 32), ("128B", 64)])
def test_k_major_tile_is_one_box(mode, row):
    # A[M, K] row-major, tile 128 x row, shared row-major (K innermost): box {row, 128}
    sw = tma_swizzle(mode, 2)
    plan = plan_copies(2, contiguous=1, tile_extents=(128, row),
                       shared=(Layout(128, row), Layout(row, 1)), swizzle=sw, offset=0)
    assert plan.order == (1, 0) and plan.box == (row, 128) and plan.swizzle == mode
    assert plan.copies == (((0, 0), 0),)
    assert plan.box_bytes == plan.total_bytes == 128 * row * 2


@pytest.mark.parametrize("mode, row", [("32B", 16), ("64B", 32), ("128B", 64)])
def test_wide_k_major_tile_in_column_blocks_is_several_boxes(mode, row):
    # tile 128 x 128 bf16: 128 / row column blocks of 128 rows each, block j at j * 128 * row
    blocks = 128 // row
    plan = plan_copies(2, contiguous=1, tile_extents=(128, 128),
                       shared=(Layout(128, row), Layout((row, blocks), (1, 128 * row))),
                       swizzle=tma_swizzle(mode, 2), offset=0)
    assert plan.box == (row, 128)
    assert plan.copies == tuple(((j * row, 0), j * 128 * row) for j in range(blocks))
    assert plan.total_bytes == 128 * 128 * 2


def test_mn_major_tile_from_an_n_major_tensor():
    # B[K, N] with N contiguous, tile (K=64, N=128), shared N-major in 64-wide column blocks
    # of 64 K-rows (wgmma's MN-major 128B-swizzle operand): boxes {64 N, 64 K}
    plan = plan_copies(2, contiguous=1, tile_extents=(64, 128),
                       shared=(Layout(64, 64), Layout((64, 2), (1, 4096))),
                       swizzle=Swizzle(3, 3, 3), offset=8192)
    assert plan.order == (1, 0) and plan.box == (64, 64) and plan.swizzle == "128B"
    assert plan.copies == (((0, 0), 0), ((64, 0), 4096))


def test_k_major_b_operand_from_a_k_contiguous_tensor():
    # B stored (N, K) with K contiguous: same as A, mode 1 innermost
    modes = tensor_modes(Layout((N, K), (K, 1)), (N, K), "t")
    assert modes.contiguous == 1 and modes.strides == (K, 1) and modes.extents == (N, K)
    plan = plan_copies(2, contiguous=modes.contiguous, tile_extents=(256, 64),
                       shared=(Layout(256, 64), Layout(64, 1)), swizzle=Swizzle(3, 3, 3),
                       offset=0)
    assert plan.box == (64, 256) and len(plan.copies) == 1


def test_box_dimension_over_256_splits():
    plan = plan_copies(2, contiguous=1, tile_extents=(512, 64),
                       shared=(Layout(512, 64), Layout(64, 1)), swizzle=None, offset=0)
    assert plan.box == (64, 256)
    assert plan.copies == (((0, 0), 0), ((0, 256), 256 * 64))


def test_no_swizzle_rows_wider_than_a_box_become_one_row_boxes():
    # 16 x 512 f32 row-major: a row is 2 boxes of 256, rows are 512 apart -> 32 boxes {256, 1}
    plan = plan_copies(4, contiguous=1, tile_extents=(16, 512),
                       shared=(Layout(16, 512), Layout(512, 1)), swizzle=None, offset=0)
    assert plan.box == (256, 1) and len(plan.copies) == 32
    assert sorted(s for _, s in plan.copies) == list(range(0, 16 * 512, 256))


def test_multicast_split_slices_the_outermost_box_dimension():
    plan = plan_copies(2, contiguous=1, tile_extents=(128, 64),
                       shared=(Layout(128, 64), Layout(64, 1)), swizzle=Swizzle(3, 3, 3),
                       offset=0, split=2)
    assert plan.box == (64, 64) and plan.slice == (1, 2, 64 * 64)
    assert plan.box_bytes == 8192 and plan.total_bytes == 16384


def test_three_mode_tensor_dims_and_strides():
    # (batch, seq, d) with d contiguous; FlashAttention-style tile (1, 128, 64)
    B, S = symbol("B", 1), symbol("S", 1)
    modes = tensor_modes(Layout((B, S, 64), (S * 64, 64, 1)), (B, S, 64), "t")
    assert modes.strides == (S * 64, 64, 1) and modes.contiguous == 2
    plan = plan_copies(2, contiguous=2, tile_extents=(1, 128, 64),
                       shared=(Layout(1, 0), Layout(128, 64), Layout(64, 1)),
                       swizzle=Swizzle(3, 3, 3), offset=0)
    assert plan.order == (2, 1, 0) and plan.box == (64, 128, 1)


def test_hierarchical_tensor_mode_that_is_one_stride_is_accepted():
    modes = tensor_modes(Layout(((2, M), K), ((K, 2 * K), 1)), (2 * M, K), "t")
    assert modes.strides == (K, 1)


def test_kernel_coordinates_dims_and_strides_in_tma_order():
    @lk.kernel(num_warps=1)
    def k(b: BF16, Kp: lk.i32, Np: lk.i32, T: lk.constexpr):
        Bt = lk.global_tensor(b, Layout((Kp, Np), (Np, 1)))          # N-major B[K, N]
        s_b = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0,
                                              Layout((64, (64, 2)), (64, (1, 4096)))), lk.bf16)
        full = lk.sm90.mbarrier_array(1, arrive_count=1)
        with lk.if_(lk.thread_id() < 1):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        lk.barrier()
        for kk in lk.range(0, T):
            with lk.if_(lk.thread_id() < 1):    # one thread arms full[0] (count 1) and loads
                with lk.sm90.expect_tx(full[0]):
                    lk.sm90.tma_load(s_b, Bt.tile((64, 128), (kk, lk.block_id(0))), full[0])
            lk.sm90.mbarrier_wait(full[0], kk % 2)
            lk.barrier()                        # all passed phase kk before thread 0 arms kk+1
    ir = k.ir(BF16, 1024, 512, 4)
    (arm,) = [op for op in ir.body.ops[-1].blocks[0].ops if op.name == "if"]
    loads = [op for op in arm.blocks[0].ops if op.name == "tma_load"]
    assert len(loads) == 2
    for j, op in enumerate(loads):
        a = op.attrs
        n_coord, k_coord = (sympy.sympify(c) for c in a["coords"])
        assert [str(s) for s in a["tensor_dims"]] == ["Np", "Kp"]
        assert [str(s) for s in a["tensor_strides"]] == ["1", "Np"]
        assert str(n_coord) == f"128*bid_x + {64 * j}" if j else str(n_coord) == "128*bid_x"
        assert str(k_coord) == "64*i0"
        assert a["offset"] == 4096 * j and a["box"] == (64, 64)
