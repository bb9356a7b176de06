"""lk.atomic_add: f32 register tensors added into global memory by red.global.add (vectors of
2 or 4 where the layouts allow), checked on the CPU interpreter against numpy (many CTAs
adding into one buffer, ragged bounds), in PTX through ptxas, and through its errors."""
import numpy as np
import pytest

import layoutkit as lk
from layoutkit.ptx import assemble

from .source_lines import line_of

P32 = lk.Pointer[lk.f32]
ROW4 = lk.tv_layout(lk.Layout(32), lk.Layout(4))          # lane l: elements 4l .. 4l+3
ROW4_2D = lk.TVLayout((1, 128), lk.Layout((32, 4), (4, 1)))   # the same over a (1, 128) tile
PAIRS = lk.tv_layout(lk.Layout(64), lk.Layout(2))         # 2 warps, lane l: 2l, 2l+1


@lk.kernel(num_warps=1)
def add_rows(x: lk.Tensor[lk.f32, 2], acc: lk.Tensor[lk.f32, 2]):
    """acc[0] += x[b] for every block b (acc (1, x.shape[1]), tiles of 128)."""
    for t in lk.range(0, (x.shape[1] + 127) // 128):
        values = lk.load(x.tile((1, 128), (lk.block_id(0), t)).partition(ROW4_2D))
        lk.atomic_add(acc.tile((1, 128), (0, t)).partition(ROW4_2D), values)


def _add_rows_reference(rows: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    acc = rng.standard_normal((1, n)).astype(np.float32)
    return x, acc, acc.astype(np.float64) + x.astype(np.float64).sum(axis=0)


@pytest.mark.parametrize("n", [128, 300, 5])
def test_every_block_adds_into_one_buffer(n):
    x, acc, want = _add_rows_reference(6, n, seed=n)
    lk.dsl.interpreter.interpret(add_rows, 6, x, acc)
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-5)


def test_consecutive_aligned_values_are_one_vector_reduction():
    aligned = add_rows.ptx(lk.TensorSpec(lk.f32, (6, 256)), lk.TensorSpec(lk.f32, (1, 256)))
    assert "red.global.add.v4.f32" in aligned
    ragged = add_rows.ptx(lk.TensorSpec(lk.f32, (6, 300)), lk.TensorSpec(lk.f32, (1, 300)))
    assert "red.global.add.f32" in ragged and ".v4.f32" not in ragged    # masked one by one
    for ptx in (aligned, ragged):
        assert assemble(ptx).resources["add_rows"].spill_store_bytes == 0


@lk.kernel(num_warps=2)
def add_pairs(acc: lk.Pointer[lk.f32]):
    lk.atomic_add(lk.global_tensor(acc, lk.Layout(128)).partition(PAIRS),
                  lk.full(PAIRS, 1.0))


def test_pairs_are_v2_and_every_thread_adds():
    assert "red.global.add.v2.f32" in add_pairs.ptx(P32)
    acc = np.zeros(128, np.float32)
    lk.dsl.interpreter.interpret(add_pairs, 3, acc)
    np.testing.assert_array_equal(acc, np.full(128, 3.0, np.float32))


@lk.kernel(num_warps=1)
def into_bf16(acc: lk.Pointer[lk.bf16]):
    lk.atomic_add(lk.global_tensor(acc, lk.Layout(128)).partition(ROW4),   # BF16
                  lk.full(ROW4, 1.0))


@lk.kernel(num_warps=1)
def other_layout(acc: lk.Pointer[lk.f32]):
    lk.atomic_add(lk.global_tensor(acc, lk.Layout(128)).partition(ROW4),   # LAYOUT
                  lk.full(lk.tv_layout(lk.Layout(32, 4), lk.Layout(4, 1)), 1.0))


@lk.kernel(num_warps=1)
def into_shared(acc: lk.Pointer[lk.f32]):
    s = lk.shared_tensor(lk.Layout(128), lk.f32)
    lk.atomic_add(s.partition(ROW4), lk.full(ROW4, 1.0))   # SHARED


@lk.kernel(num_warps=1)
def f32_into_f32_from_i32(acc: lk.Pointer[lk.f32]):
    lk.atomic_add(lk.global_tensor(acc, lk.Layout(128)).partition(ROW4),   # DTYPE
                  lk.full(ROW4, 1, lk.i32))


@lk.kernel(num_warps=1)
def a_scalar(acc: lk.Pointer[lk.f32]):
    lk.atomic_add(lk.global_tensor(acc, lk.Layout(128)).partition(ROW4), 1.0)   # SCALAR


@pytest.mark.parametrize("kernel, pointer, marker, error, message", [
    (into_bf16, lk.Pointer[lk.bf16], "# BF16", lk.TraceError,
     "the destination holds bf16; atomic addition here is on f32 memory"),
    (other_layout, P32, "# LAYOUT", lk.LayoutMismatchError,
     "the register tensor and the destination partition have different layouts"),
    (into_shared, P32, "# SHARED", lk.TraceError,
     "adds into a thread's partition of a global tensor"),
    (f32_into_f32_from_i32, P32, "# DTYPE", lk.TraceError,
     r"a i32 tensor into f32 memory; cast it explicitly with lk.cast\(x, lk.f32\)"),
    (a_scalar, P32, "# SCALAR", lk.TraceError, "lk.atomic_add adds a register tensor, got 1.0"),
])
def test_errors_name_the_rule_and_the_line(kernel, pointer, marker, error, message):
    with pytest.raises(error, match=message) as info:
        kernel.ptx(pointer)
    assert info.value.location.line == line_of(__file__, marker)
