"""The fp8 storage types lk.e4m3 / lk.e5m2: the interpreter's encodings and cvt.rn.satfinite
rounding against torch's float8 conversions (every bit pattern, random and tie-case f32), lk.cast
to and from fp8 in kernels (interpreter values and bits, the PTX pairs, ptxas), fp8 loads and
stores of every vector width with masks, torch dtypes at the kernel boundary, and the errors."""

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import from_bf16, from_fp8, interpret, to_fp8
from layoutkit.dsl.interpreter import float8
from tests.ptx.ptxas_helper import assemble, requires_ptxas

torch = pytest.importorskip("torch")
TORCH = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FORMATS = ["e4m3", "e5m2"]


def torch_values(bits, name):
    return torch.from_numpy(np.asarray(bits, np.uint8)).view(TORCH[name]).float().numpy()


def torch_round(x, name):
    """torch's rounding of float32 x after clipping to the finite range (torch overflows to
    NaN / inf where cvt.rn.satfinite saturates)."""
    m = float8.FORMATS[name].max_finite
    return torch.from_numpy(np.clip(x, -m, m)).to(TORCH[name]).float().numpy()


@pytest.mark.parametrize("name", FORMATS)
def test_every_bit_pattern_decodes_as_torch_does(name):
    bits = np.arange(256, dtype=np.uint8)
    ours, theirs = float8.from_bits(bits, name), torch_values(bits, name)
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert np.array_equal(np.signbit(ours), np.signbit(theirs))
    finite = ~np.isnan(ours)
    assert np.array_equal(float8.to_bits(ours[finite], name), bits[finite])


@pytest.mark.parametrize("name", FORMATS)
def test_rounding_matches_torch_on_random_and_tie_cases(name):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(20000).astype(np.float32) * s
                        for s in (1e-6, 1e-3, 0.1, 1.0, 40.0, 1e3, 1e5)])
    grid = np.sort(float8.from_bits(np.arange(0x7C), name).astype(np.float64))
    mids = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)          # exact ties
    near = np.concatenate([mids, np.nextafter(mids, np.float32(0)),
                           np.nextafter(mids, np.float32(np.inf))])
    x = np.concatenate([x, near, -near, [0.0, -0.0]]).astype(np.float32)
    ours, theirs = float8.round_fp8(x, name), torch_round(x, name)
    assert np.array_equal(ours, theirs)
    assert np.array_equal(np.signbit(ours), np.signbit(theirs))


@pytest.mark.parametrize("name, largest", [("e4m3", 448.0), ("e5m2", 57344.0)])
def test_satfinite_saturates_overflow_and_infinities_and_keeps_nan(name, largest):
    got = float8.round_fp8([1e30, -1e30, np.inf, -np.inf, np.nan, largest * 1.07], name)
    assert got[:4].tolist() == [largest, -largest, largest, -largest]
    assert np.isnan(got[4]) and got[5] == largest
    assert float8.to_bits([np.nan], name)[0] == float8.NAN_BITS


def test_to_bits_refuses_a_value_the_format_lacks():
    with pytest.raises(ValueError, match=r"0\.3 is not an e4m3 value \(round it with round_fp8"):
        float8.to_bits([0.3], "e4m3")


def test_host_helpers_round_trip():
    x = np.array([[0.1, -3.3], [500.0, 1e-9]])
    bits = to_fp8(x, lk.e4m3)
    assert bits.dtype == np.uint8 and bits.shape == (2, 2)
    assert from_fp8(bits, lk.e4m3).tolist() == [[0.1015625, -3.25], [448.0, 0.0]]


def cast_kernel(dst):
    @lk.kernel(num_warps=1)
    def quantize(x: lk.Tensor[lk.f32, 1], q: lk.Tensor[dst, 1], back: lk.Tensor[lk.f32, 1],
                 as_bf16: lk.Tensor[lk.bf16, 1], as_f16: lk.Tensor[lk.f16, 1]):
        tv = lk.tv_layout(Layout(32), Layout(4))
        X, Q, B, H, F = (t.tile((128,), (lk.block_id(0),)).partition(tv)
                         for t in (x, q, back, as_bf16, as_f16))
        v = lk.cast(lk.load(X), dst)
        lk.store(Q, v)
        lk.store(B, lk.cast(v, lk.f32))
        lk.store(H, lk.cast(v, lk.bf16))
        lk.store(F, lk.cast(v, lk.f16))
    return quantize


