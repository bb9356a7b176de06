"""lk.sm90.stmatrix: registers in an 8x8-matrix fragment -> a shared tile, checked on the CPU
interpreter against the data, in PTX, and through its errors (the worked example of
docs/extending.md)."""
import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.interpreter import from_bf16, interpret, to_bf16
from layoutkit.ptx import assemble

from .source_lines import line_of

ATOMS = lk.sm80.mma_sync_layouts("m16n8k16", lk.bf16, lk.f32)   # a: a (16, 16) ldmatrix.x4 fragment
ROWS = lk.TVLayout((16, 16), Layout(((2, 16), 8), ((128, 1), 16)))  # lane: 8 elements of a row
TILE = Layout((16, 16), (16, 1))
SWIZZLED = ComposedLayout(Swizzle(1, 3, 3), 0, TILE)


def _kernel(shared_layout, fragment):
    @lk.kernel(num_warps=1)
    def roundtrip(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16]):
        """y = x (16 x 16): x loaded in the fragment, stmatrix'd into shared, read back by rows."""
        s = lk.shared_tensor(shared_layout, lk.bf16)
        values = lk.load(lk.global_tensor(x, TILE).partition(fragment))
        lk.sm90.stmatrix(s.partition(fragment), values)
        lk.barrier()
        lk.store(lk.global_tensor(y, TILE).partition(ROWS), lk.load(s.partition(ROWS)))
    return roundtrip


@pytest.mark.parametrize("shared_layout", [TILE, SWIZZLED], ids=["plain", "swizzled"])
def test_the_stored_tile_is_the_loaded_one(shared_layout):
    kernel = _kernel(shared_layout, ATOMS.a)
    ptx = kernel.ptx(lk.Pointer[lk.bf16], lk.Pointer[lk.bf16])
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 1
    assert assemble(ptx).resources["roundtrip"].spill_store_bytes == 0   # ptxas takes it
    rng = np.random.default_rng(3)
    x = to_bf16(rng.standard_normal((16, 16)).astype(np.float32))
    y = np.zeros_like(x)
    interpret(kernel, 1, x, y)
    np.testing.assert_array_equal(from_bf16(y), from_bf16(x))


def test_a_transposed_fragment_stores_with_trans():
    # the b fragment read from an n-contiguous (8, 16) tile is a .trans matrix (as for ldmatrix)
    nk = Layout((8, 16), (1, 8))
    rows = lk.TVLayout((8, 16), Layout(((2, 16), 4), ((4, 8), 1)))

    @lk.kernel(num_warps=1)
    def transposed(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16]):
        s = lk.shared_tensor(nk, lk.bf16)
        values = lk.load(lk.global_tensor(x, nk).partition(ATOMS.b))
        lk.sm90.stmatrix(s.partition(ATOMS.b), values)
        lk.barrier()
        lk.store(lk.global_tensor(y, nk).partition(rows), lk.load(s.partition(rows)))
    assert ".trans.shared.b16" in transposed.ptx(lk.Pointer[lk.bf16], lk.Pointer[lk.bf16])
    rng = np.random.default_rng(4)
    x = to_bf16(rng.standard_normal(128).astype(np.float32))
    y = np.zeros_like(x)
    interpret(transposed, 1, x, y)
    np.testing.assert_array_equal(from_bf16(y), from_bf16(x))


@lk.kernel(num_warps=1, target="sm_80")
def on_sm80(x: lk.Pointer[lk.bf16]):
    s = lk.shared_tensor(TILE, lk.bf16)
    values = lk.load(lk.global_tensor(x, TILE).partition(ATOMS.a))
    lk.sm90.stmatrix(s.partition(ATOMS.a), values)   # SM80


@lk.kernel(num_warps=1)
def mismatched(x: lk.Pointer[lk.bf16]):
    s = lk.shared_tensor(TILE, lk.bf16)
    values = lk.load(lk.global_tensor(x, TILE).partition(ROWS))
    lk.sm90.stmatrix(s.partition(ATOMS.a), values)   # MISMATCH


@lk.kernel(num_warps=1)
def unsynchronized(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16]):
    s = lk.shared_tensor(TILE, lk.bf16)
    values = lk.load(lk.global_tensor(x, TILE).partition(ATOMS.a))
    lk.sm90.stmatrix(s.partition(ATOMS.a), values)
    lk.store(lk.global_tensor(y, TILE).partition(ROWS), lk.load(s.partition(ROWS)))  # NO BARRIER


def test_stmatrix_is_an_sm90_op():
    with pytest.raises(lk.TraceError, match=r"IR op 'stmatrix' exists on sm_90a; this kernel's "
                       r"target is 'sm_80'") as info:
        on_sm80.ptx(lk.Pointer[lk.bf16])
    assert info.value.location.line == line_of(__file__, "# SM80")


def test_registers_in_another_layout_are_refused():
    with pytest.raises(lk.LayoutMismatchError, match="lk.sm90.stmatrix: the register tensor and "
                       "the destination partition have different layouts") as info:
        mismatched.ptx(lk.Pointer[lk.bf16])
    assert info.value.location.line == line_of(__file__, "# MISMATCH")


def test_the_interpreter_sees_a_read_of_other_lanes_rows_without_a_barrier():
    from layoutkit.dsl.interpreter import RaceError
    x = to_bf16(np.ones(256, np.float32))
    with lk.protocol_check_skipped(), pytest.raises(RaceError):
        for seed in range(8):
            interpret(unsynchronized, 1, x, np.zeros_like(x), seed=seed)
