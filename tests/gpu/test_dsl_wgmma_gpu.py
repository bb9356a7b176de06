"""GPU tests of lk.sm90.wgmma (marker `gpu`): shared tiles filled with DSL stores (no TMA), a K loop
of m64nNk16 wgmmas with the accumulator carried in place, K-major and N-major B, M = 64 and 128 per
warpgroup; and the RS path (S = Q K^T from shared, then O = bf16(S) V with the converted accumulator
as the register A operand). Checked against float64 torch references. The kernels cannot hang: no
mbarrier waits, loop bounds are kernel arguments."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.wgmma_kernels import attention_tile, ss_gemm  # noqa: E402

pytestmark = pytest.mark.gpu


def bf16_randn(*shape, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)


def close(got, expected, k):
    """f32 accumulation of exact bf16 products: error ~ sqrt(K) ulps of the partial sums."""
    scale = expected.abs().max().item() + 1.0
    assert torch.allclose(got.double(), expected, rtol=0, atol=1e-5 * scale * k ** 0.5), \
        (got.double() - expected).abs().max().item()


@pytest.mark.parametrize("k", [64, 256])
@pytest.mark.parametrize("m, n, major", [(64, 64, "K"), (64, 64, "N"), (64, 128, "K"),
                                          (64, 128, "N"), (64, 256, "K"), (64, 256, "N"),
                                          (128, 128, "K"), (128, 64, "N")])
def test_ss_gemm_k_loop(m, n, major, k):
    a = bf16_randn(m, k, seed=m + n + k)
    b = bf16_randn(n, k, seed=n + k + 7) if major == "K" else bf16_randn(k, n, seed=n + k + 9)
    c = torch.full((m, n), float("nan"), device="cuda")
    ss_gemm[1](a, b, c, k, M=m, N=n, B_MAJOR=major)
    torch.cuda.synchronize()
    b_kn = b.double().T if major == "K" else b.double()
    close(c, a.double() @ b_kn, k)


@pytest.mark.parametrize("n", [64, 128])
def test_register_a_operand_from_the_converted_accumulator(n):
    q, kk, v = bf16_randn(64, 64, seed=1), bf16_randn(n, 64, seed=2), bf16_randn(n, 64, seed=3)
    s = torch.full((64, n), float("nan"), device="cuda")
    o = torch.full((64, 64), float("nan"), device="cuda")
    attention_tile[1](q, kk, v, s, o, N=n)
    torch.cuda.synchronize()
    close(s, q.double() @ kk.double().T, 64)
    p = s.to(torch.bfloat16).double()              # P exactly as the kernel rounded it
    close(o, p @ v.double(), n)
