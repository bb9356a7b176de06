"""fp8 wgmma (lk.sm90.wgmma on e4m3/e5m2 shared tiles): every K-major swizzle form read through
its derived descriptor on the interpreter against numpy in float64 (with the modelled 14-bit
accumulator, and a worked example of that model), e4m3/e5m2 mixed, the PTX
(m64nNk32) and SASS (QGMMA ... E4M3) forms, and the errors the author can cause."""
import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.interpreter import from_fp8, interpret, to_fp8
from layoutkit.dsl.interpreter.wgmma_math import FP8_ACCUMULATOR_BITS, truncated
from layoutkit.ptx import disassemble
from tests.ptx.ptxas_helper import assemble, requires_ptxas


def product_kernel(a_type, b_type):
    @lk.kernel(num_warps=4)
    def fp8_product(a: lk.Pointer[a_type], b: lk.Pointer[b_type], c: lk.Pointer[lk.f32],
                    A_TILE: lk.constexpr, B_TILE: lk.constexpr, K: lk.constexpr,
                    N: lk.constexpr):
        """c (64 x N, f32) = a (64 x K) @ b (N x K)^T, the shared tiles laid out as A_TILE and
        B_TILE, filled element by element."""
        for tile, x, rows, name in ((A_TILE, a, 64, "sA"), (B_TILE, b, N, "sB")):
            tv = lk.TVLayout((rows, K), Layout((128, rows * K // 128), (1, 128)))
            s = lk.shared_tensor(tile, x.dtype, name=name)
            lk.store(s.partition(tv), lk.load(lk.global_tensor(x, Layout((rows, K), (K, 1)))
                                              .partition(tv)))
            if name == "sA":
                sA = s
        lk.sm90.fence_proxy_async()
        lk.barrier()
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(N), sA, s, accumulate=False)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        lk.store(lk.global_tensor(c, Layout((64, N), (N, 1))).partition(acc.layout), acc)
    return fp8_product


PAIRS = [(lk.e4m3, lk.e4m3), (lk.e4m3, lk.e5m2), (lk.e5m2, lk.e4m3), (lk.e5m2, lk.e5m2)]
KERNELS = {(a.name, b.name): product_kernel(a, b) for a, b in PAIRS}


def k_major(rows: int, k: int, bits: int) -> ComposedLayout:
    """rows x k fp8, K contiguous, swizzled rows of 16 << bits bytes (Sw<bits,4,3>: 16 elements
    per 16-byte chunk)."""
    return ComposedLayout(Swizzle(bits, 4, 3), 0, Layout((rows, k), (k, 1)))


def no_swizzle(rows: int, k: int) -> Layout:
    """rows x k fp8 in 8-row x 16-byte core matrices: rows of a core matrix 16 bytes apart,
    core matrices along K 128 bytes apart, along rows 128 * k / 16 bytes."""
    return Layout(((8, rows // 8), (16, k // 16)), ((16, 8 * k), (1, 128)))


FORMS = {"128B": (lambda r: k_major(r, 128, 3), 128), "64B": (lambda r: k_major(r, 64, 2), 64),
         "32B": (lambda r: k_major(r, 32, 1), 32), "none": (lambda r: no_swizzle(r, 64), 64)}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("pair", [(a.name, b.name) for a, b in PAIRS])
def test_every_k_major_form_and_type_pair(form, pair):
    make, k = FORMS[form]
    n = 64 if form != "none" else 32
    rng = np.random.default_rng(k + n)
    a = to_fp8(rng.standard_normal((64, k)) * 8, pair[0])
    b = to_fp8(rng.standard_normal((n, k)), pair[1])
    c = np.full((64, n), np.nan, np.float32)
    interpret(KERNELS[pair], 1, a, b, c, make(64), make(n), k, n)
    want = modelled_product(from_fp8(a, pair[0]), from_fp8(b, pair[1]))
    assert np.abs(c - want).max() <= 2 ** -20 * np.abs(want).max()


def modelled_product(a, b):
    """a (64 x K) @ b (N x K)^T as the interpreter models fp8 wgmma: the float64 sum of each
    k32 instruction's products added to the accumulator, then truncated to 14 bits."""
    acc = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for j in range(0, a.shape[1], 32):
        step = a[:, j:j + 32].astype(np.float64) @ b[:, j:j + 32].astype(np.float64).T
        acc = truncated(acc + step, FP8_ACCUMULATOR_BITS)
    return acc


@pytest.mark.parametrize("tail, kept", [(2.0 ** -6, 1 + 2.0 ** -13), (2.0 ** -7, 1.0)])
def test_accumulator_keeps_14_bits(tail, kept):
    """1 * 1 + tail * 2^-7: 1 + 2^-13 fits 14 significant bits, 1 + 2^-14 is truncated to 1
    (f32 would keep both)."""
    a, b = np.zeros((64, 128)), np.zeros((64, 128))
    a[:, 0], a[:, 1], b[:, 0], b[:, 1] = 1.0, tail, 1.0, 2.0 ** -7
    c = np.full((64, 64), np.nan, np.float32)
    interpret(KERNELS[("e4m3", "e4m3")], 1, to_fp8(a, lk.e4m3), to_fp8(b, lk.e4m3), c,
              k_major(64, 128, 3), k_major(64, 128, 3), 128, 64)
    assert FP8_ACCUMULATOR_BITS == 14 and np.all(c == np.float32(kept))


@requires_ptxas
def test_ptx_and_sass_forms():
    layout = k_major(64, 128, 3)
    args = (np.zeros((64, 128), np.uint8), np.zeros((64, 128), np.uint8),
            np.zeros((64, 64), np.float32), layout, layout, 128, 64)
    ptx = KERNELS[("e4m3", "e5m2")].ptx(*args)
    mma = [x.strip() for x in ptx.splitlines() if "wgmma.mma_async" in x]
    assert len(mma) == 4 and all(x.startswith("wgmma.mma_async.sync.aligned.m64n64k32.f32."
                                              "e4m3.e5m2") for x in mma)
    assert all(x.endswith(", 0, 1, 1;") or x.endswith(", 1, 1, 1;") for x in mma)   # no trans
    sass = disassemble(assemble(ptx))
    assert sass.count("QGMMA.64x64x32.F32.E4M3.E5M2") == 4


def trace_error(a_tile, b_tile, k=32, a_type=lk.e4m3, b_type=lk.e4m3, register_a=False):
    @lk.kernel(num_warps=4)
    def bad(c: lk.Pointer[lk.f32]):
        sA = lk.shared_tensor(a_tile, a_type, name="sA")
        sB = lk.shared_tensor(b_tile, b_type, name="sB")
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma_accumulator(64)
        a = lk.full(lk.sm90.wgmma_a_layout(16), 0.0, lk.f32) if register_a else sA
        if register_a:
            a = lk.cast(a, lk.e4m3)
        lk.sm90.wgmma(acc, a, sB, accumulate=False)
    with lk.protocol_check_skipped():
        bad.ptx(np.zeros(4, np.float32))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"a_tile": ComposedLayout(Swizzle(1, 4, 3), 0, Layout((64, 32), (1, 64))),
      "b_tile": k_major(64, 32, 1)}, lk.SharedMemoryError,
     r"operand A \(.*\) is MN-major \(consecutive m adjacent\), but e4m3 operands must be "
     r"K-major: wgmma transposes only f16/bf16 tiles \(PTX ISA wgmma: no imm-trans operands for "
     r"8-bit types\)"),
    ({"a_tile": k_major(64, 32, 1), "b_tile": Layout((64, 32), (1, 64))}, lk.SharedMemoryError,
     r"operand B .* is MN-major \(consecutive n adjacent\), but e4m3 operands must be K-major"),
    ({"a_tile": Layout((64, 16), (16, 1)), "b_tile": Layout((64, 16), (16, 1))}, lk.TraceError,
     r"K = 16 is not a multiple of 32 \(the K of one e4m3 wgmma\)"),
    ({"a_tile": k_major(64, 32, 1), "b_tile": Layout((64, 16), (16, 1)), "b_type": lk.bf16},
     lk.TraceError, r"A and B have one element type \(e4m3 and e5m2 may mix\); A is e4m3, B is "
                    r"bf16"),
    ({"a_tile": k_major(64, 32, 1), "b_tile": k_major(64, 32, 1), "register_a": True},
     lk.TraceError, r"a register A operand is bf16 or f16 .*fp8 A operands are read from shared "
                    r"memory\), got e4m3"),
])
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        trace_error(**kwargs)
    assert "test_wgmma_fp8_cpu.py" in str(info.value)
