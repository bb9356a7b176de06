"""torch.ops.layoutkit.flash_attention(q, k, v, causal, softmax_scale, layout) -> (o, lse):
FlashAttention's forward by recipes/flash_attention.py. q is (batch, seqlen_q, heads_q,
head_dim) and k, v (batch, seqlen_k, heads_kv, head_dim) for layout "bshd", every tensor
(batch, heads, seqlen, head_dim) for "bhsd" (torch SDPA's); bf16, head_dim 64, 128 or 256,
heads_q a multiple of heads_kv (GQA), causal bottom-right aligned; o is a new contiguous bf16
tensor of q's shape, lse a new contiguous f32 (batch, heads_q, seqlen_q), natural log.

Autograd runs the backward torch.ops.layoutkit.flash_attention_backward(grad_o, q, k, v, o,
lse, causal, softmax_scale, layout) -> (dq, dk, dv), which calls
recipes.flash_attention.flash_attention_backward (recipes/flash_attention_backward.py) on CUDA
tensors and runs the same kernels, in the interpreter, on CPU tensors (head_dim 64, 128 and
256, as the forward). torch.compile traces the backward op through its fake implementation.
lse is not differentiable.
"""
from __future__ import annotations

import math

import torch

from .checks import check_bf16
from .interpreted import refuse_large, run
from .registry import OpSpec, recipe

LAYOUTS = ("bshd", "bhsd")


def _bshd(layout: str, *tensors):
    """The tensors as (batch, seqlen, heads, head_dim) views."""
    return tuple(t.transpose(1, 2) if layout == "bhsd" else t for t in tensors)


def check_attention(op: str, q, k, v, softmax_scale, layout: str) -> None:
    """The recipe's rules for q, k, v (its check_inputs, which also needs CUDA tensors; these
    checks hold on every device and on fake tensors)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layoutkit.{op}: layout is 'bshd' (batch, seqlen, heads, head_dim) "
                         f"or 'bhsd' (torch SDPA's), got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"layoutkit.{op}: {name} is a 4-D tensor ({layout}), got shape "
                             f"{tuple(t.shape)}")
    check_bf16(op, q=q, k=k, v=v)
    qs, ks, vs = _bshd(layout, q, k, v)
    (batch, _, hq, d), (bk, _, hk, dk) = qs.shape, ks.shape
    if vs.shape != ks.shape or bk != batch or dk != d:
        raise ValueError(f"layoutkit.{op}: k and v are (batch, seqlen_k, heads_kv, head_dim) "
                         f"with q's batch {batch} and head_dim {d} ({layout} order), got k "
                         f"{tuple(k.shape)} and v {tuple(v.shape)}")
    head_dims = recipe("flash_attention", op).HEAD_DIMS
    if d not in head_dims:
        raise ValueError(f"layoutkit.{op}: head_dim = {d} is not supported; the kernel handles "
                         f"{', '.join(map(str, head_dims))}")
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"layoutkit.{op}: heads_q = {hq} must be a multiple of heads_kv = {hk} "
                         "(grouped-query attention)")
    if softmax_scale is not None and not (math.isfinite(softmax_scale) and softmax_scale >= 0):
        raise ValueError(f"layoutkit.{op}: softmax_scale is a finite float >= 0 or None "
                         f"(1/sqrt(head_dim)), got {softmax_scale!r}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"layoutkit.{op}: {name} is on {t.device}, q on {q.device}; they "
                             "must be on one device")


def attention_outputs(q, k, v, causal, softmax_scale, layout):
    check_attention("flash_attention", q, k, v, softmax_scale, layout)
    batch, sq, hq, d = _bshd(layout, q)[0].shape
    shape = (batch, hq, sq, d) if layout == "bhsd" else (batch, sq, hq, d)
    return (torch.empty(shape, dtype=torch.bfloat16, device=q.device),
            torch.empty(batch, hq, sq, dtype=torch.float32, device=q.device))


def attention_cuda(q, k, v, causal, softmax_scale, layout):
    attention_outputs(q, k, v, causal, softmax_scale, layout)       # the op's checks
    fa = recipe("flash_attention", "flash_attention")
    return fa.flash_attention(q, k, v, causal, softmax_scale, layout=layout)


def attention_cpu(q, k, v, causal, softmax_scale, layout):
    """flash_attention()'s host steps on CPU tensors (rows that see no key, TMA-ready
    operands, the default config, the kernel's arguments), its kernel in the interpreter."""
    out, lse = attention_outputs(q, k, v, causal, softmax_scale, layout)
    refuse_large("flash_attention", q=q, k=k, v=v)
    fa = recipe("flash_attention", "flash_attention")
    qs, ks, vs, o = _bshd(layout, q, k, v, out)
    (batch, sq, hq, d), sk = qs.shape, ks.shape[1]
    if out.numel() == 0:
        return out, lse
    dead = max(sq - sk, 0) if causal else 0 if sk else sq      # rows that see no key
    o[:, :dead].zero_()
    lse[:, :, :dead] = float("-inf")
    if dead == sq:
        return out, lse
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    qs, ks, vs, o_run = (fa._tma_ready(t) for t in (qs, ks, vs, o))
    rows = lse.view(batch * hq, sq)
    cfg = fa.default_config(d, causal, sk)
    grid, args, constexprs = fa.kernel_arguments(qs[:, dead:], ks, vs, o_run[:, dead:],
                                                 rows[:, dead:], causal, scale, cfg)
    run(fa.kernel_for(cfg), grid, *args, **constexprs)
    if o_run.data_ptr() != o.data_ptr():
        o.copy_(o_run)
    return out, lse


