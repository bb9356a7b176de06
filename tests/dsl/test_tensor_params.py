"""lk.Tensor[dtype, rank] parameters: the facts that specialize (layoutkit.dsl.core.tensor_args),
what the kernel sees, the objects a tensor argument may be (torch, DLPack, the CUDA array
interface, numpy, lk.TensorSpec), every refused argument's message, the CPU interpreter on
strided views, TMA tensor maps read from a tensor's fields, and the launch fast path (fake GPU:
tests/dsl/fake_gpu.py) packing the same bytes as the checked path."""
import struct

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.core.tensor_args import tensor_view
from layoutkit.dsl.interpreter import ExecutionError, from_bf16, interpret, to_bf16

from .fake_gpu import BASE, FakeGPU, Tensor
from .test_tma_kernels import reader_tv, tile_layout


@lk.kernel(num_warps=1)
def scale(x: lk.Tensor[lk.f32, 1], y: lk.Tensor[lk.f32, 1], a: lk.f32):
    """y = a * x, 4 consecutive elements per thread; each tensor masked by its own extent."""
    tv = lk.tv_layout(Layout(32), Layout(4))
    X = x.tile((128,), (lk.block_id(0),)).partition(tv)
    Y = y.tile((128,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a)


@lk.kernel(num_warps=1)
def scale_rows(x: lk.Tensor[lk.f32, 2], y: lk.Tensor[lk.f32, 2], a: lk.f32):
    """y = a * x over a matrix, block (j, i) taking 128 columns of row i."""
    tv = lk.tv_layout(Layout((1, 32)), Layout((1, 4)))
    X = x.tile((1, 128), (lk.block_id(1), lk.block_id(0))).partition(tv)
    Y = y.tile((1, 128), (lk.block_id(1), lk.block_id(0))).partition(tv)
    lk.store(Y, lk.load(X) * a)


def spec(shape, strides=None, dtype=lk.f32, aligned=True):
    return lk.TensorSpec(dtype, shape, strides, aligned)


# ---- facts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, strides, aligned, fact", [
    ((4096, 128), None, True, (True, True, "16", "16", "16", "1")),
    ((1000, 60), (64, 1), True, (True, True, "+", "+", "16", "1")),
    ((1000, 60), (61, 1), False, (False, True, "+", "+", "+", "1")),
    ((64, 1), (1, 1), True, (True, True, "16", "+", "1", "1")),          # two unit strides
    ((8, 64), (0, 1), True, (True, True, "+", "16", "0", "1")),          # broadcast rows
    ((2 ** 16, 2 ** 16), None, True, (True, False, "16", "16", "16", "1")),   # 2^32 elements
    ((3, 5), (5 * 2 ** 31, 1), True, (True, False, "+", "+", "16", "1")),     # a 2^31 stride
])
def test_the_key_holds_alignment_index_width_and_per_mode_facts(shape, strides, aligned, fact):
    assert scale_rows.key(spec(shape, strides, aligned=aligned), spec((4, 4)), 1.0)[0] == fact


def test_the_kernel_sees_symbols_with_the_facts_and_constant_strides():
    seen = {}

    @lk.kernel(num_warps=1)
    def look(q: lk.Tensor[lk.bf16, 3]):
        seen["layout"], seen["shape"], seen["stride"] = str(q.layout), q.shape, q.stride
        seen["permuted"] = str(q.permute(2, 0, 1).layout)
        seen["divisors"] = [getattr(s, "divisor", None) for s in q.shape + q.stride]
    look.ir(spec((2, 48, 64), (0, 64, 1), lk.bf16))
    assert seen["layout"] == "(q_shape0,q_shape1,q_shape2):(0,q_stride1,1)"
    assert seen["permuted"] == "(q_shape2,q_shape0,q_shape1):(1,0,q_stride1)"
    # extents: multiples of 16 where the key says so; a '16' stride: 16 bytes = 8 bf16
    assert seen["divisors"] == [1, 16, 16, None, 8, None]
    params = [(op.attrs["name"], str(op.results[0].type)) for op in look.ir(
        spec((2, 48, 64), (0, 64, 1), lk.bf16)).params]
    assert params == [("q", "Pointer[bf16]"), ("q_shape0", "i32"), ("q_shape1", "i32"),
                      ("q_shape2", "i32"), ("q_stride0", "i32"), ("q_stride1", "i32"),
                      ("q_stride2", "i32")]


