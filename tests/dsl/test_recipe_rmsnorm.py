"""recipes/rmsnorm.py on the CPU: every work split assembles for sm_90a with no spills (16-byte
accesses where n allows, the cluster barrier past 16k columns), the interpreter matches float64
numpy on small ragged shapes of every split (a warp, a CTA, a cluster per row; several rounds of
the persistent backward; bf16 and f32; with and without residual and weight), and bad
arguments are refused by name."""
import warnings

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.ptx import assemble
from recipes import _rowwise as rw
from recipes import rmsnorm
from tests.dsl.test_recipe_transpose import FakeTensor

PTR, F32 = lk.Pointer[lk.bf16], lk.Pointer[lk.f32]
DT = {2: lk.bf16, 4: lk.f32}


def assemble_quietly(kernel, ptx):
    """ptxas's report for the kernel; a register spill (a warning) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return assemble(ptx).resources[kernel.name]


def test_default_specializations_assemble_without_spills():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, ptx in rmsnorm.compile_default().items():
            assert "ld.global.v4.b32" in ptx or "ld.global.v4.f32" in ptx, name
            assert ("rsqrt.approx.f32" in ptx) == name.startswith("rmsnorm n="), name
            wide = name.endswith(("n=32768", "n=131072"))
            assert ("barrier.cluster.arrive" in ptx) == wide, name
            # the DSMEM exchange: asynchronous in the forward, between cluster barriers in
            # the persistent backward
            store = "st.async.shared::cluster" if name.startswith("rmsnorm n=") else \
                "st.shared::cluster"
            assert (store in ptx) == wide, name
            assemble(ptx)


@pytest.mark.parametrize("m", [1, 4096])          # the weight loaded early (where it may), late
@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("n", [1, 100, 1000, 3000, 4096, 8191, 16384, 32768, 65537, 131072])
def test_forward_splits_assemble_without_spills(n, itemsize, m):
    s = rmsnorm.forward_split(n, itemsize, m)
    kernel = rmsnorm.kernel_for("forward", DT[itemsize], DT[itemsize], s)
    ptr = lk.Pointer[DT[itemsize]]
    spec = kernel.specialize(ptr, ptr, ptr, ptr, ptr, F32, 4096, n // s.VEC, 1e-6,
                             **s.constexprs(), RESIDUAL=True, WEIGHT=True, STORE_RESIDUAL=True,
                             STORE_RSTD=True, STAGED=rmsnorm.forward_staged(s),
                             EARLY_WEIGHT=rmsnorm.forward_early_weight(s, m))
    ptx = spec.ptx
    usage = assemble_quietly(kernel, ptx)
    assert s.num_warps <= (8 if s.VEC == s.C else 16)          # CTAs of <= 256 (512) threads
    assert usage.spill_store_bytes == 0
    assert spec.ir.shared_bytes <= 227 * 1024
    assert ("cp.async" in ptx) == rmsnorm.forward_staged(s)
    if n % 8 == 0:
        assert f"ld.global.v4.{'b32' if itemsize == 2 else 'f32'}" in ptx


@pytest.mark.parametrize("n", [32768, 131072])
def test_wide_rows_staged_in_shared_memory_take_fewer_registers(n):
    """Past one CTA a row (a cluster), the forward stages x in shared memory by cp.async and
    reads it there before and after the row sum: <= 64 registers a thread (4 CTAs of 256
    threads an SM) where holding the row in registers took more than 96 (2 CTAs)."""
    s = rmsnorm.forward_split(n, 2, 4096)
    assert s.CLUSTER > 1 and rmsnorm.forward_staged(s)
    kernel = rmsnorm.kernel_for("forward", lk.bf16, lk.bf16, s)
    usage = {}
    for staged in (False, True):
        ptx = kernel.ptx(PTR, PTR, PTR, PTR, PTR, F32, 4096, n // s.VEC, 1e-6,
                         **s.constexprs(), RESIDUAL=False, WEIGHT=True, STORE_RESIDUAL=False,
                         STORE_RSTD=True, STAGED=staged, EARLY_WEIGHT=False)
        usage[staged] = assemble_quietly(kernel, ptx)
        # x: K 16-byte copies into shared memory or K 16-byte loads; the weight: K loads
        assert ptx.count("cp.async.cg.shared.global") == (s.K if staged else 0)
        assert ptx.count("ld.global.v4.b32") == (s.K if staged else 2 * s.K)
    assert usage[True].registers <= 64 < 96 < usage[False].registers


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("n", [100, 1000, 4096, 5000, 8191, 12288, 16384, 32768, 65537, 131072])
@pytest.mark.parametrize("weight", [True, False])
def test_backward_splits_fit_the_register_file_without_spills(n, itemsize, weight):
    s = rmsnorm.backward_split(n, itemsize)
    kernel = rmsnorm.kernel_for("backward", DT[itemsize], DT[itemsize], s)
    ptr = lk.Pointer[DT[itemsize]]
    spec = kernel.specialize(ptr, ptr, ptr, F32, ptr, F32, 4096, n // s.VEC, 4, 132,
                             **s.constexprs(), WEIGHT=weight)
    usage = assemble_quietly(kernel, spec.ptx)
    assert usage.registers * 32 * s.num_warps <= 65536 and usage.spill_store_bytes == 0
    assert spec.ir.shared_bytes < 227 * 1024


def test_backward_reloads_after_the_row_sum():
    s = rmsnorm.backward_split(4096, 2)
    kernel = rmsnorm.kernel_for("backward", lk.bf16, lk.bf16, s)
    ptx = kernel.ptx(PTR, PTR, PTR, F32, PTR, F32, 4096, 512, 4, 132, **s.constexprs(),
                     WEIGHT=True)
    # x, dy, weight: K = 2 chunks each, loaded before and again after the row sum
    assert ptx.count("ld.global.v4.b32") == 2 * 3 * s.K
    assert ptx.count("st.global.v4.b32") == s.K                 # dx
    assert ptx.count("ld.shared.v4.f32") >= s.K * 2 and "st.shared.v4.f32" in ptx  # dweight


CPU_FORWARD, CPU_BACKWARD = rmsnorm.cpu_cases()


@pytest.mark.parametrize("dtype, m, n, s, residual, weight, staged, early", CPU_FORWARD)
def test_forward_matches_float64_on_the_interpreter(dtype, m, n, s, residual, weight, staged,
                                                    early):
    rng = np.random.default_rng(m * n)
    assert rmsnorm._cpu_forward(rng, dtype, m, n, s, residual, weight, staged, early) <= \
        rw.tolerance(dtype)


@pytest.mark.parametrize("m, n, early", [(1, 4096, True), (7, 131072, True),
                                         (132, 4096, True), (133 * 2, 4096, False),
                                         (1000, 32768, True), (4096, 131072, True),
                                         (4096, 16384, False), (4096, 1000, False),
                                         (1, 65537, False)])
def test_small_grids_and_staged_rows_load_the_weight_beside_x(m, n, early):
    """Grids of at most one CTA an SM (132) and staged rows (past 16k columns), with 16-byte
    accesses, load the weight with x, before the row sum."""
    s = rmsnorm.forward_split(n, 2, m)
    assert rmsnorm.forward_early_weight(s, m) == early
    ((kernel, grid, args, constexprs),) = rmsnorm.forward_launches(
        *(FakeTensor((m, n)),) * 6, lambda count: FakeTensor((count,)), m, n, 1e-6,
        (lk.bf16, lk.bf16))
    assert constexprs["EARLY_WEIGHT"] == early and grid == s.CLUSTER * s.row_tiles(m)


@pytest.mark.parametrize("dtype, m, n, s, ctas, weight", CPU_BACKWARD)
def test_backward_matches_float64_on_the_interpreter(dtype, m, n, s, ctas, weight):
    rng = np.random.default_rng(m * n)
    assert rmsnorm._cpu_backward(rng, dtype, m, n, s, ctas, weight) <= rw.tolerance(dtype)


def test_the_reference_backward_is_the_gradient_of_the_reference():
    rng = np.random.default_rng(1)
    x, w, dy = rng.standard_normal((3, 17)), rng.standard_normal(17), rng.standard_normal((3, 17))
    dx, dw = rmsnorm.reference_backward(dy, x, w, rmsnorm.reference(x, w)[2])
    eps, (i, j) = 1e-6, (1, 5)
    bump = np.zeros_like(x)
    bump[i, j] = eps
    numeric = ((rmsnorm.reference(x + bump, w)[0] - rmsnorm.reference(x - bump, w)[0]) * dy
               ).sum() / (2 * eps)
    assert abs(numeric - dx[i, j]) < 1e-6
    wb = np.zeros_like(w)
    wb[j] = eps
    numeric = ((rmsnorm.reference(x, w + wb)[0] - rmsnorm.reference(x, w - wb)[0]) * dy
               ).sum() / (2 * eps)
    assert abs(numeric - dw[j]) < 1e-6


def vec(n, **kwargs):
    return FakeTensor((n,), **kwargs)


@pytest.mark.parametrize("args, error, message", [
    ((None, None, None, 1e-6), TypeError, r"rmsnorm: x must be a torch tensor, got NoneType"),
    ((FakeTensor((2, 8), "torch.int32"), None, None, 1e-6), TypeError,
     r"rmsnorm: x has dtype torch.int32; it must be one of torch.bfloat16, torch.float16, "
     r"torch.float32"),
    ((FakeTensor((2, 8), cuda=False), None, None, 1e-6), ValueError,
     r"rmsnorm: x must be a contiguous CUDA tensor, got one on cpu"),
    ((FakeTensor((2, 200000)), None, None, 1e-6), ValueError,
     r"rmsnorm: the row length n = 200000 must be an int in 1..131072"),
    ((FakeTensor((2, 8)), vec(7), None, 1e-6), ValueError,
     r"rmsnorm: weight has shape \(7,\); it must be \(8,\)"),
    ((FakeTensor((2, 8)), vec(8, dtype="torch.float16"), None, 1e-6), TypeError,
     r"rmsnorm: weight has dtype torch.float16; it must be one of torch.bfloat16, "
     r"torch.float32"),
    ((FakeTensor((2, 8)), None, FakeTensor((2, 8), "torch.float32"), 1e-6), TypeError,
     r"rmsnorm: residual has dtype torch.float32; it must be one of torch.bfloat16"),
    ((FakeTensor((2, 8)), None, FakeTensor((2, 9)), 1e-6), ValueError,
     r"rmsnorm: residual has shape \(2, 9\); it must be \(2, 8\)"),
    ((FakeTensor((2, 8)), None, None, 0.0), ValueError,
     r"rmsnorm: eps = 0.0 must be a positive number"),
])
def test_bad_forward_arguments_are_refused_by_name(args, error, message):
    with pytest.raises(error, match=message):
        rmsnorm.check_forward(*args)


@pytest.mark.parametrize("args, error, message", [
    ((FakeTensor((2, 8)), FakeTensor((2, 8)), None, FakeTensor((3,), "torch.float32")),
     ValueError, r"rmsnorm_backward: rstd has shape \(3,\); it must be \(2,\)"),
    ((FakeTensor((2, 8)), FakeTensor((2, 8)), None, FakeTensor((2,))), TypeError,
     r"rmsnorm_backward: rstd has dtype torch.bfloat16; it must be one of torch.float32"),
    ((FakeTensor((2, 8), "torch.float32"), FakeTensor((2, 8)), None,
      FakeTensor((2,), "torch.float32")), TypeError,
     r"rmsnorm_backward: dy has dtype torch.float32; it must be one of torch.bfloat16"),
])
def test_bad_backward_arguments_are_refused_by_name(args, error, message):
    with pytest.raises(error, match=message):
        rmsnorm.check_backward(*args)