def attention_setup_context(ctx, inputs, output):
    q, k, v, causal, softmax_scale, layout = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.causal, ctx.softmax_scale, ctx.layout = causal, softmax_scale, layout
    ctx.mark_non_differentiable(output[1])


def attention_backward_rule(ctx, grad_o, grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.layoutkit.flash_attention_backward(
        grad_o, q, k, v, o, lse, ctx.causal, ctx.softmax_scale, ctx.layout)
    return dq, dk, dv, None, None, None


def attention_backward_outputs(grad_o, q, k, v, o, lse, causal, softmax_scale, layout):
    check_attention("flash_attention_backward", q, k, v, softmax_scale, layout)
    for name, t, like in (("grad_o", grad_o, q), ("o", o, q)):
        if t.shape != like.shape or t.dtype != torch.bfloat16:
            raise ValueError(f"layoutkit.flash_attention_backward: {name} has shape "
                             f"{tuple(t.shape)} and dtype {t.dtype}; it must be bf16 of q's "
                             f"shape {tuple(q.shape)}")
    batch, sq, hq, _ = _bshd(layout, q)[0].shape
    if lse.shape != (batch, hq, sq) or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"layoutkit.flash_attention_backward: lse has shape {tuple(lse.shape)}"
                         f" and dtype {lse.dtype} on {lse.device}; it must be the forward's f32 "
                         f"(batch, heads_q, seqlen_q) = {(batch, hq, sq)} on q's device")
    return tuple(torch.empty(t.shape, dtype=torch.bfloat16, device=t.device) for t in (q, k, v))


def attention_backward_cuda(grad_o, q, k, v, o, lse, causal, softmax_scale, layout):
    outputs = attention_backward_outputs(grad_o, q, k, v, o, lse, causal, softmax_scale, layout)
    fb = recipe("flash_attention_backward", "flash_attention_backward")
    grads = fb.flash_attention_backward(grad_o, q, k, v, o, lse, causal=causal,
                                        softmax_scale=softmax_scale, layout=layout)
    for out, grad in zip(outputs, grads):
        out.copy_(grad)
    return outputs


def attention_backward_cpu(grad_o, q, k, v, o, lse, causal, softmax_scale, layout):
    """The recipe's steps on CPU tensors (its checks but the device's), the kernel in the
    interpreter."""
    outputs = attention_backward_outputs(grad_o, q, k, v, o, lse, causal, softmax_scale, layout)
    refuse_large("flash_attention_backward", grad_o=grad_o, q=q, k=k, v=v)
    fb = recipe("flash_attention_backward", "flash_attention_backward")
    d = _bshd(layout, q)[0].shape[-1]
    views = _bshd(layout, grad_o, q, k, v, o)
    grads = fb.run_steps(torch, views, lse, causal, softmax_scale, layout, fb.CONFIGS[d],
                         run)
    for out, grad in zip(outputs, grads):
        out.copy_(grad)
    return outputs


FLASH_ATTENTION = OpSpec(
    "flash_attention", "(Tensor q, Tensor k, Tensor v, bool causal=False, "
    "float? softmax_scale=None, str layout=\"bshd\") -> (Tensor, Tensor)",
    attention_outputs, attention_cuda, attention_cpu, attention_backward_rule,
    attention_setup_context)
FLASH_ATTENTION_BACKWARD = OpSpec(
    "flash_attention_backward", "(Tensor grad_o, Tensor q, Tensor k, Tensor v, Tensor o, "
    "Tensor lse, bool causal, float? softmax_scale, str layout) -> (Tensor, Tensor, Tensor)",
    attention_backward_outputs, attention_backward_cuda, attention_backward_cpu)