def test_a_tensor_past_2_31_elements_has_64_bit_fields():
    ptx = scale.ptx(spec((2 ** 31 + 16,)), spec((16,)), 1.0)
    assert ".param .s64 x_shape0" in ptx and ".param .s32 y_shape0" in ptx


def test_the_facts_pick_the_code():
    def ops(*args):
        ptx = scale.ptx(*args, 2.0)
        return sorted({w for line in ptx.splitlines() for w in line.split()
                       if w.startswith(("ld.global", "st.global"))})
    assert ops(spec((4096,)), spec((4096,))) == ["ld.global.v4.f32", "st.global.v4.f32"]
    assert ops(spec((4096,), (2,)), spec((4096,))) == ["ld.global.f32", "st.global.v4.f32"]
    assert ops(spec((4096,), aligned=False), spec((4096,))) == ["ld.global.f32",
                                                                "st.global.v4.f32"]


# ---- what a tensor argument may be -----------------------------------------------------------
class CudaArray:
    """An object with only the CUDA array interface (as CuPy or Numba device arrays)."""

    def __init__(self, ptr, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


class DLPackOnly:
    """An object with only __dlpack__ / __dlpack_device__ (a numpy array's, so a host one)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_cuda_array_interface_dlpack_and_numpy_read_alike():
    a = np.zeros((6, 40), np.float32)[1:, 4:36]
    views = [tensor_view(CudaArray(a.ctypes.data, a.shape, "<f4", a.strides)),
             tensor_view(DLPackOnly(a)), tensor_view(a)]
    assert {(v.address, v.shape, v.strides, v.dtype) for v in views} == {
        (a.ctypes.data, (5, 32), (40, 1), lk.f32)}
    assert [v.memory for v in views] == ["cuda", "host", "host"]
    contiguous = tensor_view(CudaArray(BASE, (3, 8), "<f2"))        # strides None: row-major
    assert (contiguous.strides, contiguous.dtype, contiguous.memory) == ((8, 1), lk.f16, "cuda")


def test_torch_tensors_read_shape_strides_and_device():
    torch = pytest.importorskip("torch")
    x = torch.zeros(8, 40)[:, 4:36]
    view = tensor_view(x)
    assert (view.shape, view.strides, view.dtype, view.memory) == ((8, 32), (40, 1), lk.f32,
                                                                   "host")
    assert scale_rows.key(x, x, 1.0)[0] == (True, True, "+", "16", "16", "1")


@pytest.mark.parametrize("value, message", [
    (spec((8, 8)), r"argument x: a tensor of rank 2 \(shape \(8, 8\)\) given for "
                   r"x: Tensor\[f32, 1\]; its rank must be 1"),
    (np.zeros(8, np.float64), r"argument x: a tensor of f64 given for x: Tensor\[f32, 1\] "
                              r"\(no implicit conversion\)"),
    (np.zeros(8, np.uint16), r"argument x: a tensor of uint16 given for x: Tensor\[f32, 1\] "
                             r"\(no implicit conversion; raw bits need 4-byte elements"),
    (np.frombuffer(bytearray(64), np.float32, 8, 2), r"argument x: its data address 0x[0-9a-f]+ "
                                                     r"is not a multiple of 4 bytes"),
    (np.zeros(0, np.float32), r"argument x: mode 0 of its shape \(0,\) is 0; a Tensor's "
                              r"extents are positive"),
    (np.zeros(8, np.float32)[::-1], r"argument x: mode 0 of its strides \(-1,\) is -1; a "
                                    r"Tensor's strides are non-negative"),
    ([1.0, 2.0], r"argument x: \[1.0, 2.0\] is not a tensor"),
])
def test_wrong_tensor_arguments_name_the_parameter_value_and_rule(value, message):
    with pytest.raises(lk.KernelArgumentError, match=message):
        scale.key(value, spec((8,)), 1.0)


def test_bf16_bits_travel_as_uint16_and_a_parameter_may_not_shadow_a_field():
    @lk.kernel(num_warps=1)
    def copy(x: lk.Tensor[lk.bf16, 1]):
        pass
    assert copy.key(np.zeros(8, np.uint16))[0] == (True, True, "+", "1")

    with pytest.raises(lk.KernelDefinitionError, match="parameter x_shape0 is named like the "
                                                       "extent/stride parameter of tensor x"):
        @lk.kernel(num_warps=1)
        def clash(x: lk.Tensor[lk.f32, 1], x_shape0: lk.i32):
            pass


def test_permute_is_for_whole_tensors():
    @lk.kernel(num_warps=1)
    def bad(x: lk.Tensor[lk.f32, 2], HOW: lk.constexpr):
        if HOW == "tile":
            x.tile((1, 4), (0, 0)).permute(1, 0)
        else:
            x.permute(0, 0)
    with pytest.raises(lk.TraceError, match="permute reorders the modes of a whole tensor"):
        bad.ir(spec((4, 4)), "tile")
    with pytest.raises(lk.TraceError, match=r"permute\(0, 0\) of a tensor of 2 modes"):
        bad.ir(spec((4, 4)), "twice")


# ---- the CPU interpreter -------------------------------------------------------------------
def test_the_interpreter_runs_on_strided_views_and_writes_through_them():
    big = np.arange(7 * 300, dtype=np.float32).reshape(7, 300)
    x = big[1:6, 10:290]                       # 5 x 280, row stride 300
    out = np.full((5, 320), -1.0, np.float32)
    y = out[:, 8:288]
    interpret(scale_rows, (3, 5), x, y, 2.0)
    assert np.array_equal(y, 2 * x)
    assert (out[:, :8] == -1).all() and (out[:, 288:] == -1).all()     # nothing outside y


def test_the_interpreter_refuses_a_tensor_spec():
    with pytest.raises(ExecutionError, match="takes numpy arrays for Tensor parameters, got "
                                             "TensorSpec"):
        interpret(scale, 1, spec((128,)), np.zeros(128, np.float32), 1.0)


@lk.kernel(num_warps=4)
def tma_copy(a: lk.Tensor[lk.bf16, 2], out: lk.Tensor[lk.bf16, 2]):
    """Tile (m, k) of `a` by TMA (128-byte swizzle), read back from shared memory, stored to
    `out`: the tensor map's extents and strides are a's fields."""
    layout, tile = tile_layout("128B")
    s_a = lk.shared_tensor(layout, lk.bf16, name="s_a", align=128)
    full = lk.sm90.mbarrier_array(1, arrive_count=1, name="full")
    with lk.if_(lk.thread_id() < 1):
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    m, k = lk.block_id(0), lk.block_id(1)
    with lk.if_(lk.thread_id() < 1):
        with lk.sm90.expect_tx(full[0]):
            lk.sm90.tma_load(s_a, a.tile(tile, (m, k)), full[0])
    lk.sm90.mbarrier_wait(full[0], 0)
    tv, sub = reader_tv(64), (16, 64)
    for i in range(tile[0] // sub[0]):
        for j in range(tile[1] // sub[1]):
            lk.store(out.tile(tile, (m, k)).tile(sub, (i, j)).partition(tv),
                     lk.load(s_a.tile(sub, (i, j)).partition(tv)))


def test_tma_maps_a_strided_tensor_from_its_fields():
    rng = np.random.default_rng(0)
    padded = to_bf16(rng.standard_normal((100, 200)))
    a = padded[:, :136]                          # 100 x 136, rows 400 bytes apart
    out = np.zeros((100, 136), np.uint16)
    interpret(tma_copy, (2, 2), a, out)
    assert np.array_equal(from_bf16(out), from_bf16(a))
    resolver = next(op.attrs["resolve"] for op in tma_copy.ir(a, out).hidden)
    assert [f((a, out)) for f in resolver.dims] == [136, 100]
    assert [f((a, out)) for f in resolver.strides] == [1, 200]


# ---- the launch paths (fake GPU) -----------------------------------------------------------
@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGPU(monkeypatch, [scale, scale_rows])
    yield fake
    fake.reset()


def packed_rows(x, y, a):
    """scale_rows' parameter buffer: per tensor u64 pointer, 2 extents, 2 strides (s32)."""
    return struct.pack("<QiiiiQiiiif", x.ptr, *x.shape, *x.stride(), y.ptr, *y.shape,
                       *y.stride(), a)


def test_tensors_take_the_fast_path_with_the_checked_paths_bytes(gpu, monkeypatch):
    checked = []
    real = scale_rows.launch
    monkeypatch.setitem(scale_rows.__dict__, "launch",
                        lambda grid, *a, **k: checked.append(1) or real(grid, *a, **k))
    x = Tensor(BASE, shape=(16, 256), strides=(256, 1))
    y = Tensor(BASE + 0x10000, shape=(16, 256), strides=(264, 1))
    other = Tensor(BASE + 0x20000, shape=(32, 512), strides=(512, 1))   # same facts
    for args in ((x, y, 2.0), (x, y, 2.0), (other, y, 0.5)):
        scale_rows[(2, 16)](*args)
    assert len(checked) == 1
    assert [c.packed for c in gpu.calls] == [packed_rows(x, y, 2.0), packed_rows(x, y, 2.0),
                                             packed_rows(other, y, 0.5)]
    assert gpu.calls[0].spec is gpu.calls[2].spec


def test_new_facts_and_wrong_tensors_leave_the_fast_path(gpu):
    x = Tensor(BASE, shape=(16, 256), strides=(256, 1))
    scale_rows[(2, 16)](x, x, 1.0)
    odd = Tensor(BASE, shape=(16, 250), strides=(250, 1))               # '+' facts
    scale_rows[(2, 16)](odd, x, 1.0)
    assert gpu.calls[1].spec is not gpu.calls[0].spec
    assert gpu.calls[1].spec.key[0] == (True, True, "16", "+", "+", "1")
    for bad, message in [(Tensor(BASE, shape=(4096,)), "its rank must be 2"),
                         (Tensor(BASE, shape=(0, 4), strides=(4, 1)), "extents are positive"),
                         (Tensor(BASE, "float16", (16, 256), strides=(256, 1)),
                          "a tensor of f16 given for x")]:
        with pytest.raises(lk.KernelArgumentError, match=message):
            scale_rows[(2, 16)](bad, x, 1.0)
    # a host tensor with known facts fails the fast path's device test: the checked path words it
    with pytest.raises(lk.KernelArgumentError, match=r"argument x: a Tensor in host memory \(cpu\)"):
        scale_rows[(2, 16)](Tensor(BASE, shape=(16, 256), strides=(256, 1), device=-1), x, 1.0)
    assert len(gpu.calls) == 2


def test_a_first_launch_with_host_memory_names_the_rule(gpu):
    cpu = Tensor(BASE, shape=(16, 256), strides=(256, 1), device=-1)
    with pytest.raises(lk.KernelArgumentError, match=r"argument x: a Tensor in host memory "
                       r"\(cpu\) given for x: Tensor\[f32, 2\]; a launch takes device memory"):
        scale_rows[(2, 16)](cpu, cpu, 1.0)
    with pytest.raises(lk.KernelArgumentError, match=r"argument x: lk.TensorSpec \(facts without "
                                                     r"memory\) given for x"):
        scale_rows[(2, 16)](spec((16, 256)), spec((16, 256)), 1.0)
    assert gpu.calls == []
