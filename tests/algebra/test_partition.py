"""local_tile and local_partition on layouts: (sub-layout, offset)."""
from layoutkit.algebra import ComposedLayout, Layout, Swizzle, local_partition, local_tile, size


def test_local_tile_selects_the_tile_and_its_offset():
    A = Layout((8, 6))
    tile, off = local_tile(A, (4, 3), (1, 1))
    assert str(tile) == "(4,3):(1,8)" and off == 28
    assert sorted(off + tile(i) for i in range(size(tile))) == sorted(A(r, c) for r in range(4, 8) for c in range(3, 6))


def test_local_tile_with_short_coord_and_projection():
    A = Layout((32, 16))  # (M, K), tiled by the (M, N, K) CTA tiler projected onto (M, K)
    tile, off = local_tile(A, (8, 16, 4), (1, 3, 2), proj=(1, None, 1))
    assert str(tile) == "(8,4):(1,32)"
    assert off == 8 + 2 * 4 * 32
    tile_n, off_n = local_tile(Layout((32, 64)), (8, 16), (1,))
    assert str(tile_n) == "(8,16,4):(1,32,512)" and off_n == 8


def test_local_partition_owns_a_strided_subset():
    data = Layout((16, 64))
    threads = Layout((2, 16), (16, 1))
    seen = []
    for t in range(size(threads)):
        part, off = local_partition(data, threads, t)
        assert str(part) == "(8,4):(2,256)"
        seen += [off + part(i) for i in range(size(part))]
    assert sorted(seen) == list(range(16 * 64))


def test_composed_layout_folds_the_offset():
    S = ComposedLayout(Swizzle(2, 0, 3), 0, Layout((8, 8), (8, 1)))
    tile, off = local_tile(S, (4, 4), (1, 1))
    assert off == 0 and tile.offset == 4 * 8 + 4
    assert [tile(i) for i in range(16)] == [S(4 + (i % 4), 4 + i // 4) for i in range(16)]
