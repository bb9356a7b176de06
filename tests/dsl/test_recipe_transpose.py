"""recipes/transpose.py on the CPU: its PTX assembles for sm_90a with no spills and 16-byte
accesses on every side, the swizzle it picks is bank-conflict-free where the usual 128-byte
swizzle is not, its TV layouts tile exactly, and bad arguments are refused by name."""
import warnings

import pytest

import layoutkit as lk
from layoutkit.ptx import RegisterSpillWarning, assemble
from tests.dsl.test_recipes_compile import load_recipe

transpose = load_recipe("transpose")


class FakeTensor:
    """The attributes transpose.check_arguments reads from a torch tensor (no torch here)."""

    def __init__(self, shape, dtype="torch.bfloat16", cuda=True, contiguous=True):
        self.shape, self.dtype, self.is_cuda = tuple(shape), dtype, cuda
        self.device = "cuda:0" if cuda else "cpu"
        self._contiguous = contiguous

    def is_contiguous(self):
        return self._contiguous

    def stride(self):
        return (1, self.shape[0]) if len(self.shape) == 2 else (1,)


def test_default_specializations_assemble_without_spills_with_16_byte_accesses():
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # a register spill is a warning: fail on it
        for name, ptx in transpose.compile_default().items():
            width = "b32" if "bf16" in name else "f32"
            for access in ("ld.global", "st.shared", "ld.shared", "st.global"):
                vector = f"{access}.v4.{width}"
                assert ptx.count(vector) == 8, (name, vector)   # 8 chunks a thread, each side
            assert ptx.count("bar.sync 0;") == 1, name
            assert assemble(ptx).resources[f"transpose_{name.split()[1]}"].spill_store_bytes == 0


@pytest.mark.parametrize("dtype, swizzle", [(lk.bf16, "Sw<3,3,6>"), (lk.f16, "Sw<3,3,6>"),
                                            (lk.f32, "Sw<3,2,5>")])
def test_the_chosen_swizzle_is_conflict_free_and_the_usual_one_is_not(dtype, swizzle):
    smem = transpose.choose_swizzle(dtype)
    assert str(smem.outer) == swizzle
    load, blocks, _ = transpose.layouts(dtype)
    assert transpose.bank_conflicts(smem, load, dtype) == 0
    assert transpose.bank_conflicts(smem, blocks, dtype) == 0
    c = 16 // dtype.nbytes
    usual = transpose.smem_layout(dtype, 3)             # Sw<3,M,3>: XOR of row % 8
    assert transpose.bank_conflicts(usual, load, dtype) == 0
    assert transpose.bank_conflicts(usual, blocks, dtype) > 0
    unswizzled = lk.ComposedLayout(lk.Swizzle(0, c.bit_length() - 1, 0), 0, smem.inner)
    # without a swizzle every BLOCKS phase hits one bank group: 7 extra wavefronts each
    phases = 128 // 32 * 4 * (blocks.num_values // c)
    assert transpose.bank_conflicts(unswizzled, blocks, dtype) == 7 * phases


@pytest.mark.parametrize("dtype", [lk.bf16, lk.f32])
def test_layouts_cover_each_tile_element_once_and_store_is_the_transpose(dtype):
    c, rows, cols = transpose.tile_shape(dtype)
    for tv in transpose.layouts(dtype):
        hit = sorted(tv.layout(t, v) for t in range(128) for v in range(tv.num_values))
        assert hit == list(range(rows * cols))
    perm = transpose.transposed_values(dtype)       # asserts the transpose for every thread
    assert sorted(perm) == list(range(rows * cols // 128))


def test_ragged_unaligned_shapes_assemble_with_narrower_accesses():
    ptr = lk.Pointer[lk.bf16]
    ptx = transpose.kernel_for(lk.bf16).ptx(ptr, ptr, 1000, 777, False)
    assert "ld.global.v4" not in ptx and "st.global.v4" not in ptx    # n odd: scalar rows
    assert "st.shared.v4.b32" in ptx                                   # the tile stays wide
    with warnings.catch_warnings():
        # 64 predicated 2-byte loads a thread: ptxas may spill a few bytes on this slow path
        warnings.simplefilter("ignore", RegisterSpillWarning)
        usage = assemble(ptx).resources["transpose_bf16"]
    assert usage.spill_store_bytes <= 16


def test_grid_puts_the_longer_tile_count_on_x():
    assert transpose.grid(4096, 64, lk.bf16) == ((32, 1), True)
    assert transpose.grid(64, 1 << 22, lk.bf16) == ((65536, 1), False)


@pytest.mark.parametrize("x, out, error, message", [
    ([[1.0]], None, TypeError, r"x must be a torch tensor, got list"),
    (FakeTensor((4, 4), "torch.float64"), None, TypeError,
     r"x has dtype torch.float64; supported: torch.bfloat16, torch.float16, torch.float32"),
    (FakeTensor((4, 4), cuda=False), None, ValueError, r"x is on cpu; it must be a CUDA tensor"),
    (FakeTensor((2, 3, 4)), None, ValueError,
     r"x must be a contiguous 2-D \(row-major\) matrix, got shape \(2, 3, 4\)"),
    (FakeTensor((4, 8), contiguous=False), None, ValueError, r"contiguous 2-D"),
    (FakeTensor((4, 8)), FakeTensor((4, 8)), ValueError,
     r"out must be a contiguous torch.bfloat16 tensor of shape \(8, 4\) on cuda:0, got "
     r"torch.bfloat16 \(4, 8\)"),
    (FakeTensor((4, 8)), FakeTensor((8, 4), "torch.float32"), ValueError, r"out must be"),
])
def test_bad_arguments_are_refused_by_name(x, out, error, message):
    with pytest.raises(error, match=message):
        transpose.check_arguments(x, out)


def test_good_arguments_give_the_element_type():
    assert transpose.check_arguments(FakeTensor((4, 8), "torch.float32"),
                                     FakeTensor((8, 4), "torch.float32")) == lk.f32
