"""GlobalTensor.window(mode, start, stop): the rows of one sequence of a packed batch as a tensor
of their own. Masked loads and stores follow its origin and stop a ragged tile at stop (the
interpreter against numpy on random ragged batches, an empty sequence included); a TMA load
goes through the whole tensor's map at the shifted coordinates (rows past stop are the next
sequence's, zeros past the extent) and a TMA store is not clipped at stop (as documented); the
PTX compares start + row with stop; every misuse is a TraceError naming the rule."""
import re

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import from_bf16, interpret, to_bf16

ROWS, COLS = 64, 64
EVERYONE = lk.TVLayout((1,), Layout((128, 1), (0, 0)))         # 128 threads, one element
ROW_READER = lk.tv_layout(Layout((16, 8), (8, 1)), Layout((1, 8), (1, 1)))   # (16, 64) rows


def sequence(cu, b):
    """(start, stop) of sequence b: cu[b], cu[b+1] as kernel integers."""
    start, stop = (lk.index_value(lk.load(cu.tile((1,), (b + i,)).partition(EVERYONE)), lo=0)
                   for i in (0, 1))
    return start, stop


@lk.kernel(num_warps=4)
def shift_rows(x: lk.Tensor[lk.f32, 2], y: lk.Tensor[lk.f32, 2], cu: lk.Tensor[lk.i32, 1]):
    """y[r] = x[r] + 10 * b for every row r of sequence b (x, y packed (total, 64)); CTA (t, b)
    takes rows t*64 .. t*64+63 of sequence b."""
    t, b = lk.block_id(0), lk.block_id(1)
    start, stop = sequence(cu, b)
    X, Y = (z.window(0, start, stop) for z in (x, y))
    for i in range(ROWS // 16):
        src = X.tile((ROWS, COLS), (t, 0)).tile((16, COLS), (i, 0)).partition(ROW_READER)
        dst = Y.tile((ROWS, COLS), (t, 0)).tile((16, COLS), (i, 0)).partition(ROW_READER)
        lk.store(dst, lk.load(src) + lk.cast(10 * b, lk.f32))


@pytest.mark.parametrize("seed", [0, 1])
def test_masked_loads_and_stores_follow_the_window(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(n) for n in rng.integers(1, 150, 4)] + [0, 7]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    x = rng.standard_normal((int(cu[-1]), COLS)).astype(np.float32)
    y = np.full_like(x, np.nan)
    grid = (-(-max(lengths) // ROWS), len(lengths))
    interpret(shift_rows, grid, x, y, cu, seed=seed)
    want = x + 10 * np.repeat(np.arange(len(lengths)), lengths)[:, None].astype(np.float32)
    np.testing.assert_array_equal(y, want)        # every row once, with its own sequence's b


def test_the_mask_compares_start_plus_row_with_stop():
    t = lk.TensorSpec(lk.f32, (1000, COLS))
    ptx = shift_rows.ptx(t, t, lk.TensorSpec(lk.i32, (9,)))
    start, stop = re.findall(r"ld\.global\.s32 (%\w+),", ptx)[:2]
    assert re.search(rf"setp\.lt\.s32 %p\d+, %\w+, {re.escape(stop)};", ptx)
    assert re.search(rf"add\.s32 %\w+, (%\w+, {re.escape(start)}|{re.escape(start)}, %\w+);",
                     ptx)
    assert "ld.global.v4.f32" in ptx and "st.global.v4.f32" in ptx      # the rows stay vectors


SWIZZLED = lk.ComposedLayout(lk.Swizzle(3, 3, 3), 0, Layout((ROWS, COLS), (COLS, 1)))


@lk.kernel(num_warps=4)
def tma_window(x: lk.Tensor[lk.bf16, 2], seen: lk.Tensor[lk.bf16, 2], y: lk.Tensor[lk.bf16, 2],
               cu: lk.Tensor[lk.i32, 1]):
    """CTA b: TMA-loads tile 0 of sequence b's window of x; writes the whole box to seen[b]
    (rows b*64 .. b*64+63, whatever the sequence's length) and TMA-stores it to tile 0 of y's
    window."""
    b = lk.block_id(0)
    start, stop = sequence(cu, b)
    s = lk.shared_tensor(SWIZZLED, lk.bf16, name="s", align=1024)
    full = lk.sm90.mbarrier_array(1, 1, name="full")
    with lk.if_(lk.thread_id() < 1):
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    with lk.if_(lk.thread_id() < 1), lk.sm90.expect_tx(full[0]):
        lk.sm90.tma_load(s, x.window(0, start, stop).tile((ROWS, COLS), (0, 0)), full[0])
    lk.sm90.mbarrier_wait(full[0], 0)
    for i in range(ROWS // 16):
        values = lk.load(s.tile((16, COLS), (i, 0)).partition(ROW_READER))
        lk.store(seen.tile((ROWS, COLS), (b, 0)).tile((16, COLS), (i, 0)).partition(ROW_READER),
                 values)
    lk.sm90.fence_proxy_async()
    lk.barrier()
    with lk.if_(lk.thread_id() < 1):
        lk.sm90.tma_store(y.window(0, start, stop).tile((ROWS, COLS), (0, 0)), s)
        lk.sm90.tma_store_commit()
        lk.sm90.tma_store_wait(0)


def test_tma_copies_go_through_the_whole_tensors_map_at_the_shifted_origin():
    rng = np.random.default_rng(3)
    cu = np.array([0, 20, 100, 130], np.int32)        # the last tile reaches past the extent
    total = int(cu[-1])
    x = to_bf16(rng.standard_normal((total, COLS)))
    seen = np.zeros((3 * ROWS, COLS), np.uint16)
    y = np.zeros((total, COLS), np.uint16)
    interpret(tma_window, 3, x, seen, y, cu)
    padded = np.concatenate([from_bf16(x), np.zeros((ROWS, COLS))])
    for b, start in enumerate(cu[:-1]):
        # the box: the sequence's rows, then the next sequence's, zeros past the tensor's end
        np.testing.assert_array_equal(from_bf16(seen[b * ROWS:(b + 1) * ROWS]),
                                      padded[start:start + ROWS])
    # the TMA store is not clipped at stop: each CTA wrote 64 rows from its start (those past
    # its stop are the next sequence's, with their own values), clipped only at the extent
    written = np.zeros(total, bool)
    for start in cu[:-1]:
        written[start:start + ROWS] = True
    assert written[20:64].all() and not written[84:100].any()    # sequence 0's box crossed
    np.testing.assert_array_equal(y, np.where(written[:, None], x, 0))


@pytest.mark.parametrize("make, message", [
    (lambda x, n: x.tile((64, 64), (0, 0)).window(0, 0, n), r"window\(0, 0, n\): a window "
     r"narrows a mode of a whole tensor .* before tiling or partitioning"),
    (lambda x, n: x.window(2, 0, n), r"window\(2, 0, n\): mode is a Python int in 0\.\.1 \(the "
     r"tensor .* has 2 modes\), got 2"),
    (lambda x, n: x.window(0, 0.5, n), r"start is a kernel integer .* got 0\.5"),
    (lambda x, n: lk.global_tensor(x.ptr, Layout((n, 64), (64, 1)), bounds=None).window(0, 0, n),
     r"mode 0 of .* is unmasked \(bounds None\); a window masks its mode at stop"),
    (lambda x, n: lk.global_tensor(x.ptr, Layout(((8, n), 64), ((64, 512), 1))).window(0, 0, n),
     r"mode 0 of .* is \(8,n\):\(64,512\), not one extent and stride"),
    (lambda x, n: x.window(0, 0, n).permute(1, 0), r"permute reorders the modes of a whole "
     r"tensor"),
])
def test_misuse_is_a_trace_error_naming_the_rule(make, message):
    @lk.kernel(num_warps=4)
    def k(x: lk.Tensor[lk.f32, 2], n: lk.i32):
        make(x, n)
    with pytest.raises(lk.TraceError, match=message):
        k.ptx(lk.TensorSpec(lk.f32, (256, 64)), 17)
