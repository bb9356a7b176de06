"""torch.compile(fullgraph=True) through layoutkit's operators on CPU tensors, where every
kernel runs in the CPU interpreter: the graph holds the ops (no graph break), compiled results
equal eager ones bit for bit, and AOT autograd traces the backward graph from the ops' fake
implementations and runs it (attention's backward kernel included)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="layoutkit.torch needs torch (the [torch] extra)")

import layoutkit.torch as lkt  # noqa: E402

BF16 = torch.bfloat16


def recording_backend(graphs: list):
    """A torch.compile backend keeping each FX graph it is given and running it as it is."""
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    return backend


def recording_aot_backend(graphs: list):
    """AOT autograd with recording_backend for the forward and backward graphs (torch._dynamo
    is imported here, by the tests that compile: ~1 s that collecting the file need not pay)."""
    from torch._dynamo.backends.common import aot_autograd
    record = recording_backend(graphs)
    return aot_autograd(fw_compiler=record, bw_compiler=record)


def called_ops(graphs) -> set:
    """The qualified names of the operators the graphs call ("layoutkit::gemm", ...)."""
    def name(target):
        packet = getattr(target, "overloadpacket", target)       # an OpOverload's packet
        return getattr(packet, "_qualified_op_name", str(target))
    return {name(node.target) for gm in graphs for node in gm.graph.nodes
            if node.op == "call_function"}


def random_bf16(*shape, scale=1.0, generator=None):
    return (torch.randn(*shape, generator=generator) * scale).to(BF16)


def test_fullgraph_compile_of_every_forward_op_equals_eager():
    gen = torch.Generator().manual_seed(0)
    x, w, b = random_bf16(16, 64, generator=gen), random_bf16(64, generator=gen), \
        random_bf16(64, generator=gen)
    wq = random_bf16(64, 16, scale=0.125, generator=gen)
    q, k = random_bf16(1, 16, 2, 64, generator=gen), random_bf16(1, 16, 1, 64, generator=gen)

    def block(x, w, b, wq, q, k):
        h = lkt.softmax(lkt.gemm(lkt.layernorm(x, w, b), wq))
        o, lse = lkt.flash_attention(q, k, k, causal=True)
        return lkt.transpose(h), o, lse

    graphs = []
    compiled = torch.compile(block, fullgraph=True, backend=recording_backend(graphs))
    got, want = compiled(x, w, b, wq, q, k), block(x, w, b, wq, q, k)
    assert {f"layoutkit::{name}" for name in
            ("layernorm", "gemm", "softmax", "flash_attention", "transpose")} <= \
        called_ops(graphs)
    for g, e in zip(got, want):
        assert torch.equal(g, e)
    h = torch.softmax(torch.nn.functional.layer_norm(x.double(), (64,), w.double(), b.double())
                      @ wq.double(), -1)
    assert (got[0].double() - h.t()).abs().max() < 2 ** -6


def test_aot_autograd_compiles_gemm_and_transpose_gradients():
    """The backward graph is traced from the fake implementations (aot_eager) and its gemms and
    transposes run in the interpreter; gradients equal eager layoutkit's and match float64."""
    gen = torch.Generator().manual_seed(1)
    a = random_bf16(24, 40, generator=gen).requires_grad_()
    w = random_bf16(16, 40, scale=0.25, generator=gen).requires_grad_()

    def loss(a, w):
        y = lkt.transpose(lkt.gemm(a, w.t()))          # F.linear(a, w), transposed
        return (y.float() ** 2).sum()

    graphs = []
    compiled = torch.compile(loss, fullgraph=True,
                             backend=recording_aot_backend(graphs))
    got = torch.autograd.grad(compiled(a, w), (a, w))
    want = torch.autograd.grad(loss(a, w), (a, w))
    assert len(graphs) == 2                                     # forward and backward graphs
    assert "layoutkit::gemm" in called_ops(graphs[1:])
    for g, e in zip(got, want):
        assert torch.equal(g, e)
    a64, w64 = a.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    exact = torch.autograd.grad(((a64 @ w64.t()) ** 2).sum(), (a64, w64))
    for g, e in zip(got, exact):
        assert ((g.double() - e).norm() / e.norm()).item() < 2 ** -6


def test_attention_backward_is_traced_and_runs_as_eager():
    gen = torch.Generator().manual_seed(3)
    q = random_bf16(1, 8, 1, 64, generator=gen).requires_grad_()

    def loss(q):
        return lkt.flash_attention(q, q, q)[0].float().sum()

    graphs = []
    compiled = torch.compile(loss, fullgraph=True,
                             backend=recording_aot_backend(graphs))
    (got,) = torch.autograd.grad(compiled(q), q)
    assert "layoutkit::flash_attention_backward" in called_ops(graphs)
    (want,) = torch.autograd.grad(loss(q), q)
    assert torch.equal(got, want)