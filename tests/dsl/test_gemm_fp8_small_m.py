"""recipes/gemm_fp8.py's small-M path on the CPU: the 64-row kernel, split-K (unscaled f32
partials per K range, then recipes/_gemm_splitk.py's reduction applying the scales), run on the
interpreter on ragged problems against float64 of the dequantized inputs; every candidate tile
compiles without spills, split or not; the heuristic's fp8 choices and invariants (the bf16
model with fp8's k-step, rate and bytes)."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutkit as lk
from layoutkit.dsl.interpreter import check_on_cpu, from_fp8, to_fp8
from recipes import _gemm_choice, gemm_fp8
from recipes import _gemm_host as host
from recipes._gemm_kernel import TILE_M
from recipes._gemm_splitk import reduce_grid

from .test_gemm_small_m import padded, split_workspace

BIG8 = lk.TensorSpec(lk.e4m3, (4096, 4096))
BIG_F32 = lk.TensorSpec(lk.f32, (4096, 4096))
ROWWISE = (lk.TensorSpec(lk.f32, (4096, 4096), (1, 0)), lk.TensorSpec(lk.f32, (4096, 4096),
                                                                       (0, 1)))
TENSORWISE = lk.TensorSpec(lk.f32, (4096, 4096), (0, 0))
BK = gemm_fp8.ATOM_K
# the interpreter's fp8 wgmma accumulator keeps 14 bits within a promotion group: sums of up to
# PROMOTE * 128 products of N(0, 1) x N(0, 4) values, relative to max |D| of the whole K
TOLERANCE = 2 ** -10


def problem(m, n, k, seed):
    """e4m3 a (M x K) and b_t (N x K, K contiguous: the kernel's B) and their float64 values."""
    rng = np.random.default_rng(seed)
    a, b_t = to_fp8(rng.standard_normal((m, k)) * 2, lk.e4m3), \
        to_fp8(rng.standard_normal((n, k)), lk.e4m3)
    return a, b_t, from_fp8(a, lk.e4m3).astype(np.float64), \
        from_fp8(b_t, lk.e4m3).astype(np.float64)


@pytest.mark.parametrize("m, n, k, bm, bn", [(1, 72, 592, 64, 64), (5, 264, 520, 64, 256),
                                             (130, 40, 700, 128, 128)])
def test_split_k_partials_on_the_interpreter(m, n, k, bm, bn):
    """K ranges of 2 k-steps (the last one part past K, its A and B loaded as zeros), every
    slab A[:, range] @ B[range, :] within the fp8 accumulator's bound, rows past M zero;
    BN 256 promotes in two 128-column parts."""
    a, b_t, a64, b64 = problem(m, n, k, seed=k)
    cfg = gemm_fp8.Config(BM=bm, BN=bn, STAGES=3, CLUSTER=1, SPLIT_K=3, PROMOTE=2)
    plan = host.schedule(m, n, k, cfg, lk.e4m3, 2, full_grid=True)
    per = -(-plan.k_tiles // plan.split_k)
    assert plan.split_k == 3 and (plan.split_k - 1) * per < plan.k_tiles     # no empty range
    want = np.zeros((plan.split_k * plan.slab_rows, n))
    for s in range(plan.split_k):
        ks = slice(s * per * BK, min(k, (s + 1) * per * BK))
        want[s * plan.slab_rows:s * plan.slab_rows + m] = a64[:, ks] @ b64[:, ks].T
    ws = padded(np.zeros((plan.split_k * plan.slab_rows, n), np.float32), 4)
    err = check_on_cpu(gemm_fp8.splitk_kernel(lk.e4m3, lk.e4m3, bm), (plan.grid,), padded(a),
                       padded(b_t), ws, GRID=plan.grid, BN=cfg.BN, STAGES=cfg.STAGES,
                       GROUP_M=plan.group, PROMOTE=cfg.PROMOTE, SPLIT_K=plan.split_k,
                       expect={"w": want}, tolerance=TOLERANCE, seeds=(0,))
    assert err < TOLERANCE


@pytest.mark.parametrize("c_type, rowwise", [(lk.bf16, True), (lk.f32, False)])
def test_reduction_sums_the_slabs_and_applies_the_scales(c_type, rowwise):
    """D = scale_a * scale_b * (sum of 3 slabs) on a ragged 5 x 300 result (masked rows and
    columns), per-row / per-column scales into bf16, per-tensor ones into f32."""
    rng = np.random.default_rng(4)
    m, n, splits, slab = 5, 300, 3, 64
    ws, parts = split_workspace(rng, m, n, splits, slab)
    sa = (rng.random((m, 1) if rowwise else (1, 1)) + 0.5).astype(np.float32)
    sb = (rng.random((1, n) if rowwise else (1, 1)) + 0.5).astype(np.float32)
    want = sa.astype(np.float64) * sb * parts.astype(np.float64).sum(0)
    c = np.zeros((m, host.round_up(n, 8)), np.uint16 if c_type == lk.bf16 else np.float32)
    tolerance = 2 ** -7 if c_type == lk.bf16 else 1e-6
    err = check_on_cpu(gemm_fp8.reduce_kernel(c_type), reduce_grid(m, n), ws, c[:, :n],
                       np.broadcast_to(sa, (m, n)), np.broadcast_to(sb, (m, n)),
                       SPLITS=splits, expect={"c": want}, tolerance=tolerance, seeds=(0,))
    assert err < tolerance


def test_64_row_tile_on_the_interpreter():
    """The one-consumer kernel (BM 64) with its scales, M = 3 of a 64-row tile, two N tiles."""
    m, n, k = 3, 136, 300
    rng = np.random.default_rng(6)
    err = gemm_fp8.cpu_error((m, n, k), (lk.e4m3, lk.e4m3, lk.bf16), "rowwise", 1,
                             gemm_fp8.Config(BM=64, BN=128, STAGES=2, CLUSTER=1), rng=rng)
    assert err < 2 ** -7


@pytest.mark.parametrize("m, n, k, bm, bn, parts, promote, scales, c_type", [
    (1, 72, 1040, 64, 8, 1, 2, "rowwise", lk.bf16),
    (13, 136, 600, 64, 16, 2, 1, "tensorwise", lk.f32),
    (20, 200, 300, 128, 16, 1, 2, "rowwise", lk.bf16)])
def test_swapped_kernel_on_the_interpreter(m, n, k, bm, bn, parts, promote, scales, c_type):
    """The swapped kernel (decode) with fp8 operands: each accumulator promoted into the f32
    total every PROMOTE of its k-steps, the scales on the transposed fragment, ragged M, N, K,
    two persistent CTAs, two token tiles at M = 20; K = 1040: 9 k-steps padded to 16, two
    restarts a chain; parts = 2: two consumer warpgroups sharing a tile's k-steps."""
    cfg = gemm_fp8.Config(BM=bm, BN=bn, STAGES=4 * parts, CLUSTER=1, SPLIT_K=parts, SWAP=True,
                          PROMOTE=promote)
    tolerance = 2 ** -7 if c_type == lk.bf16 else TOLERANCE
    err = gemm_fp8.cpu_error((m, n, k), (lk.e4m3, lk.e4m3, c_type), scales, 2, cfg,
                             rng=np.random.default_rng(m), tolerance=tolerance, seeds=(0,))
    assert err < tolerance


def test_swapped_kernel_promotes():
    """Without promotion (PROMOTE 0) a chain keeps its k-steps' sum in the 14-bit fp8
    accumulator, which the interpreter models: positive inputs (sums that only grow) over
    K = 4096 miss f32's bound where PROMOTE 1 meets it."""
    def error(promote):
        cfg = gemm_fp8.Config(BM=64, BN=8, STAGES=4, CLUSTER=1, SWAP=True, PROMOTE=promote)
        return gemm_fp8.cpu_error((2, 64, 4096), (lk.e4m3, lk.e4m3, lk.f32), "tensorwise", 1,
                                  cfg, rng=np.random.default_rng(0), tolerance=1.0,
                                  seeds=(0,), positive=True)
    promoted, fast = error(1), error(0)
    assert promoted < 2 ** -11 < fast, (promoted, fast)


# ---- compiled: no spills ---------------------------------------------------------------------
@pytest.mark.parametrize("tile", _gemm_choice.candidates(1, gemm_fp8.CONFIGS[0])[1:], ids=str)
def test_every_candidate_tile_compiles_without_spills(tile):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # spills and ignored setmaxnreg are warnings
        whole = gemm_fp8.kernel(lk.e4m3, lk.e4m3, lk.bf16, 1, tile.BM).resources(
            BIG8, BIG8, lk.TensorSpec(lk.bf16, (4096, 4096)), *ROWWISE, GRID=132, BN=tile.BN,
            STAGES=tile.STAGES, GROUP_M=8, CLUSTER=1, PROMOTE=tile.PROMOTE)
        split = gemm_fp8.splitk_kernel(lk.e4m3, lk.e4m3, tile.BM).resources(
            BIG8, BIG8, BIG_F32, GRID=132, BN=tile.BN, STAGES=tile.STAGES, GROUP_M=8,
            PROMOTE=tile.PROMOTE, SPLIT_K=2)
    for usage in (whole, split):
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, usage
        assert usage.stack_frame_bytes == 0, usage


# the widest token tile of each consumer layout (registers grow with BN: CHAINS + 1
# accumulators of BN / 2 a thread), bf16 out with per-row scales and f32 with per-tensor ones
SWAPPED = [_gemm_choice.swap_candidates(64, gemm_fp8.CONFIGS[0])[0],
           _gemm_choice.swap_candidates(64, gemm_fp8.CONFIGS[0])[1],
           gemm_fp8.Config(BM=64, BN=64, CLUSTER=1, SWAP=True, SPLIT_K=2,
                           STAGES=_gemm_choice.max_swap_stages(64, 64, 2))]


@pytest.mark.parametrize("tile", SWAPPED, ids=str)
def test_every_swapped_tile_compiles_without_spills(tile):
    tokens = lk.TensorSpec(lk.e4m3, (tile.BN, 4096))
    for c_type, scales in ((lk.bf16, ROWWISE), (lk.f32, (TENSORWISE,) * 2)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")      # spills and ignored setmaxnreg are warnings
            usage = gemm_fp8.swap_kernel(lk.e4m3, lk.e4m3, c_type, tile.BM, tile.SPLIT_K
                                         ).resources(
                tokens, BIG8, lk.TensorSpec(c_type, (tile.BN, 4096)), *scales, GRID=132,
                BN=tile.BN, STAGES=tile.STAGES, TOKEN_TILES=1, PROMOTE=tile.PROMOTE)
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, (c_type, usage)
        assert usage.stack_frame_bytes == 0, (c_type, usage)


# ---- the heuristic -------------------------------------------------------------------------
def test_config_for_worked_examples():
    default = gemm_fp8.CONFIGS[0]
    for shape in ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 14336, 4096),
                  (4096, 128256, 4096), (1024, 4096, 4096)):
        assert gemm_fp8.config_for(*shape) == default, shape        # fills the GPU: measured
    decode = gemm_fp8.config_for(1, 4096, 4096)
    assert decode.SWAP and (decode.BM, decode.BN, decode.CLUSTER) == (64, 8, 1)  # weights on M
    assert isinstance(decode, gemm_fp8.Config) and decode.PROMOTE == gemm_fp8.PROMOTE
    assert gemm_fp8.config_for(16, 14336, 4096).SWAP                     # 224 weight tiles
    assert gemm_fp8.config_for(1, 4096, 14336).SWAP                      # 64 weight tiles
    few = gemm_fp8.config_for(1, 1024, 14336)           # 16 weight tiles x 112 k-steps: split-K
    assert not few.SWAP and few.BM == 64 and few.SPLIT_K > 1             # over 64 CTAs wins
    assert not gemm_fp8.config_for(128, 4096, 4096).SWAP                 # past MAX_SWAP_M
    assert gemm_fp8.autotune_space(1, 4096, 4096)[-1] == decode


def test_the_model_counts_fp8_k_steps_rate_and_bytes():
    """The same tile and split of fp8 operands: half the k-steps of bf16's for the same K (a
    128-element row), so less modelled time, and half the HBM bytes where they bound it."""
    tile = gemm_fp8.Config(BM=64, BN=128, STAGES=8, CLUSTER=1)
    for m, n, k in ((1, 4096, 4096), (64, 14336, 4096), (4096, 4096, 4096)):
        fp8 = _gemm_choice.modelled_seconds(m, n, k, tile, 132, lk.e4m3)
        bf16 = _gemm_choice.modelled_seconds(m, n, k, tile, 132, lk.bf16)
        assert fp8 < bf16, (m, n, k)
    hbm_bound = (1, 4096, 4096)      # B's 16 MB (bf16: 32 MB) dominate at M = 1
    start = _gemm_choice.START_S     # the launch's fixed start, the same for both
    assert _gemm_choice.modelled_seconds(*hbm_bound, tile, 132, lk.e4m3) - start == \
        pytest.approx((_gemm_choice.modelled_seconds(*hbm_bound, tile, 132, lk.bf16) - start)
                      / 2, rel=0.1)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20000), st.integers(1, 150000), st.integers(1, 30000),
       st.sampled_from([78, 114, 132]))
