"""torch.ops.layoutkit.gemm_grouped (layoutkit/torch/gemm_grouped.py) on CPU tensors, where it
runs the recipe's kernel in the CPU interpreter: the schema, opcheck (fake against real outputs,
AOT dispatch with dynamic shapes), the result against float64, the fake's shape and argument
errors without reading offsets, and a torch.compile(fullgraph=True) graph calling it."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="layoutkit.torch needs torch (the [torch] extra)")

import layoutkit.torch as lkg  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

op = torch.ops.layoutkit.gemm_grouped


def problem(sizes, k=64, n=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(sum(sizes), k, generator=gen).bfloat16()
    b = torch.randn(len(sizes), k, n, generator=gen).bfloat16()
    bounds = [0]
    for m in sizes:
        bounds.append(bounds[-1] + m)
    return a, b, torch.tensor(bounds, dtype=torch.int32)


def test_schema():
    assert str(op.default._schema) == ("layoutkit::gemm_grouped(Tensor a, Tensor b, "
                                       "Tensor offsets) -> Tensor")


def test_result_matches_float64():
    a, b, offsets = problem([3, 0, 70, 1], n=40)
    got = lkg.gemm_grouped(a, b, offsets)
    bounds = offsets.tolist()
    for g in range(4):
        lo, hi = bounds[g], bounds[g + 1]
        if hi > lo:
            want = a[lo:hi].double() @ b[g].double()
            assert ((got[lo:hi].double() - want).abs().max() / want.abs().max()) < 2 ** -7


def test_opcheck():
    result = torch.library.opcheck(op.default, problem([5, 20], seed=1))
    assert set(result.values()) == {"SUCCESS"}, result


def test_fake_gives_the_shape_and_refuses_bad_arguments():
    with FakeTensorMode():
        a = torch.empty(100, 64, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(4, 64, 48, dtype=torch.bfloat16, device="cuda")
        offsets = torch.empty(5, dtype=torch.int32, device="cuda")
        out = op(a, b, offsets)
        assert (out.shape, out.dtype, out.stride()) == ((100, 48), torch.bfloat16, (48, 1))
        with pytest.raises(ValueError, match=r"gemm_grouped: offsets holds groups \+ 1 = 5 row "
                                             r"offsets for b's 4 groups, got 4"):
            op(a, b, torch.empty(4, dtype=torch.int32, device="cuda"))


def test_compiles_into_a_full_graph():
    a, b, offsets = problem([10, 30], seed=2)
    compiled = torch.compile(lambda a, b, o: lkg.gemm_grouped(a, b, o) * 2, fullgraph=True,
                             backend="aot_eager")
    assert torch.equal(compiled(a, b, offsets), lkg.gemm_grouped(a, b, offsets) * 2)
