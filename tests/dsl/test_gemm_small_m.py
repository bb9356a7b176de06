"""recipes/gemm_hopper.py's small-M path and epilogue on the CPU: the 64-row kernel (one consumer
warpgroup), split-K (partials into an f32 workspace, recipes/_gemm_splitk.py's reduction with
the epilogue) and D = act(alpha * (A @ B) + beta * C + bias) + residual, run on the interpreter
on ragged problems (M = 1, N and K not multiples of the tile) against float64 numpy; every
shipped tile compiles without spills; the per-shape heuristic's documented choices and
invariants; every new argument error."""
import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutkit as lk
from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
from recipes import _epilogues, _gemm_choice, gemm_hopper
from recipes import _gemm_host as host
from recipes._epilogues import Epilogue
from recipes._gemm_kernel import TILE_M, Config
from recipes._gemm_splitk import reduce_grid

BIG = lk.TensorSpec(lk.bf16, (4096, 4096))
BIG_F32 = lk.TensorSpec(lk.f32, (4096, 4096))


def padded(x, align=None):
    """x in a buffer whose rows are padded to 16 bytes (as gemm's TMA-ready operands; the
    interpreter's check copies its arguments, so TMA-read extents here are 16-byte rows):
    rows of a multiple of `align` elements (None: 16 bytes of x's elements)."""
    align = align or host.TMA_ALIGN_BYTES // x.itemsize
    out = np.zeros((x.shape[0], host.round_up(x.shape[1], align)), x.dtype)
    out[:, :x.shape[1]] = x
    return out[:, :x.shape[1]]


def split_workspace(rng, m: int, n: int, splits: int, slab: int) -> tuple:
    """A split-K workspace of `splits` slabs of `slab` rows (16-byte rows) holding random f32
    partials in each slab's first m rows, and those partials (splits, m, n)."""
    ws = padded(np.zeros((splits * slab, n), np.float32))
    parts = rng.standard_normal((splits, m, n)).astype(np.float32)
    for s in range(splits):
        ws[s * slab:s * slab + m] = parts[s]
    return ws, parts


def problem(m, n, k, major, seed):
    """bf16 a (M x K), b as the kernel takes it (K x N for "N", N x K for "K"), and A @ B in
    float64."""
    rng = np.random.default_rng(seed)
    a, b = to_bf16(rng.standard_normal((m, k))), to_bf16(rng.standard_normal((k, n)))
    want = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    return padded(a), padded(b if major == "N" else np.ascontiguousarray(b.T)), want


@pytest.mark.parametrize("m, n, k, major", [(1, 72, 104, "N"), (70, 136, 72, "K")])
def test_64_row_tiles_on_the_interpreter(m, n, k, major):
    a, b, want = problem(m, n, k, major, m + n)
    cfg = Config(BM=64, BN=64, STAGES=3, CLUSTER=1)
    plan = host.schedule(m, n, k, cfg, lk.bf16, 2, full_grid=True)    # persistent: 2 CTAs
    c = padded(np.zeros((m, n), np.uint16))
    err = check_on_cpu(gemm_hopper.kernel_for(64, 1, False, lk.bf16, Epilogue()), (plan.grid,),
                       a, b, c, GRID=plan.grid, B_MAJOR=major, BN=cfg.BN, STAGES=cfg.STAGES,
                       GROUP_M=plan.group, CLUSTER=1, expect={"c": want}, tolerance=2 ** -7,
                       seeds=(0,))
    assert err < 2 ** -7


@pytest.mark.parametrize("m, n, k, major, bm, bn, parts", [(1, 72, 104, "K", 64, 8, 1),
                                                           (13, 136, 200, "N", 64, 16, 1),
                                                           (20, 200, 72, "K", 128, 16, 1),
                                                           (13, 136, 600, "N", 64, 16, 2),
                                                           (20, 200, 72, "K", 64, 16, 2)])
