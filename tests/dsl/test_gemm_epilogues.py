"""Fused epilogues of recipes/gemm_hopper.py (recipes/_epilogues.py): bias (bf16 or f32) and
relu / silu / gelu traced into the kernel's epilogue, run on the CPU interpreter on a ragged
problem against float64 numpy (gelu as torch's tanh approximation), compiled without spills,
and gemm's argument checks for them."""
import math
import warnings

import numpy as np
import pytest

import layoutkit as lk
from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
from layoutkit.ptx import assemble
from recipes import _epilogues, gemm_hopper
from recipes import _gemm_host as host
from recipes._epilogues import Epilogue

REFERENCE = {
    None: lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi) *
                                                (x + 0.044715 * x ** 3))),
}


def padded(x):
    out = np.zeros((x.shape[0], host.round_up(x.shape[1], 8)), np.uint16)
    out[:, :x.shape[1]] = x
    return out[:, :x.shape[1]]


@pytest.mark.parametrize("bias_type, activation", [(lk.bf16, "gelu"), (None, "silu"),
                                                   (lk.f32, "relu")])
def test_fused_epilogue_on_the_interpreter(bias_type, activation):
    rng = np.random.default_rng(len(activation))
    m, n, k = 130, 72, 100                            # ragged: masked rows and columns
    a, b = to_bf16(rng.standard_normal((m, k))), to_bf16(rng.standard_normal((k, n)))
    x = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    args = ()
    if bias_type is not None:
        bias = rng.standard_normal(n) * 2
        bias = to_bf16(bias) if bias_type == lk.bf16 else bias.astype(np.float32)
        bias_values = from_bf16(bias) if bias_type == lk.bf16 else bias
        x = x + bias_values.astype(np.float64)
        args = (np.broadcast_to(bias, (m, n)),)
    want = REFERENCE[activation](x)
    cfg = gemm_hopper.CONFIGS[1]                      # one CTA (no cluster), two tiles
    plan = host.schedule(m, n, k, cfg, lk.bf16, 1)
    c = np.zeros((m, host.round_up(n, 8)), np.uint16)[:, :n]
    kernel = gemm_hopper.fused_kernel(bias_type, _epilogues.ACTIVATIONS[activation], 1)
    err = check_on_cpu(kernel, (plan.grid,), padded(a), padded(b), c, *args, GRID=plan.grid,
                       B_MAJOR="N", BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=plan.group,
                       CLUSTER=cfg.CLUSTER, expect={"c": want}, tolerance=2 ** -7, seeds=(0,))
    assert err < 2 ** -7


