"""GPU test (marker `gpu`): no recipe entry point waits for the GPU. A serving loop or a
training step queues work ahead of the GPU; an entry that synchronizes (a `.item()`, a copy from
pageable host memory, a stream or context synchronize) drains that queue on every call.

Each case calls its entry twice (compile, plan, allocator blocks), then queues a ~100 ms spin
kernel (torch.cuda._sleep) and an event behind it on the current stream, calls the entry once
more and asserts the event has not completed when the call returns: the call queued its work
behind the spin kernel instead of waiting for it. Release builds only: a debug build
(LAYOUTKIT_DEBUG=1) checks its barrier-timeout sink after each launch, which waits by design."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from tests.dsl.test_recipes_compile import load_recipe  # noqa: E402

pytestmark = pytest.mark.gpu
SPIN_CYCLES = 200_000_000       # ~100 ms at the H200's clocks: far over any entry's host time


def _bf16(*shape, gen):
    return torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)


def _gemm_cases(gen):
    g = load_recipe("gemm_hopper")
    f8 = load_recipe("gemm_fp8")
    grouped = load_recipe("gemm_grouped")
    cases = {}
    for m, n, k, kmajor in ((1, 4096, 4096, True), (16, 4096, 14336, False),
                            (2048, 2048, 2048, True), (1000, 777, 300, False)):
        a = _bf16(m, k, gen=gen)
        b = _bf16(n, k, gen=gen).t() if kmajor else _bf16(k, n, gen=gen)
        cases[f"gemm {m}x{n}x{k} {'K' if kmajor else 'N'}-major"] = lambda a=a, b=b: g.gemm(a, b)
    a, w = _bf16(512, 1024, gen=gen), _bf16(768, 1024, gen=gen)
    bias, out = _bf16(768, gen=gen), torch.empty(512, 768, device="cuda", dtype=torch.float32)
    cases["gemm bias + gelu, f32 out"] = lambda: g.gemm(a, w.t(), out, bias=bias,
                                                        activation="gelu")
    for m in (16, 4096):
        a8 = torch.randn(m, 4096, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        w8 = torch.randn(4096, 4096, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        sa = torch.rand(m, 1, device="cuda", generator=gen)
        sb = torch.rand(1, 4096, device="cuda", generator=gen)
        cases[f"gemm_fp8 {m}x4096x4096 per-row"] = \
            lambda a8=a8, w8=w8, sa=sa, sb=sb: f8.gemm_fp8(a8, w8.t(), sa, sb)
    sizes = [300, 0, 1, 723]
    ta, tb, offsets = grouped.problem(gen, sizes, 256, 384, True)
    cases["gemm_grouped packed"] = lambda: grouped.gemm_grouped(ta, tb, offsets)
    aa = [_bf16(s, 256, gen=gen) for s in sizes]
    bb = [_bf16(256, 384, gen=gen) for _ in sizes]
    cases["gemm_grouped list"] = lambda: grouped.gemm_grouped(aa, bb)
    return cases


def _attention_cases(gen):
    fa = load_recipe("flash_attention")
    bwd = load_recipe("flash_attention_backward")
    varlen = load_recipe("flash_attention_varlen")
    varlen_bwd = load_recipe("flash_attention_varlen_backward")
    kv = load_recipe("flash_attention_kvcache")
    cases = {}
    q, k, v = (_bf16(2, 1000, h, 128, gen=gen) for h in (8, 2, 2))
    o, lse = fa.flash_attention(q, k, v, causal=True)
    do = _bf16(*o.shape, gen=gen)
    cases["flash_attention causal GQA"] = lambda: fa.flash_attention(q, k, v, causal=True)
    cases["flash_attention_backward causal GQA"] = \
        lambda: bwd.flash_attention_backward(do, q, k, v, o, lse, causal=True)
    lengths = [700, 0, 1300]
    cu = torch.tensor([0, 700, 700, 2000], device="cuda", dtype=torch.int32)
    pq, pk, pv = (_bf16(sum(lengths), h, 64, gen=gen) for h in (4, 4, 4))
    po, plse = varlen.flash_attention_varlen(pq, pk, pv, cu, cu, 1300, 1300, causal=True)
    pdo = _bf16(*po.shape, gen=gen)
    cases["flash_attention_varlen"] = \
        lambda: varlen.flash_attention_varlen(pq, pk, pv, cu, cu, 1300, 1300, causal=True)
    cases["flash_attention_varlen_backward"] = lambda: varlen_bwd.flash_attention_varlen_backward(
        pdo, pq, pk, pv, po, plse, cu, cu, 1300, 1300, causal=True)
    page, pages = 256, 16
    k_cache, v_cache = (_bf16(4 * pages, page, 2, 128, gen=gen) for _ in range(2))
    table = torch.randperm(4 * pages, device="cuda", generator=gen).to(torch.int32).view(4, -1)
    seqlens = torch.tensor([1, 4096, 2000, 77], device="cuda", dtype=torch.int32)
    dq = _bf16(4, 1, 16, 128, gen=gen)
    cases["flash_attention_with_kvcache paged"] = \
        lambda: kv.flash_attention_with_kvcache(dq, k_cache, v_cache, seqlens, table)
    return cases


def _row_cases(gen):
    sm, ln, rn = (load_recipe(r) for r in ("softmax", "layernorm", "rmsnorm"))
    smb, lnb = load_recipe("softmax_backward"), load_recipe("layernorm_backward")
    tr = load_recipe("transpose")
    cases = {}
    for m, n in ((4096, 4096), (7, 65536), (1000, 3000)):
        x, dy = _bf16(m, n, gen=gen), _bf16(m, n, gen=gen)
        w, b, res = _bf16(n, gen=gen), _bf16(n, gen=gen), _bf16(m, n, gen=gen)
        y = sm.softmax(x)
        _, _, rstd = rn.rmsnorm(x, w, res, return_residual=True, return_rstd=True)
        cases[f"softmax {m}x{n}"] = lambda x=x: sm.softmax(x)
        cases[f"softmax_backward {m}x{n}"] = lambda dy=dy, y=y: smb.softmax_backward(dy, y)
        cases[f"layernorm {m}x{n}"] = lambda x=x, w=w, b=b: ln.layernorm(x, w, b)
        cases[f"layernorm_backward {m}x{n}"] = \
            lambda dy=dy, x=x, w=w: lnb.layernorm_backward(dy, x, w)
        cases[f"rmsnorm + residual {m}x{n}"] = \
            lambda x=x, w=w, res=res: rn.rmsnorm(x, w, res, return_residual=True,
                                                 return_rstd=True)
        cases[f"rmsnorm_backward {m}x{n}"] = \
            lambda dy=dy, x=x, w=w, rstd=rstd: rn.rmsnorm_backward(dy, x, w, rstd)
    t = _bf16(1000, 3000, gen=gen)
    cases["transpose"] = lambda: tr.transpose(t)
    return cases


def _cases():
    gen = torch.Generator(device="cuda").manual_seed(0)
    return {**_gemm_cases(gen), **_attention_cases(gen), **_row_cases(gen)}


@pytest.fixture(scope="module")
def cases():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAYOUTKIT_DEBUG", "0")
        yield _cases()


def _returns_before_queued_work(call) -> bool:
    """Whether `call()` returns while a spin kernel queued before it still runs."""
    call()
    call()
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN_CYCLES)
    behind_spin = torch.cuda.Event()
    behind_spin.record()
    call()
    early = not behind_spin.query()
    torch.cuda.synchronize()
    return early


def test_the_probe_sees_a_synchronizing_call():
    x = torch.ones(8, device="cuda")
    assert not _returns_before_queued_work(lambda: x.sum().item())


def test_no_entry_point_waits_for_the_gpu(cases):      # (release builds: the fixture's)
    waited = [name for name, call in cases.items() if not _returns_before_queued_work(call)]
    assert not waited, f"these entry points synchronized with the GPU: {waited}"