def test_swapped_kernel_on_the_interpreter(m, n, k, major, bm, bn, parts):
    """recipes/_gemm_swap_kernel.py: weight rows on the wgmma's M side, ragged M, N, K, both B
    majors (N-major: the MN-major A operand), two persistent CTAs over 2-8 tiles (M = 20 in
    16-token tiles: two token tiles); parts = 2: two consumer warpgroups share each tile's
    k-steps and meet in shared memory."""
    a, b, want = problem(m, n, k, major, m + n)
    c = padded(np.zeros((m, n), np.uint16))
    err = check_on_cpu(gemm_hopper.kernel_for(bm, 1, False, lk.bf16, Epilogue(), swap=True,
                                              parts=parts),
                       (2,), a, b, c, GRID=2, B_MAJOR=major, BN=bn, STAGES=4 * parts,
                       TOKEN_TILES=-(-m // bn),
                       expect={"c": want}, tolerance=2 ** -7, seeds=(0,))
    assert err < 2 ** -7


def test_swapped_kernel_epilogue_on_the_interpreter():
    """The fused epilogue through the swapped kernel's transposed fragment: D = relu(2 * (A @ B)
    + bias) + residual with a bias of strides (0, 1) and a residual read as C^T."""
    m, n, k = 5, 72, 64
    a, b, want = problem(m, n, k, "K", 3)
    rng = np.random.default_rng(4)
    bias = to_bf16(rng.standard_normal(n))
    residual = padded(to_bf16(rng.standard_normal((m, n))))
    want = np.maximum(2 * want + from_bf16(bias), 0) + from_bf16(residual)
    epilogue = Epilogue(bias=lk.bf16, activation=_epilogues.relu, residual=lk.bf16, scaled=True)
    c = padded(np.zeros((m, n), np.uint16))
    err = check_on_cpu(gemm_hopper.kernel_for(64, 1, False, lk.bf16, epilogue, swap=True), (1,),
                       a, b, c, np.broadcast_to(bias, (m, n)), residual, 2.0, GRID=1,
                       B_MAJOR="K", BN=8, STAGES=5, TOKEN_TILES=1, expect={"c": want},
                       tolerance=2 ** -7, seeds=(0,))
    assert err < 2 ** -7


def test_units_past_the_tiles_finish():
    """The full persistent grid (host.schedule full_grid): a 2-CTA-cluster kernel with two
    clusters on a one-tile problem; the second cluster has no tile and must still finish."""
    m, n, k = 64, 40, 64
    a, b, want = problem(m, n, k, "N", 1)
    cfg = gemm_hopper.CONFIGS[0]
    plan = host.schedule(m, n, k, cfg, lk.bf16, 2, full_grid=True)
    assert plan.grid == 4
    c = padded(np.zeros((m, n), np.uint16))
    err = check_on_cpu(gemm_hopper.KERNELS[2], (plan.grid,), a, b, c, GRID=plan.grid,
                       B_MAJOR="N", BN=cfg.BN, STAGES=cfg.STAGES, GROUP_M=plan.group,
                       CLUSTER=2, expect={"c": want}, tolerance=2 ** -7, seeds=(0,))
    assert err < 2 ** -7


def split_products(a, b, want_shape, k, plan, major):
    """The split-K workspace the kernel should write: slab s = A[:, range s] @ B[range s, :],
    rows past M zero (A's rows there load as zeros)."""
    m, n = want_shape
    a64 = from_bf16(a).astype(np.float64)
    b64 = from_bf16(b).astype(np.float64)
    b64 = b64 if major == "N" else b64.T
    per = -(-plan.k_tiles // plan.split_k) * 64
    ws = np.zeros((plan.split_k * plan.slab_rows, n))
    for s in range(plan.split_k):
        ks = slice(s * per, min(k, (s + 1) * per))
        ws[s * plan.slab_rows:s * plan.slab_rows + m] = a64[:, ks] @ b64[ks]
    return ws


@pytest.mark.parametrize("m, n, k, major, bm, cluster", [
    (1, 40, 200, "N", 64, 1), (5, 72, 328, "K", 64, 1), (130, 40, 200, "N", 128, 1)])
def test_split_k_partials_on_the_interpreter(m, n, k, major, bm, cluster):
    """K ranges of 2 k-steps (the last one part past K), every slab exact."""
    a, b, want = problem(m, n, k, major, k)
    cfg = Config(BM=bm, BN=64, STAGES=3, CLUSTER=cluster, SPLIT_K=3)
    plan = host.schedule(m, n, k, cfg, lk.bf16, 2 // cluster, full_grid=True)
    assert plan.split_k >= 2 and (plan.split_k - 1) * -(-plan.k_tiles // plan.split_k) < \
        plan.k_tiles                                                 # no empty K range
    ws = padded(np.zeros((plan.split_k * plan.slab_rows, n), np.float32), 4)
    expected = split_products(a, b, want.shape, k, plan, major)
    assert np.allclose(expected[:plan.slab_rows * plan.split_k].reshape(
        plan.split_k, plan.slab_rows, n).sum(0)[:m], want)
    err = check_on_cpu(gemm_hopper.kernel_for(bm, cluster, True, lk.f32, Epilogue()),
                       (plan.grid,), a, b, ws, GRID=plan.grid, B_MAJOR=major, BN=cfg.BN,
                       STAGES=cfg.STAGES, GROUP_M=plan.group, CLUSTER=cluster,
                       SPLIT_K=plan.split_k,
                       expect={"c": expected}, tolerance=1e-5, seeds=(0,))
    assert err < 1e-5


def epilogue_reference(x, c=None, bias=None, act=None, residual=None, alpha=1.0, beta=0.0):
    y = alpha * x
    if c is not None:
        y = y + beta * c
    if bias is not None:
        y = y + bias
    if act is not None:
        y = act(y)
    return y if residual is None else y + residual


def SILU(x):
    return x / (1.0 + np.exp(-x))


def RELU(x):
    return np.maximum(x, 0.0)


def epilogue_operands(m, n, rng):
    """(c (bf16), bias (f32), residual (bf16)) and their float64 values."""
    c = to_bf16(rng.standard_normal((m, n)))
    bias = rng.standard_normal(n).astype(np.float32)
    residual = to_bf16(rng.standard_normal((m, n)))
    return (c, bias, residual), tuple(x.astype(np.float64) for x in
                                      (from_bf16(c), bias, from_bf16(residual)))


def test_split_k_reduction_applies_the_epilogue():
    """The reduction kernel sums 3 slabs and applies silu(0.5 * acc + 2 * C + bias) + residual
    into a bf16 D, on a ragged 5 x 300 result (masked rows and columns)."""
    rng = np.random.default_rng(3)
    m, n, splits, slab = 5, 300, 3, 64
    ws, parts = split_workspace(rng, m, n, splits, slab)
    (c, bias, residual), (c64, bias64, res64) = epilogue_operands(m, n, rng)
    want = epilogue_reference(parts.astype(np.float64).sum(0), c64, bias64, SILU, res64, 0.5,
                              2.0)
    epi = Epilogue(c=lk.bf16, bias=lk.f32, activation=_epilogues.silu, residual=lk.bf16,
                   scaled=True)
    out = c.copy()                                  # C is out's contents (read, then written)
    err = check_on_cpu(gemm_hopper.reduce_kernel(lk.bf16, epi), reduce_grid(m, n), ws, out,
                       out, np.broadcast_to(bias, (m, n)), residual, 0.5, 2.0, SPLITS=splits,
                       expect={"c": want}, tolerance=2 ** -7, seeds=(0,))
    assert err < 2 ** -7


@pytest.mark.parametrize("bm, out_type", [(128, lk.f32), (64, lk.bf16)])
def test_fused_epilogue_with_c_residual_and_scales(bm, out_type):
    """The GEMM kernel's own epilogue: D = relu(alpha * acc + beta * C) + residual, f32 or
    bf16 out, on a ragged 70 x 72 x 104 problem."""
    rng = np.random.default_rng(bm)
    m, n, k = 70, 72, 104
    a, b, x = problem(m, n, k, "K", 9)
    (c, _, residual), (c64, _, res64) = epilogue_operands(m, n, rng)
    if out_type == lk.f32:
        c = from_bf16(c).astype(np.float32)
    out = padded(c, 8)
    want = epilogue_reference(x, c64, None, RELU, res64, -1.5, 0.25)
    epi = Epilogue(c=out_type, activation=_epilogues.relu, residual=lk.bf16, scaled=True)
    cfg = Config(BM=bm, BN=64, STAGES=3, CLUSTER=1)
    plan = host.schedule(m, n, k, cfg, lk.bf16, 1, full_grid=True)
    err = check_on_cpu(gemm_hopper.kernel_for(bm, 1, False, out_type, epi), (plan.grid,), a, b,
                       out, out, residual, -1.5, 0.25, GRID=plan.grid, B_MAJOR="K", BN=cfg.BN,
                       STAGES=cfg.STAGES, GROUP_M=plan.group, CLUSTER=1, expect={"c": want},
                       tolerance=2 ** -7, seeds=(0,))
    assert err < 2 ** -7


@pytest.mark.parametrize("n", [40, 13])
def test_host_launches_run_split_k_end_to_end(n):
    """gemm_hopper.launches (the GPU path's description) on CPU tensors through the
    interpreter: a forced split config, a bias, f32 out written into a column-strided out
    (13 columns: rows that end inside a 16-byte chunk, which the partials' TMA stores write
    whole into the workspace's padded rows)."""
    torch = pytest.importorskip("torch")
    from layoutkit.torch.interpreted import run_launches
    gen = torch.Generator().manual_seed(0)
    m, k = 3, 300
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, generator=gen).to(torch.bfloat16).t()            # K-major
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    out = torch.full((n, m), float("nan")).t()                             # not TMA-ready
    cfg = Config(BM=64, BN=64, STAGES=3, CLUSTER=1, SPLIT_K=4)
    epi = gemm_hopper.epilogue_of(out, bias, None, None, 1.0, 0.0)
    steps, c = gemm_hopper.launches(a, b, out, cfg, epi, bias, None, 1.0, 0.0, 132,
                                    lambda cfg, major: 1)
    assert [kernel.name for kernel, *_ in steps] == ["gemm_bm64_splitk",
                                                     "gemm_splitk_reduce_fused"]
    run_launches(steps)
    out.copy_(c)
    want = a.double() @ b.double() + bias.double()
    assert ((out.double() - want).abs().max() / want.abs().max()).item() < 1e-5


@pytest.mark.parametrize("swap", [False, True], ids=["tma_store", "swapped"])
@pytest.mark.parametrize("beta", [0.0, -1.0])
def test_an_out_whose_rows_end_inside_a_chunk_keeps_its_neighbours(beta, swap):
    """out = 13 columns of a 16-column tensor (its rows TMA-ready): TMA stores write a row's
    last 16-byte chunk whole, so the kernel stores to a buffer of padded rows (beta: holding
    out's values) and the product is copied into out; the swapped kernel's masked stores write
    out in place. Columns 13..15 keep their values."""
    torch = pytest.importorskip("torch")
    from layoutkit.torch.interpreted import run_launches
    gen = torch.Generator().manual_seed(1)
    m, n, k = 5, 13, 64
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(k, n, generator=gen).to(torch.bfloat16)
    big = torch.randn(m, 16, generator=gen).to(torch.bfloat16)
    before = big.clone()
    out = big[:, :n]
    epi = gemm_hopper.epilogue_of(out, None, None, None, 1.0, beta)
    cfg = Config(BM=64, BN=8, STAGES=4, CLUSTER=1, SWAP=True) if swap else \
        Config(BM=64, BN=64, STAGES=3, CLUSTER=1)
    steps, c = gemm_hopper.launches(a, b, out, cfg, epi, None, None, 1.0, beta, 132,
                                    lambda cfg, major: 1)
    assert (steps[0][2][2] is out and c is out) if swap else \
        (steps[0][2][2] is not out and c is not out)      # in place, or through a buffer
    run_launches(steps)
    if not swap:
        out.copy_(c)
    want = a.double() @ b.double() + beta * before[:, :n].double()
    assert ((out.double() - want).abs().max() / want.abs().max()).item() < 2 ** -7
    assert torch.equal(big[:, n:], before[:, n:])


# ---- compiled: no spills ---------------------------------------------------------------------
def resources(kernel, *args, **constexprs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # spills and ignored setmaxnreg are warnings
        return kernel.resources(*args, **constexprs)


@pytest.mark.parametrize("tile", _gemm_choice.candidates(1)[1:], ids=str)
def test_every_shipped_tile_compiles_without_spills(tile):
    for split in (False, True):
        for major in ("N", "K"):
            usage = resources(gemm_hopper.kernel_for(tile.BM, 1, split, lk.f32 if split else
                                                     lk.bf16, Epilogue()),
                              BIG, BIG, BIG_F32 if split else BIG, GRID=132, B_MAJOR=major,
                              BN=tile.BN, STAGES=tile.STAGES, GROUP_M=8, CLUSTER=1,
                              **({"SPLIT_K": 2} if split else {}))
            assert usage.spill_store_bytes == usage.spill_load_bytes == 0, (split, major)
            assert usage.stack_frame_bytes == 0, (split, major)


# The swapped tiles' registers grow with BN (the accumulators: BN / 2 a thread per chain), not
# with the ring: the widest token tile of each consumer layout, and the 128-row tile at BN 8
# (the most stages of the two-consumer layout).
SPILL_SWAPS = _gemm_choice.swap_candidates(64) + _gemm_choice.swap_candidates(1)[1:] + [
    Config(BM=64, BN=64, CLUSTER=1, SWAP=True, SPLIT_K=2,
           STAGES=_gemm_choice.max_swap_stages(64, 64, 2))]


@pytest.mark.parametrize("tile", SPILL_SWAPS, ids=str)
def test_every_swapped_tile_compiles_without_spills(tile):
    tokens = lk.TensorSpec(lk.bf16, (tile.BN, 4096))
    for major in ("N", "K"):
        usage = resources(gemm_hopper.kernel_for(tile.BM, 1, False, lk.bf16, Epilogue(),
                                                 swap=True, parts=tile.SPLIT_K),
                          tokens, BIG, tokens, GRID=132, B_MAJOR=major, BN=tile.BN,
                          STAGES=tile.STAGES, TOKEN_TILES=1)
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, major
        assert usage.stack_frame_bytes == 0, major


def test_full_epilogues_compile_without_spills():
    every = Epilogue(c=lk.f32, bias=lk.bf16, activation=_epilogues.gelu, residual=lk.bf16,
                     scaled=True)
    bias = lk.TensorSpec(lk.bf16, (4096, 4096), (0, 1))
    for bm, bn, cluster in ((128, 256, 2), (64, 256, 1)):
        usage = resources(gemm_hopper.kernel_for(bm, cluster, False, lk.f32, every), BIG, BIG,
                          BIG_F32, BIG_F32, bias, BIG, 0.5, 1.0, GRID=132, B_MAJOR="K", BN=bn,
                          STAGES=3, GROUP_M=8, CLUSTER=cluster)
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, bm
    tokens, tokens_f32 = lk.TensorSpec(lk.bf16, (64, 4096)), lk.TensorSpec(lk.f32, (64, 4096))
    usage = resources(gemm_hopper.kernel_for(64, 1, False, lk.f32, every, swap=True), tokens, BIG,
                      tokens_f32, tokens_f32, lk.TensorSpec(lk.bf16, (64, 4096), (0, 1)), tokens,
                      0.5, 1.0, GRID=132, B_MAJOR="K", BN=64, STAGES=14, TOKEN_TILES=1)
    assert usage.spill_store_bytes == usage.spill_load_bytes == 0, "swapped"
    usage = resources(gemm_hopper.reduce_kernel(lk.bf16, every), BIG_F32,
                      lk.TensorSpec(lk.bf16, (4096, 4096)), BIG_F32, bias, BIG, 0.5, 1.0,
                      SPLITS=4)
    assert usage.spill_store_bytes == usage.spill_load_bytes == 0


# ---- the heuristic -------------------------------------------------------------------------
def test_config_for_worked_examples():
    default = gemm_hopper.CONFIGS[0]
    for shape in ((4096, 4096, 4096), (16384, 14336, 4096), (4096, 128256, 4096),
                  (1024, 4096, 4096)):
        assert gemm_hopper.config_for(*shape) == default, shape    # fills the GPU: measured
    decode = gemm_hopper.config_for(1, 4096, 4096)                         # one launch, the
    assert decode.SWAP and (decode.BM, decode.BN, decode.CLUSTER) == (64, 8, 1)  # weights on M
    assert gemm_hopper.config_for(16, 14336, 4096).SWAP                  # 224 weight tiles
    assert gemm_hopper.config_for(16, 4096, 14336).SWAP     # 64 CTAs at 53 GB/s: the stream
    few = gemm_hopper.config_for(16, 1024, 14336)       # 16 weight tiles x 224 k-steps: split-K
    assert not few.SWAP and few.BM == 64 and few.SPLIT_K > 1             # over 128 CTAs wins
    assert not gemm_hopper.config_for(128, 4096, 4096).SWAP              # past MAX_SWAP_M
    assert gemm_hopper.config_for(1024, 1024, 1024) != default            # 32 tiles of 128x256


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20000), st.integers(1, 150000), st.integers(1, 30000),
       st.sampled_from([78, 114, 132]))
def test_every_choice_is_a_valid_config(m, n, k, sms):
    cfg = gemm_hopper.config_for(m, n, k, sms)
    host.check_config("test", cfg, TILE_M, split_k=True, swap=True)
    assert cfg.smem_bytes(lk.f32) <= _gemm_choice.SMEM_BYTES
    if cfg.SWAP:                 # decode shapes only; its own schedule (one launch, no split)
        assert m <= _gemm_choice.MAX_SWAP_M and m <= cfg.BN < m + 8
        return
    k_tiles = -(-k // 64)
    assert cfg.SPLIT_K == 1 or k_tiles >= _gemm_choice.MIN_SPLIT_STEPS * cfg.SPLIT_K
    plan = host.schedule(m, n, k, cfg, lk.bf16, sms // cfg.CLUSTER, full_grid=True)
    per = -(-plan.k_tiles // plan.split_k)
    assert (plan.split_k - 1) * per < plan.k_tiles <= plan.split_k * per   # no empty K range
    assert plan.slab_rows >= m and plan.slab_rows % cfg.BM == 0


# ---- argument errors -------------------------------------------------------------------------
torch = pytest.importorskip("torch")
GEMM = "gemm_hopper.gemm"


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


CASES = [
    ("residual type", {"residual": np.zeros((4, 4))}, TypeError,
     f"{GEMM}: residual is a torch tensor on a CUDA device, got numpy.ndarray (torch."
     "from_numpy(x).cuda() makes one of a numpy array)"),
    ("residual dtype", {"residual": meta(4, 4, dtype=torch.float16)}, TypeError,
     f"{GEMM}: residual has dtype torch.float16; the kernel takes torch.bfloat16 or "
     "torch.float32 (no implicit conversion)"),
    ("residual shape", {"residual": meta(4)}, ValueError,
     f"{GEMM}: residual has shape (4,); it is added to the result, shape (4, 4)"),
    ("alpha bool", {"alpha": True}, TypeError,
     f"{GEMM}: alpha is a Python int or float (a scale of the product), got builtins.bool True"),
    ("beta tensor", {"beta": torch.ones(())}, TypeError,
     f"{GEMM}: beta is a Python int or float (a scale of the product), got torch.Tensor "
     "tensor(1.)"),
    ("beta without out", {"beta": 0.5}, ValueError,
     f"{GEMM}: beta = 0.5 scales C, which is out's contents (D = alpha * (a @ b) + beta * C is "
     "written over it, as cuBLAS does); give out, or beta = 0"),
    ("out_dtype", {"out_dtype": torch.float16}, TypeError,
     f"{GEMM}: out_dtype is torch.bfloat16 or torch.float32 (or None: out's dtype, else bf16), "
     "got torch.float16"),
    ("out_dtype vs out", {"out": meta(4, 4), "out_dtype": torch.float32}, ValueError,
     f"{GEMM}: out has dtype torch.bfloat16 but out_dtype is torch.float32; give one of them, "
     "or the same"),
    ("residual device", {"residual": torch.zeros(4, 4, dtype=torch.bfloat16)}, ValueError,
     f"{GEMM}: residual is on cpu and a on meta; every tensor of one call is on one device"),
    ("BM", {"config": Config(BM=96)}, ValueError,
     f"{GEMM}: config Config(BN=256, STAGES=3, GROUP_M=8, CLUSTER=2, BM=96, SPLIT_K=1, "
     "SWAP=False) does not fit the kernel: BM = 96 (the kernel's tile has 64 or 128 rows: "
     "consumer warpgroups of 64)"),
    ("SPLIT_K", {"config": Config(SPLIT_K=0)}, ValueError,
     f"{GEMM}: config Config(BN=256, STAGES=3, GROUP_M=8, CLUSTER=2, BM=128, SPLIT_K=0, "
     "SWAP=False) does not fit the kernel: SPLIT_K = 0 (a positive int)"),
    ("SPLIT_K in a cluster", {"config": Config(SPLIT_K=2)}, ValueError,
     f"{GEMM}: config Config(BN=256, STAGES=3, GROUP_M=8, CLUSTER=2, BM=128, SPLIT_K=2, "
     "SWAP=False) does not fit the kernel: SPLIT_K = 2 (split-K runs without clusters: "
     "CLUSTER = 1)"),
]


@pytest.mark.parametrize("name, kwargs, error, message", CASES, ids=[c[0] for c in CASES])
def test_gemm_refuses(name, kwargs, error, message):
    with pytest.raises(error) as info:
        gemm_hopper.gemm(meta(4, 8), meta(8, 4), **kwargs)
    assert str(info.value) == message


def test_valid_epilogue_arguments_reach_the_device_rule():
    with pytest.raises(ValueError, match="a is on meta; the kernel runs on a CUDA device"):
        gemm_hopper.gemm(meta(4, 8), meta(8, 4), out=meta(4, 4, dtype=torch.float32),
                         residual=meta(4, 4), bias=meta(4), activation="silu", alpha=2,
                         beta=0.5, config=Config(BM=64, BN=64, CLUSTER=1, SPLIT_K=3))


def test_residual_overlapping_out_is_refused_unless_it_is_out():
    a, b = torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(8, 4, dtype=torch.bfloat16)
    buf = torch.zeros(8, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"gemm_hopper.gemm: out \(bytes .*\) overlaps residual "
                                         r"\(bytes .*\); the kernel reads residual while it "
                                         "writes out"):
        gemm_hopper.gemm(a, b, out=buf[:4], residual=buf[2:6])
    with pytest.raises(ValueError, match="a is on cpu; the kernel runs on a CUDA device"):
        gemm_hopper.gemm(a, b, out=buf[:4], residual=buf[:4])     # in place: D = AB + D


def test_split_k_is_refused_where_the_kernel_has_none():
    """gemm_fp8's checks (the default check_config) keep SPLIT_K = 1 and BM = 128."""
    with pytest.raises(ValueError, match=r"SPLIT_K = 2 \(1: this kernel has no split-K\)"):
        host.check_config("gemm_fp8", Config(SPLIT_K=2))
    with pytest.raises(ValueError, match=r"BM = 64 \(the kernel's tile has 128 rows"):
        host.check_config("gemm_fp8", dataclasses.replace(Config(), BM=64))


def test_torch_op_takes_c_exactly_with_beta():
    pytest.importorskip("layoutkit.torch")          # registers torch.ops.layoutkit
    with pytest.raises(ValueError, match=r"layoutkit.gemm: c \(C of D = alpha \* \(a @ b\) \+ "
                                         r"beta \* C\) is given exactly when beta != 0, got "
                                         "beta = 0.5 and no c"):
        torch.ops.layoutkit.gemm(meta(4, 8), meta(8, 4), beta=0.5)
    got = torch.ops.layoutkit.gemm(meta(4, 8), meta(8, 4), None, None, meta(4, 4), 2.0, 1.0,
                                   meta(4, 4), torch.float32)
    assert got.shape == (4, 4) and got.dtype == torch.float32


def test_generated_kernels_have_distinct_cacheable_fingerprints():
    """The on-disk specialization cache keys on the kernel function's fingerprint: every
    generated kernel has one (no NotCacheable), and kernels differing only in a parameter's
    element type (the bias, C's type) or the tile rows get different ones."""
    from layoutkit.dsl.core.fingerprint import function_fingerprint
    kernels = [gemm_hopper.kernel_for(128, 1, False, lk.bf16, Epilogue(bias=lk.f32)),
               gemm_hopper.kernel_for(128, 1, False, lk.bf16, Epilogue(bias=lk.bf16)),
               gemm_hopper.kernel_for(128, 1, False, lk.f32, Epilogue(bias=lk.bf16)),
               gemm_hopper.kernel_for(64, 1, False, lk.f32, Epilogue(bias=lk.bf16)),
               gemm_hopper.kernel_for(64, 1, True, lk.f32, Epilogue()),
               gemm_hopper.reduce_kernel(lk.bf16, Epilogue()),
               gemm_hopper.reduce_kernel(lk.f32, Epilogue()),
               gemm_hopper.reduce_kernel(lk.bf16, Epilogue(residual=lk.bf16, scaled=True))]
    prints = [function_fingerprint(k.fn) for k in kernels]
    assert len(set(prints)) == len(prints)


def test_heavy_epilogue_runs_in_narrower_chunks():
    """C (f32), an f32 bias and a bf16 residual beside an f32 output load 10 bytes per value:
    the kernel takes 32-column chunks (recipes/_gemm_kernel.py chunk_columns) so they fit the
    registers; D = gelu(0.5 * acc + 2 * C + bias) + residual on a ragged 70 x 200 x 72
    problem (masked rows; a full tile and one whose third chunk is partial and fourth empty),
    one CTA taking both tiles, against float64."""
    rng = np.random.default_rng(5)
    m, n, k = 70, 200, 72
    a, b, x = problem(m, n, k, "K", 4)
    (c, bias, residual), (c64, bias64, res64) = epilogue_operands(m, n, rng)
    c = from_bf16(c).astype(np.float32)
    out = padded(c, 4)
    epi = Epilogue(c=lk.f32, bias=lk.f32, activation=_epilogues.gelu, residual=lk.bf16,
                   scaled=True)
    def gelu(v):
        return 0.5 * v * (1.0 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))
    want = epilogue_reference(x, c64, bias64, gelu, res64, 0.5, 2.0)
    cfg = Config(BM=128, BN=128, STAGES=3, CLUSTER=1)
    plan = host.schedule(m, n, k, cfg, lk.bf16, 1, full_grid=True)
    kernel = gemm_hopper.kernel_for(128, 1, False, lk.f32, epi)
    F = lk.TensorSpec(lk.f32, (m, n))
    ptx = kernel.ptx(lk.TensorSpec(lk.bf16, (m, k)), lk.TensorSpec(lk.bf16, (n, k)), F, F,
                     lk.TensorSpec(lk.f32, (m, n), (0, 1)), lk.TensorSpec(lk.bf16, (m, n)),
                     0.5, 2.0, GRID=plan.grid, B_MAJOR="K", BN=cfg.BN, STAGES=cfg.STAGES,
                     GROUP_M=plan.group, CLUSTER=1)
    # 2 consumers x 4 chunks of 32 columns, one TMA store each
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared") == 2 * 4
    err = check_on_cpu(kernel, (plan.grid,), a, b,
                       out, out, np.broadcast_to(bias, (m, n)), residual, 0.5, 2.0,
                       GRID=plan.grid, B_MAJOR="K", BN=cfg.BN, STAGES=cfg.STAGES,
                       GROUP_M=plan.group, CLUSTER=1, expect={"c": want}, tolerance=2 ** -7,
                       seeds=(0,))
    assert err < 2 ** -7