KERNELS = {name: cast_kernel(getattr(lk, name)) for name in FORMATS}


@pytest.mark.parametrize("name", FORMATS)
def test_cast_kernel_on_the_interpreter(name):
    rng = np.random.default_rng(3)
    n = 250                                                  # ragged: the last chunk masked
    x = (rng.standard_normal(n) * 200).astype(np.float32)
    x[:5] = [np.nan, np.inf, -np.inf, 1e9, -0.0]
    q, back = np.zeros(n, np.uint8), np.zeros(n, np.float32)
    as_bf16, as_f16 = np.zeros(n, np.uint16), np.zeros(n, np.float16)
    interpret(KERNELS[name], 2, x, q, back, as_bf16, as_f16)
    want = float8.round_fp8(x, name)
    assert np.array_equal(back, want, equal_nan=True)
    assert np.array_equal(q[1:], float8.to_bits(want[1:], name)) and q[0] == float8.NAN_BITS
    assert np.array_equal(from_bf16(as_bf16), want, equal_nan=True)
    assert np.array_equal(as_f16.astype(np.float64), want, equal_nan=True)
    assert np.signbit(back[4])


@requires_ptxas
@pytest.mark.parametrize("name", FORMATS)
def test_cast_pairs_in_ptx(name):
    specs = [lk.TensorSpec(t, (256,)) for t in (lk.f32, getattr(lk, name), lk.f32, lk.bf16,
                                                 lk.f16)]
    ptx = KERNELS[name].ptx(*specs)
    lines = [line.strip() for line in ptx.splitlines()]
    pack = [x for x in lines if x.startswith(f"cvt.rn.satfinite.{name}x2.f32")]
    assert len(pack) == 2                        # 4 values per thread: two pairs
    assert sum(x.startswith(f"cvt.rn.f16x2.{name}x2") for x in lines) == 6
    assert sum(x.startswith("cvt.rn.bf16.f16") for x in lines) == 4
    assert any(x.startswith("st.global.b32") or "st.global.b32" in x for x in lines)
    assemble(ptx)


def copy_kernel(values: int):
    @lk.kernel(num_warps=1)
    def copy(x: lk.Tensor[lk.e5m2, 1], y: lk.Tensor[lk.e5m2, 1], z: lk.Tensor[lk.f32, 1]):
        tv = lk.tv_layout(Layout(32), Layout(values))
        X, Y, Z = (t.tile((32 * values,), (lk.block_id(0),)).partition(tv) for t in (x, y, z))
        v = lk.load(X, other=1.5)
        lk.store(Y, v)
        lk.store(Z, lk.cast(v, lk.f32))
    return copy


@pytest.mark.parametrize("values", [1, 2, 4, 8, 16])
def test_fp8_loads_and_stores_of_every_width(values):
    kernel = copy_kernel(values)
    n = 64 * values - 3                          # two CTAs, the second one's tail masked
    bits = (np.arange(n) * 7 % 0x7C).astype(np.uint8)      # no NaN patterns (see below)
    y, z = np.zeros(n, np.uint8), np.zeros(n, np.float32)
    interpret(kernel, 2, bits, y, z)
    assert np.array_equal(y, bits)
    assert np.array_equal(z, float8.from_bits(bits, "e5m2"))
    ptx = kernel.ptx(*(lk.TensorSpec(t, (64 * values,)) for t in (lk.e5m2, lk.e5m2, lk.f32)))
    if values >= 4:
        assert f"ld.global{'.v' + str(values // 4) if values > 4 else ''}.b32" in ptx
    assemble(ptx)


def test_a_masked_lone_fp8_load_gives_other():
    kernel = copy_kernel(1)
    bits = np.full(20, 0x38, np.uint8)           # e5m2 0.5; x is shorter than y and z
    y, z = np.zeros(32, np.uint8), np.zeros(32, np.float32)
    interpret(kernel, 1, bits, y, z)
    assert z.tolist() == [0.5] * 20 + [1.5] * 12
    assert y.tolist() == [0x38] * 20 + [0x3E] * 12          # other=1.5 in e5m2
    ptx = kernel.ptx(*(lk.TensorSpec(t, (n,)) for t, n in ((lk.e5m2, 20), (lk.e5m2, 32),
                                                          (lk.f32, 32))))
    assert "cvt.u8.u16" in ptx
    assemble(ptx)


