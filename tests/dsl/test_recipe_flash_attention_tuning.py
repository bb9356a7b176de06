"""recipes/flash_attention.py's autotuner on the CPU: a key no sweep has seen launches
default_config (no compile sweep, no timer needed), the sweep's configs all fit shared memory
and hold the default, and the tuner is one per head dim and causal flag."""
import pytest

import layoutkit as lk

from .test_recipes_compile import load_recipe

fa = load_recipe("flash_attention")


def _call(d: int, causal: bool, seqlen_k: int):
    q = lk.TensorSpec(lk.bf16, (2, 1024, 4, d))
    k = lk.TensorSpec(lk.bf16, (2, seqlen_k, 4, d))
    grid, args, _ = fa.kernel_arguments(q, k, k, q, lk.TensorSpec(lk.f32, (8, 1024)), causal,
                                        d ** -0.5, fa.default_config(d, causal, seqlen_k))
    return grid, args


@pytest.mark.parametrize("d, causal, seqlen_k", [(64, False, 4096), (64, True, 1024),
                                                 (128, False, 1000), (128, False, 8192),
                                                 (256, True, 4096)])
def test_an_untuned_key_takes_the_default_without_a_sweep(cache, d, causal, seqlen_k):
    t = fa.tuner(d, causal)
    grid, args = _call(d, causal, seqlen_k)
    t.timer = lambda *a, **kw: pytest.fail("the first call timed a sweep")
    best = t.best(grid, *args, D=d, CAUSAL=causal)
    assert best == fa._tuned(fa.default_config(d, causal, seqlen_k)) and t.report == {}
    assert dict(best.constexprs)["BN"] == fa.default_config(d, causal, seqlen_k).BN


@pytest.mark.parametrize("d", fa.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_sweep_fits_and_holds_the_default(d, causal):
    space = fa.autotune_space(d, causal)
    assert fa.CONFIGS[d, causal] in space and len(set(space)) == len(space)
    assert all(c.smem_bytes(d) <= fa.SHARED_LIMIT for c in space)
    assert all(fa.causal_block_fits(c) for c in space) if causal else len(space) > 5
    t = fa.tuner(d, causal)
    assert fa.tuner(d, causal) is t and t.kernel is fa.attention_kernel
    assert t.configs == tuple(fa._tuned(c) for c in space)
    assert str(fa._tuned(fa.CONFIGS[d, causal])).startswith(f"BN={fa.CONFIGS[d, causal].BN}, ")


def test_call_facts_tell_apart_what_the_tuning_key_does():
    torch = pytest.importorskip("torch")
    base = torch.zeros(2 * 64 * 4 * 64 + 8, dtype=torch.bfloat16)
    q = base[:2 * 64 * 4 * 64].view(2, 64, 4, 64)
    lse = torch.zeros(8, 64)

    def facts(*tensors, group=1):
        return fa._call_facts((*tensors, lse, group, 0.125))
    assert facts(q, q, q, q) == facts(q, q, q, q)
    shifted = base[8:].view(-1)[:q.numel()].view(2, 64, 4, 64)     # 16 bytes on: same facts
    assert facts(shifted, q, q, q) == facts(q, q, q, q)
    unaligned = base[1:q.numel() + 1].view(2, 64, 4, 64)
    assert facts(unaligned, q, q, q) != facts(q, q, q, q)
    assert facts(q.transpose(1, 2).contiguous().transpose(1, 2), q, q, q) != facts(q, q, q, q)
    assert facts(q, q, q, q, group=2) != facts(q, q, q, q)
    assert facts(q, q[:, :32], q[:, :32], q) != facts(q, q, q, q)
