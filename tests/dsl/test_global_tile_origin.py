"""A tile past a static extent of 1 keeps its true origin (found on the H200: the warp-
specialized GEMM with M = 1 stored its second warpgroup's rows, all out of bounds, over row 0,
because the algebra folds a size-1 rest mode's stride to 0)."""
import layoutkit.dsl as lk
from layoutkit.algebra import Layout


def test_tile_one_of_an_extent_of_one_starts_past_the_edge():
    seen = {}

    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32], n: lk.i32):
        X = lk.global_tensor(x, Layout((1, n), (n, 1)))
        seen["origins"] = [co for _, co in X.tile((64, 32), (1, 2)).coords]
        seen["inside"] = [co for _, co in X.tile((64, 32), (0, 2)).coords]

    k.ir(lk.Pointer[lk.f32], 100)
    assert seen["origins"] == [64, 64] and seen["inside"] == [0, 64]


def test_tma_store_of_that_tile_targets_row_64():
    from layoutkit.algebra import ComposedLayout, Swizzle

    @lk.kernel(num_warps=4)
    def k(c: lk.Pointer[lk.bf16], n: lk.i32):
        C = lk.global_tensor(c, Layout((1, n), (n, 1)))
        tile = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((64, 64), (64, 1))),
                                lk.bf16)
        with lk.if_(lk.thread_id() < 1):
            lk.sm90.tma_store(C.tile((64, 64), (1, 0)), tile)
            lk.sm90.tma_store_commit()
            lk.sm90.tma_store_wait(0)

    with lk.protocol_check_skipped():       # the tile is never written: lowering only
        fn = k.ir(lk.Pointer[lk.bf16], 64)
    ops = [op for op in fn.body.ops[-1].blocks[0].ops if op.name == "tma_store"]
    assert [op.attrs["coords"] for op in ops] == [(0, 64)]


def test_rank_one_tensor_of_extent_one_masks_every_block_past_it():
    # Found writing docs/dsl.md: with n == 1 (the '1' specialization) a 1-D tensor tiled per
    # block let every block through the mask, each writing element 0 again.
    import numpy as np

    from layoutkit.dsl.interpreter import interpret

    @lk.kernel(num_warps=1)
    def add_one(y: lk.Pointer[lk.f32], n: lk.i32):
        tv = lk.tv_layout(Layout(32), Layout(1))
        Y = lk.global_tensor(y, Layout(n)).tile((32,), (lk.block_id(0),)).partition(tv)
        lk.store(Y, lk.load(Y) + 1.0)

    for n in (1, 2, 40):
        y = np.zeros(n, np.float32)
        interpret(add_one, 3, y, n)
        assert (y == 1.0).all(), (n, y)
