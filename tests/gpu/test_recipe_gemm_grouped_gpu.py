"""GPU tests (marker `gpu`) of recipes/gemm_grouped.py: random ragged groups (empty groups,
groups of 1 row, G = 1 and G = 64, skewed sizes), B N-major and K-major, ragged K and N, every
config, against torch in float64; the output is poisoned with NaN first so an unwritten row
fails, and rows of no group must keep their values. Each group also equals gemm_hopper on it
alone, bit for bit (the same wgmma sequence per output element). The list form, K = 0, no
tokens, no groups, and malformed offsets (nothing written outside out). Run with
LAYOUTKIT_DEBUG=1 to turn a pipeline hang into layoutkit.sync.BarrierTimeoutError."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

grouped = load_recipe("gemm_grouped")
gemm_hopper = load_recipe("gemm_hopper")
pytestmark = pytest.mark.gpu
TOLERANCE = 1e-2
# (groups, total tokens, N, K): one group; skewed groups with an empty one and one of 1 row;
# 64 small groups; ragged N and K (72: an N-major B is read K-major); MoE-like
SHAPES = [(1, 1, 64, 64), (1, 1000, 520, 264), (5, 1000, 520, 264), (8, 4096, 1024, 512),
          (64, 3000, 384, 256), (64, 64, 128, 64), (3, 200, 136, 72), (7, 333, 257, 129),
          (8, 8192, 4096, 1024)]


def _error(got, want) -> float:
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


def _run(sizes, n, k, kmajor, seed, config=None):
    gen = torch.Generator().manual_seed(seed)
    a, b, offsets = grouped.problem(gen, sizes, k, n, kmajor)
    out = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = grouped.gemm_grouped(a, b, offsets, out=out, config=config)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    assert not got.isnan().any(), "an output row of a group was not written"
    return a, b, offsets, got


@pytest.mark.parametrize("kmajor", [False, True], ids=["B_N_major", "B_K_major"])
@pytest.mark.parametrize("groups, total, n, k", SHAPES)
def test_gemm_grouped_matches_float64(groups, total, n, k, kmajor):
    seed = groups * 1_000_003 + total * 1009 + n * 31 + k
    sizes = grouped.random_groups(torch.Generator().manual_seed(seed), groups, total)
    a, b, offsets, got = _run(sizes, n, k, kmajor, seed)
    assert _error(got, grouped.reference_torch(a, b, offsets)) < TOLERANCE


@pytest.mark.parametrize("config", grouped.CONFIGS, ids=str)
def test_every_config_is_correct(config):
    sizes = [700, 0, 1, 129, 1200]
    a, b, offsets, got = _run(sizes, 900, 640, True, 7, config)
    assert _error(got, grouped.reference_torch(a, b, offsets)) < TOLERANCE


@pytest.mark.parametrize("kmajor", [False, True], ids=["B_N_major", "B_K_major"])
def test_each_group_equals_gemm_hopper_on_it_alone(kmajor):
    sizes = [300, 0, 1, 129, 64, 1000]
    a, b, offsets, got = _run(sizes, 512, 384, kmajor, 11)
    cfg = gemm_hopper.Config(BN=256, STAGES=4, CLUSTER=1)      # grouped.DEFAULT's tile
    bounds = offsets.tolist()
    for g, m in enumerate(sizes):
        if m:
            lo, hi = bounds[g], bounds[g + 1]
            alone = gemm_hopper.gemm(a[lo:hi], b[g], config=cfg)
            assert torch.equal(got[lo:hi], alone), f"group {g} ({m} rows)"


def test_rows_of_no_group_keep_their_values():
    gen = torch.Generator().manual_seed(3)
    a, b, offsets = grouped.problem(gen, [5, 100, 0, 37, 10], 256, 192, False)
    inner = offsets[1:-1].contiguous()                # groups 1..3: rows 5 .. 141
    out = torch.full((a.shape[0], 192), 3.0, device="cuda", dtype=torch.bfloat16)
    got = grouped.gemm_grouped(a, b[1:4], inner, out=out)
    want = grouped.reference_torch(a, b[1:4], inner)
    lo, hi = inner[0].item(), inner[-1].item()
    assert _error(got[lo:hi], want[lo:hi]) < TOLERANCE
    assert (got[:lo] == 3).all() and (got[hi:] == 3).all()


def test_list_form_matches_float64():
    gen = torch.Generator().manual_seed(5)
    sizes, k, n = [17, 0, 300, 1, 128], 320, 200
    a_list = [torch.randn(m, k, generator=gen).to("cuda", torch.bfloat16) for m in sizes]
    b_list = [torch.randn(k, n, generator=gen).to("cuda", torch.bfloat16) for _ in sizes]
    b_list[1] = b_list[1].t().contiguous().t()                 # a K-major one among them
    got = grouped.gemm_grouped(a_list, b_list)
    assert [tuple(c.shape) for c in got] == [(m, n) for m in sizes]
    for c, x, w in zip(got, a_list, b_list):
        if x.shape[0]:
            assert _error(c, x.double() @ w.double()) < TOLERANCE


def test_degenerate_problems():
    gen = torch.Generator().manual_seed(9)
    a, b, offsets = grouped.problem(gen, [3, 4], 0, 64, False)          # K = 0: zeros
    assert (grouped.gemm_grouped(a, b, offsets) == 0).all()
    a, b, offsets = grouped.problem(gen, [0, 0], 64, 64, False)         # no tokens
    assert grouped.gemm_grouped(a, b, offsets).shape == (0, 64)
    a = torch.randn(10, 64, device="cuda").bfloat16()                   # no groups
    out = torch.full((10, 32), 2.0, device="cuda", dtype=torch.bfloat16)
    got = grouped.gemm_grouped(a, torch.empty(0, 64, 32, device="cuda", dtype=torch.bfloat16),
                               torch.zeros(1, dtype=torch.int32, device="cuda"), out=out)
    assert (got == 2).all()


def test_malformed_offsets_write_nothing_outside_out():
    gen = torch.Generator().manual_seed(4)
    a, b, _ = grouped.problem(gen, [40, 30, 0, 0], 128, 128, False)
    big = torch.full((a.shape[0] + 20, 128), 5.0, device="cuda", dtype=torch.bfloat16)
    out = big[10:10 + a.shape[0]]
    bad = torch.tensor([-5, 90, 10, 10, 1000], dtype=torch.int32, device="cuda")
    grouped.gemm_grouped(a, b, bad, out=out)
    torch.cuda.synchronize()
    assert (big[:10] == 5).all() and (big[10 + a.shape[0]:] == 5).all()
    with pytest.raises(ValueError, match="offsets are non-decreasing"):
        grouped.check_offsets(bad, a.shape[0])


def test_check_runs():
    assert grouped.check() < TOLERANCE


def test_torch_op_on_cuda():
    import layoutkit.torch as lkt
    gen = torch.Generator().manual_seed(12)
    a, b, offsets = grouped.problem(gen, [100, 0, 1, 400], 256, 320, True)
    got = lkt.gemm_grouped(a, b, offsets)
    assert got.is_contiguous() and got.dtype == torch.bfloat16
    assert _error(got, grouped.reference_torch(a, b, offsets)) < TOLERANCE
    compiled = torch.compile(lambda a, b, o: lkt.gemm_grouped(a, b, o), fullgraph=True)
    assert torch.equal(compiled(a, b, offsets), got)