def test_bias_and_gelu_compile_without_spills():
    T = lk.TensorSpec(lk.bf16, (4096, 4096))
    bias = lk.TensorSpec(lk.bf16, (4096, 4096), (0, 1))
    ptx = gemm_hopper.fused_kernel(lk.bf16, _epilogues.gelu, 2).ptx(
        T, T, T, bias, GRID=132, B_MAJOR="K", BN=256, STAGES=4, GROUP_M=8,
        CLUSTER=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        usage = assemble(ptx).resources["gemm_bm128_fused"]
    assert usage.spill_store_bytes == usage.spill_load_bytes == 0
    # per consumer and 128-column chunk: the bias's 32 columns of the thread in 16 bf16 pairs
    assert sum("ld.global" in x for x in ptx.splitlines()) == 2 * 2 * 16
    assert ptx.count("tanh.approx.f32") == 2 * 128     # one per accumulator value per consumer
    assert "div.rn" not in ptx and "ex2" not in ptx      # gelu's tanh form divides nothing


def test_staged_operand_worked_examples():
    """Which input the kernel stages by TMA (recipes/_epilogues.py staged_operand): C when beta
    != 0 (it is out's type), else a residual of out's type; the host's Epilogue agrees."""
    rule = _epilogues.staged_operand
    assert rule(lk.bf16, None, lk.bf16) == "c" and rule(lk.f32, lk.bf16, lk.f32) == "c"
    assert rule(None, lk.bf16, lk.bf16) == "residual" and rule(None, lk.f32, lk.f32) == "residual"
    assert rule(None, lk.f32, lk.bf16) is None and rule(None, None, lk.bf16) is None
    assert Epilogue(residual=lk.bf16, bias=lk.f32).staged(lk.bf16) == "residual"
    assert Epilogue(c=lk.f32, residual=lk.f32, scaled=True).staged(lk.f32) == "c"
    assert Epilogue(bias=lk.bf16, activation=_epilogues.gelu).staged(lk.bf16) is None


@pytest.mark.parametrize("epi, extra, staged", [
    (Epilogue(residual=lk.bf16), (), True), (Epilogue(c=lk.bf16, scaled=True), (0.5, 1.0), True),
    (Epilogue(c=lk.bf16, bias=lk.bf16, activation=_epilogues.gelu, residual=lk.f32), (1.0,),
     False)], ids=["residual", "beta_c", "c_bias_gelu_f32_residual"])
def test_staged_epilogues_compile_without_spills(epi, extra, staged):
    """The default 128 x 256 cluster-2 kernel with a staged input (C or a bf16 residual by TMA,
    the other loads by registers after k-step 0): no spills, and the staging TMA is there.
    C, bias and an f32 residual (8 bytes a value) exceed the prefetch budget: they load at
    their chunk, in 64-column chunks (chunk_columns; at 128 columns this spilled)."""
    T = lk.TensorSpec(lk.bf16, (4096, 4096))
    tensors = {"c_in": T, "bias": lk.TensorSpec(lk.bf16, (4096, 4096), (0, 1)), "residual":
               lk.TensorSpec(lk.f32 if epi.residual == lk.f32 else lk.bf16, (4096, 4096))}
    args = [tensors[name] for name, ann in epi.parameters() if name in tensors]
    kernel = gemm_hopper.kernel_for(128, 2, False, lk.bf16, epi)
    ptx = kernel.ptx(T, T, T, *args, *extra, GRID=132, B_MAJOR="K", BN=256, STAGES=4,
                     GROUP_M=8, CLUSTER=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        usage = assemble(ptx).resources["gemm_bm128_fused"]
    assert usage.spill_store_bytes == usage.spill_load_bytes == 0
    plain = gemm_hopper.kernel_for(128, 2, False, lk.bf16, Epilogue(scaled=True)).ptx(
        T, T, T, 1.0, GRID=132, B_MAJOR="K", BN=256, STAGES=4, GROUP_M=8, CLUSTER=2)
    # two consumers, each chunk 0 of 64 x 128 bf16 in two boxes of 128-byte rows
    assert ptx.count("cp.async.bulk.tensor") == plain.count("cp.async.bulk.tensor") + 4 * staged


torch = pytest.importorskip("torch")


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("kwargs, error, message", [
    ({"bias": np.zeros(4)}, TypeError, "gemm_hopper.gemm: bias is a torch tensor on a CUDA "
     "device, got numpy.ndarray"),
    ({"bias": meta(4, dtype=torch.float16)}, TypeError, "gemm_hopper.gemm: bias has dtype "
     "torch.float16; the kernel takes torch.bfloat16 or torch.float32"),
    ({"bias": meta(1, 4)}, ValueError, r"gemm_hopper.gemm: bias has shape \(1, 4\); it is one "
     r"value per column of the result, shape \(4,\)"),
    ({"activation": "tanh"}, ValueError, "gemm_hopper.gemm: activation is None or one of "
     "'relu', 'silu', 'gelu', got 'tanh'"),
    ({"bias": torch.zeros(4)}, ValueError, "gemm_hopper.gemm: bias is on cpu and a on meta"),
])
def test_gemm_refuses_a_bad_epilogue(kwargs, error, message):
    with pytest.raises(error, match=message):
        gemm_hopper.gemm(meta(4, 8), meta(8, 4), **kwargs)


@pytest.mark.parametrize("staged, cluster, m, n", [("residual", 2, 200, 304), ("c", 1, 280, 176)])
def test_staged_input_on_the_interpreter(staged, cluster, m, n):
    """A residual of the output's type (or C with beta) goes by TMA into the C buffer during
    the main loop for each tile's first chunk, by registers for the second: D = acc +
    residual (or 0.5 * acc + 2 * C) on ragged problems (k = 72; n a multiple of 16, one
    specialization) whose CTAs take two or three tiles each (the staging barrier's phases
    alternate and come back), clusters of 2 (200 x 304: the second tile column's register
    chunk empty) and 1 (280 x 176: three tiles, the register chunk partial)."""
    rng = np.random.default_rng(11)
    k = 72
    a, b = to_bf16(rng.standard_normal((m, k))), to_bf16(rng.standard_normal((k, n)))
    x = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    other = to_bf16(rng.standard_normal((m, n)))
    out = padded(other.copy() if staged == "c" else np.zeros((m, n), np.uint16))
    if staged == "c":
        epi, args, scalars = Epilogue(c=lk.bf16, scaled=True), (out,), (0.5, 2.0)
        want = 0.5 * x + 2.0 * from_bf16(other)
    else:
        epi, args, scalars = Epilogue(residual=lk.bf16), (padded(other),), ()
        want = x + from_bf16(other)
    cfg = gemm_hopper.Config(BN=256, STAGES=4, CLUSTER=cluster)
    units = 1                                   # one CTA (or cluster): every tile in turn
    plan = host.schedule(m, n, k, cfg, lk.bf16, units)
    kernel = gemm_hopper.kernel_for(128, cluster, False, lk.bf16, epi)
    spec = lk.TensorSpec(lk.bf16, (m, n))
    ptx = kernel.ptx(spec, spec, spec, spec, *scalars, GRID=plan.grid, B_MAJOR="N", BN=256,
                     STAGES=4, GROUP_M=plan.group, CLUSTER=cluster)
    # per consumer: chunk 1's 64 values in 32 bf16 pairs by ld.global; chunk 0 by TMA
    assert sum("ld.global" in line for line in ptx.splitlines()) == 2 * 32
    err = check_on_cpu(kernel, (plan.grid,), padded(a), padded(b), out, *args, *scalars,
                       GRID=plan.grid, B_MAJOR="N", BN=256, STAGES=4, GROUP_M=plan.group,
                       CLUSTER=cluster, expect={"c": want}, tolerance=2 ** -7, seeds=(0,))
    assert err < 2 ** -7
