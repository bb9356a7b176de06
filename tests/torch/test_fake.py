"""The fake (meta) implementations of layoutkit's torch operators, on fake CUDA tensors (no GPU
runs here, none is needed): every op's output shapes, dtypes and strides agree with what the
same computation in torch gives under the same FakeTensorMode, for random shapes; every
argument mistake is refused in fake mode with the message the real op gives; symbolic shapes
trace."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="layoutkit.torch needs torch (the [torch] extra)")

import torch.nn.functional as F  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import layoutkit.torch  # noqa: E402,F401
from recipes.softmax import MAX_COLUMNS  # noqa: E402

ops = torch.ops.layoutkit
BF16 = torch.bfloat16


def fake(*shape, dtype=BF16, device="cuda"):
    return torch.empty(shape, dtype=dtype, device=device)


def contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for extent in reversed(tuple(shape)):
        strides.append(step)
        step *= max(extent, 1)           # torch: an empty mode counts as 1
    return tuple(reversed(strides))


def same_meta(got, want):
    """Shape, dtype and device of `want` (torch's result for the same computation), and the
    strides of a new contiguous tensor (every layoutkit op's output)."""
    assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device)
    assert got.stride() == contiguous_strides(want.shape)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 5000), k=st.integers(0, 5000), n=st.integers(0, 5000),
       k_major=st.booleans())
def test_gemm_outputs_are_torch_matmul_s(m, k, n, k_major):
    with FakeTensorMode():
        a = fake(m, k)
        b = fake(n, k).t() if k_major else fake(k, n)
        same_meta(ops.gemm(a, b), torch.matmul(a, b))


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 4), sq=st.integers(0, 3000), sk=st.integers(0, 3000),
       hk=st.integers(1, 4), group=st.integers(1, 4), d=st.sampled_from((64, 128, 256)),
       causal=st.booleans(), bhsd=st.booleans())
def test_flash_attention_outputs_are_attention_s(batch, sq, sk, hk, group, d, causal, bhsd):
    hq, layout = hk * group, "bhsd" if bhsd else "bshd"
    with FakeTensorMode():
        q, k, v = fake(batch, hq, sq, d), fake(batch, hk, sk, d), fake(batch, hk, sk, d)
        # SDPA's fake path asks for a CUDA build; its math is the oracle
        scores = q @ k.repeat_interleave(group, 1).transpose(-2, -1)
        want = torch.softmax(scores, -1) @ v.repeat_interleave(group, 1)
        args = (q, k, v) if bhsd else tuple(t.transpose(1, 2) for t in (q, k, v))
        o, lse = ops.flash_attention(*args, causal, None, layout)
        same_meta(o, want if bhsd else want.transpose(1, 2))
        same_meta(lse, fake(batch, hq, sq, dtype=torch.float32))
        grads = ops.flash_attention_backward(o, *args, o, lse, causal, None, layout)
        for grad, like in zip(grads, args):
            same_meta(grad, fake(*like.shape))