def test_every_choice_is_a_valid_config(m, n, k, sms):
    cfg = gemm_fp8.config_for(m, n, k, sms)
    host.check_config("test", cfg, TILE_M, split_k=True, swap=True)
    gemm_fp8.check_promotion("test", cfg)
    assert cfg.smem_bytes(lk.f32) <= _gemm_choice.SMEM_BYTES
    if cfg.SWAP:                 # decode shapes only; its own schedule (one launch, no split)
        assert m <= _gemm_choice.MAX_SWAP_M and m <= cfg.BN < m + 8
        assert cfg.PROMOTE == gemm_fp8.PROMOTE
        return
    k_tiles = -(-k // BK)
    assert cfg.SPLIT_K == 1 or k_tiles >= _gemm_choice.MIN_SPLIT_STEPS * cfg.SPLIT_K
    plan = host.schedule(m, n, k, cfg, lk.e4m3, sms // cfg.CLUSTER, full_grid=True)
    per = -(-plan.k_tiles // plan.split_k)
    assert (plan.split_k - 1) * per < plan.k_tiles <= plan.split_k * per   # no empty K range
    assert plan.slab_rows >= m and plan.slab_rows % cfg.BM == 0


@pytest.mark.parametrize("config, names", [
    (gemm_fp8.Config(BM=64, BN=64, STAGES=3, CLUSTER=1, SPLIT_K=3),
     ["gemm_fp8_splitk", "gemm_fp8_reduce"]),
    (gemm_fp8.Config(BM=64, BN=128, STAGES=2, CLUSTER=1), ["gemm_fp8"]),
    (gemm_fp8.Config(BM=64, BN=8, STAGES=4, CLUSTER=1, SWAP=True), ["gemm_fp8_swap_bm64"])])
def test_host_launches_run_end_to_end(config, names):
    """gemm_fp8.launches (the GPU path's description) on CPU tensors through the interpreter:
    per-row / per-column scales, 13 columns into a column-strided out (rows that end inside a
    16-byte chunk: the partials' TMA stores write the workspace's padded rows whole)."""
    torch = pytest.importorskip("torch")
    from layoutkit.torch.interpreted import run_launches
    gen = torch.Generator().manual_seed(1)
    m, n, k = 3, 13, 700
    a = (torch.randn(m, k, generator=gen) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn).t()     # column-major
    sa, sb = torch.rand(m, 1, generator=gen) + 0.5, torch.rand(1, n, generator=gen) + 0.5
    out = torch.full((n, m), float("nan")).t()                           # not TMA-ready
    steps, c = gemm_fp8.launches(a, b, sa, sb, out, config, 132, lambda cfg, types: 1)
    assert [kernel.name for kernel, *_ in steps] == names
    run_launches(steps)
    out.copy_(c)
    want = gemm_fp8.reference(a, b, sa, sb)
    assert ((out.double() - want).abs().max() / want.abs().max()).item() < TOLERANCE