def test_torch_fp8_tensors_bind_to_fp8_parameters():
    k = KERNELS["e4m3"]
    x = torch.zeros(128)
    q = torch.zeros(128, dtype=torch.float8_e4m3fn)
    args = (x, q, x, torch.zeros(128, dtype=torch.bfloat16), torch.zeros(128, dtype=torch.half))
    assert "cvt.rn.satfinite.e4m3x2.f32" in k.ptx(*args)
    wrong = (x, torch.zeros(128, dtype=torch.float8_e5m2), *args[2:])
    with pytest.raises(lk.KernelArgumentError, match=r"argument q: a tensor of e5m2 given for"):
        k.ptx(*wrong)
    fnuz = (x, torch.zeros(128, dtype=torch.float8_e4m3fnuz), *args[2:])
    with pytest.raises(lk.KernelArgumentError, match=r"argument q: a tensor of "
                                                     r"torch.float8_e4m3fnuz given for"):
        k.ptx(*fnuz)


def trace(body, *specs):
    @lk.kernel(num_warps=1)
    def k(x: lk.Tensor[lk.e4m3, 1], y: lk.Tensor[lk.f64, 1], i: lk.Tensor[lk.i32, 1]):
        tv = lk.tv_layout(Layout(32), Layout(2))
        body(*(t.tile((64,), (0,)).partition(tv) for t in (x, y, i)), tv)
    return k.ptx(lk.TensorSpec(lk.e4m3, (64,)), lk.TensorSpec(lk.f64, (64,)),
                 lk.TensorSpec(lk.i32, (64,)))


@pytest.mark.parametrize("body, message", [
    (lambda x, y, i, tv: lk.load(x) + lk.load(x),
     r"operator \+ on e4m3: e4m3 is a storage type \(PTX has no arithmetic, comparison or "
     r"select on it\); convert with lk.cast\(x, lk.f32\) first"),
    (lambda x, y, i, tv: lk.load(x) < lk.load(x), r"operator < on e4m3: e4m3 is a storage type"),
    (lambda x, y, i, tv: lk.maximum(lk.load(x), lk.load(x)), r"lk.max on e4m3"),
    (lambda x, y, i, tv: lk.full(tv, 0.0, lk.e4m3),
     r"lk.full: the constant 0.0 cannot be a e4m3 operand \(e4m3 is a storage type: make the "
     r"value in f32 and lk.cast it\)"),
    (lambda x, y, i, tv: lk.cast(lk.load(y), lk.e4m3),
     r"lk.cast: f64 -> e4m3 does not exist in PTX; fp8 values are made from f32, f16, bf16"),
    (lambda x, y, i, tv: lk.cast(lk.load(i), lk.e4m3), r"lk.cast: i32 -> e4m3 does not exist"),
    (lambda x, y, i, tv: lk.cast(lk.load(x), lk.i32),
     r"lk.cast: e4m3 -> i32 does not exist in PTX; fp8 values widen to f32, f16, bf16, f64"),
])
def test_errors_name_the_rule_and_the_line(body, message):
    with pytest.raises(lk.TraceError, match=message) as info:
        trace(body)
    assert "test_fp8.py" in str(info.value)


def test_fp8_scalar_parameters_are_refused():
    def k(x: lk.e4m3):
        pass
    with pytest.raises(lk.KernelDefinitionError, match=r"parameter x needs an annotation.*got "
                                                       r"e4m3"):
        lk.kernel(k)


def test_e4m3_e5m2_conversion_goes_through_f32():
    @lk.kernel(num_warps=1)
    def narrow(x: lk.Tensor[lk.e5m2, 1], y: lk.Tensor[lk.e4m3, 1]):
        tv = lk.tv_layout(Layout(32), Layout(2))
        lk.store(y.tile((64,), (0,)).partition(tv),
                 lk.cast(lk.load(x.tile((64,), (0,)).partition(tv)), lk.e4m3))
    bits = np.arange(64, dtype=np.uint8) + 0x30
    y = np.zeros(64, np.uint8)
    interpret(narrow, 1, bits, y)
    assert np.array_equal(y, float8.to_bits(float8.round_fp8(float8.from_bits(bits, "e5m2"),
                                                              "e4m3"), "e4m3"))