@pytest.mark.parametrize("shape", [(4, 64), (3, 5, 1000), (0, 7), (9, 0), (MAX_COLUMNS,)])
def test_row_ops_outputs_are_torch_s(shape):
    with FakeTensorMode():
        x = fake(*shape)
        same_meta(ops.softmax(x), torch.softmax(x, -1))
        same_meta(ops.softmax_backward(x, x), torch.softmax(x, -1))
        if shape[-1]:
            w, b = fake(shape[-1]), fake(shape[-1])
            same_meta(ops.layernorm(x, w, b, 1e-5), F.layer_norm(x, shape[-1:], w, b))
            for got, want in zip(ops.layernorm_backward(x, x, w, 1e-5), (x, w, w)):
                same_meta(got, want)
            for weight in (None, w, fake(shape[-1], dtype=torch.float32)):
                y, rstd = ops.rmsnorm(x, weight, 1e-6)
                same_meta(y, F.rms_norm(x, shape[-1:], None))
                same_meta(rstd, x.sum(-1, dtype=torch.float32))
                dx, dweight = ops.rmsnorm_backward(x, x, weight, rstd)
                same_meta(dx, x)
                same_meta(dweight, weight if weight is not None else fake(0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_rmsnorm_takes_f16_and_f32_too(dtype):
    with FakeTensorMode():
        x = fake(3, 100, dtype=dtype)
        y, rstd = ops.rmsnorm(x, None, 1e-6)
        same_meta(y, x)


def test_row_ops_make_non_contiguous_inputs_contiguous_outputs():
    with FakeTensorMode():
        x = fake(64, 8).t()
        same_meta(ops.softmax(x), fake(8, 64))
        same_meta(ops.layernorm(x, fake(64), fake(64), 1e-5), fake(8, 64))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_transpose_outputs_are_torch_s(dtype):
    with FakeTensorMode():
        x = fake(300, 70, dtype=dtype)
        same_meta(ops.transpose(x), x.t())


def test_meta_tensors_take_the_fake_implementation_too():
    a, b = fake(128, 64, device="meta"), fake(64, 32, device="meta")
    same_meta(ops.gemm(a, b), fake(128, 32, device="meta"))


def test_schema_defaults_apply():
    with FakeTensorMode():
        q = fake(1, 10, 2, 64)
        o, lse = ops.flash_attention(q, q, q)
        assert o.shape == q.shape and lse.shape == (1, 2, 10)
        x = fake(3, 100)
        same_meta(ops.layernorm(x, fake(100), fake(100)), x)


# (what, call(t) with t(*shape, dtype=bf16) making tensors on the test's device, the
# exception, a piece of its message; "{dev}" stands for that device)
MISTAKES = [
    ("gemm dtype", lambda t: ops.gemm(t(4, 8, dtype=torch.float32), t(8, 4)), TypeError,
     "layoutkit.gemm: a has dtype torch.float32; the kernel takes torch.bfloat16"),
    ("gemm inner extents", lambda t: ops.gemm(t(4, 8), t(9, 4)), ValueError,
     "a is M x K and b is K x N, got a of shape (4, 8) and b of shape (9, 4)"),
    ("gemm rank", lambda t: ops.gemm(t(2, 4, 8), t(8, 4)), ValueError,
     "got a of shape (2, 4, 8)"),
    ("gemm devices", lambda t: ops.gemm(t(4, 8), fake(8, 4, device="meta")), ValueError,
     "a is on {dev} and b on meta"),
    ("attention head_dim", lambda t: ops.flash_attention(t(1, 8, 2, 96), t(1, 8, 2, 96),
                                                       t(1, 8, 2, 96)), ValueError,
     "head_dim = 96 is not supported; the kernel handles 64, 128, 256"),
    ("attention GQA", lambda t: ops.flash_attention(t(1, 8, 3, 64), t(1, 8, 2, 64),
                                                  t(1, 8, 2, 64)), ValueError,
     "heads_q = 3 must be a multiple of heads_kv = 2"),
    ("attention k and v", lambda t: ops.flash_attention(t(1, 8, 2, 64), t(1, 8, 2, 64),
                                                      t(1, 9, 2, 64)), ValueError,
     "got k (1, 8, 2, 64) and v (1, 9, 2, 64)"),
    ("attention batch", lambda t: ops.flash_attention(t(2, 8, 2, 64), t(1, 8, 2, 64),
                                                    t(1, 8, 2, 64)), ValueError,
     "with q's batch 2 and head_dim 64"),
    ("attention rank", lambda t: ops.flash_attention(t(8, 2, 64), t(1, 8, 2, 64),
                                                   t(1, 8, 2, 64)), ValueError,
     "q is a 4-D tensor (bshd), got shape (8, 2, 64)"),
    ("attention layout", lambda t: ops.flash_attention(t(1, 8, 2, 64), t(1, 8, 2, 64),
                                                     t(1, 8, 2, 64), False, None, "sbhd"),
     ValueError, "layout is 'bshd' (batch, seqlen, heads, head_dim) or 'bhsd'"),
    ("attention scale", lambda t: ops.flash_attention(t(1, 8, 2, 64), t(1, 8, 2, 64),
                                                    t(1, 8, 2, 64), False, -1.0),
     ValueError, "softmax_scale is a finite float >= 0 or None (1/sqrt(head_dim)), got -1.0"),
    ("attention dtype", lambda t: ops.flash_attention(t(1, 8, 2, 64, dtype=torch.float16),
                                                    t(1, 8, 2, 64), t(1, 8, 2, 64)),
     TypeError, "q has dtype torch.float16"),
    ("attention backward grad_o", lambda t: ops.flash_attention_backward(
        t(1, 8, 2, 128), t(1, 8, 2, 64), t(1, 8, 2, 64), t(1, 8, 2, 64),
        t(1, 8, 2, 64), t(1, 2, 8, dtype=torch.float32), False, None, "bshd"), ValueError,
     "grad_o has shape (1, 8, 2, 128) and dtype torch.bfloat16; it must be bf16 of q's shape"),
    ("softmax dtype", lambda t: ops.softmax(t(4, 8, dtype=torch.float32)), TypeError,
     "layoutkit.softmax: x has dtype torch.float32; the kernel takes torch.bfloat16"),
    ("softmax 0-d", lambda t: ops.softmax(t()), ValueError, "x is a 0-d tensor"),
    ("softmax row length", lambda t: ops.softmax(t(2, MAX_COLUMNS + 1)), ValueError,
     f"x has shape (2, {MAX_COLUMNS + 1}); its last dimension must be in 0..{MAX_COLUMNS}"),
    ("softmax_backward shapes", lambda t: ops.softmax_backward(t(4, 8), t(4, 9)), ValueError,
     "grad_y has shape (4, 8) on {dev}; it must be of y's, (4, 9) on {dev}"),
    ("layernorm weight", lambda t: ops.layernorm(t(4, 8), t(9), t(8), 1e-5), ValueError,
     "weight has shape (9,) on {dev}; it must be a vector of n = 8"),
    ("layernorm bias dtype",
     lambda t: ops.layernorm(t(4, 8), t(8), t(8, dtype=torch.float32), 1e-5), TypeError,
     "bias has dtype torch.float32"),
    ("layernorm eps", lambda t: ops.layernorm(t(4, 8), t(8), t(8), 0.0), ValueError,
     "eps = 0.0 must be a positive number"),
    ("layernorm empty rows", lambda t: ops.layernorm(t(4, 0), t(0), t(0), 1e-5), ValueError,
     f"its last dimension must be in 1..{MAX_COLUMNS}"),
    ("layernorm_backward grad_y", lambda t: ops.layernorm_backward(t(4, 9), t(4, 8), t(8), 1e-5),
     ValueError, "grad_y has shape (4, 9) on {dev}; it must be of x's, (4, 8) on {dev}"),
    ("rmsnorm dtype", lambda t: ops.rmsnorm(t(4, 8, dtype=torch.float64), None, 1e-6), TypeError,
     "layoutkit.rmsnorm: x has dtype torch.float64; the kernel takes torch.bfloat16, "
     "torch.float16, torch.float32"),
    ("rmsnorm weight dtype", lambda t: ops.rmsnorm(t(4, 8), t(8, dtype=torch.float16), 1e-6),
     TypeError, "weight has dtype torch.float16; it must be x's (torch.bfloat16) or "
     "torch.float32"),
    ("rmsnorm weight shape", lambda t: ops.rmsnorm(t(4, 8), t(4), 1e-6), ValueError,
     "weight has shape (4,) on {dev}; it must be a vector of n = 8"),
    ("rmsnorm eps", lambda t: ops.rmsnorm(t(4, 8), None, -1e-6), ValueError,
     "eps = -1e-06 must be a positive number"),
    ("rmsnorm_backward rstd", lambda t: ops.rmsnorm_backward(t(4, 8), t(4, 8), None, t(4)),
     ValueError, "rstd has shape (4,), dtype torch.bfloat16 on {dev}; it must be the "
     "forward's, f32 (4,) on {dev}"),
    ("rmsnorm_backward grad_y dtype", lambda t: ops.rmsnorm_backward(
        t(4, 8, dtype=torch.float32), t(4, 8), None, t(4, dtype=torch.float32)), TypeError,
     "grad_y has dtype torch.float32; it must be x's, torch.bfloat16"),
    ("transpose dtype", lambda t: ops.transpose(t(4, 8, dtype=torch.int32)), TypeError,
     "x has dtype torch.int32; the kernel takes torch.bfloat16, torch.float16, torch.float32"),
    ("transpose rank", lambda t: ops.transpose(t(4, 8, 2)), ValueError,
     "x is a 2-D matrix, got shape (4, 8, 2)"),
]


@pytest.mark.parametrize("what, call, error, message", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_mistakes_are_refused_in_fake_mode(what, call, error, message):
    with FakeTensorMode(), pytest.raises(error) as caught:
        call(fake)
    assert message.format(dev="cuda:0") in str(caught.value)


@pytest.mark.parametrize("what, call, error, message", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_the_real_op_refuses_them_alike(what, call, error, message):
    """On CPU tensors (the interpreter's path) the same check runs before anything else."""
    with pytest.raises(error) as caught:
        call(lambda *shape, dtype=BF16: torch.empty(shape, dtype=dtype))
    assert message.format(dev="cpu") in str(caught.value)


def test_symbolic_shapes_trace_through_every_op():
    """make_fx with symbolic shapes: the fake implementations take SymInts (no kernel runs)."""
    def block(x, w, b, wq, q, k, v):
        h = ops.layernorm(x, w, b, 1e-5)
        h = ops.softmax(ops.gemm(h, wq))
        o, _ = ops.flash_attention(q, k, v, True)
        return ops.transpose(h), o

    args = [torch.empty(shape, dtype=BF16) for shape in ((48, 64), (64,), (64,), (64, 80),
                                                       (1, 33, 4, 64), (1, 40, 2, 64),
                                                       (1, 40, 2, 64))]
    graph = make_fx(block, tracing_mode="symbolic")(*args)    # fake tensors of symbolic shape
    called = {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
    assert {"layoutkit.layernorm.default", "layoutkit.softmax.default", "layoutkit.gemm.default",
            "layoutkit.flash_attention.default", "layoutkit.transpose.default"} <= called
    value = {str(node.target): node.meta["val"] for node in graph.graph.nodes
             if node.op == "call_function"}
    product, transposed = value["layoutkit.gemm.default"], value["layoutkit.transpose.default"]
    assert all(isinstance(extent, torch.SymInt) for extent in product.shape)
    assert [str(e) for e in transposed.shape] == [str(e) for e in reversed(product.shape)]
    o, lse = value["layoutkit.flash_attention.default"]
    assert [str(e) for e in lse.shape] == [str(e) for e in (o.shape[0], o.shape[2], o.shape[1])]
