"""A small pre-norm transformer block trained for a few steps under torch.compile through
layoutkit's torch operators, its losses checked step by step against the same block written
with plain torch ops and run eagerly. Exits 1 on a mismatch.

    x = x + out_proj(attention(qkv_proj(layernorm(x))))
    x = x + mlp_down(gelu(mlp_up(rmsnorm(x))))          loss = mse(x, target)

What runs through layoutkit (torch.ops.layoutkit.*, forward and backward):
  * every GEMM: the QKV, output and both MLP projections (`gemm`, recipes/gemm_hopper.py; its
    backward is two more layoutkit gemms);
  * both norms: `layernorm` before attention and `rmsnorm` before the MLP, with their backward
    kernels (recipes/layernorm_backward.py, recipes/rmsnorm.py).
What does not:
  * attention in the training step is torch's scaled_dot_product_attention: layoutkit's
    attention has no backward kernel yet (issue 17, item 1), so it cannot be trained through.
    Instead, after training, layoutkit's `flash_attention` forward runs on the block's own
    queries, keys and values under torch.no_grad() (compiled, fullgraph) and is checked
    against SDPA;
  * GELU, the residual adds, the loss and AdamW are torch's.

Both blocks start from the same fp32 master weights (cast to bf16 for every op, as mixed
precision training does) and fit the same batch, so their losses differ only by the
kernels' rounding: bf16 outputs of f32 accumulations in different orders.

    python examples/transformer_block.py --steps 5            # on a Hopper GPU
    python examples/transformer_block.py --device cpu --tiny  # the kernels in the CPU
                                                              # interpreter: minutes per step
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import layoutkit.torch as lkt

BF16 = torch.bfloat16


@dataclass(frozen=True)
class Shape:
    batch: int
    seq: int
    heads: int
    head_dim: int
    mlp: int

    @property
    def model(self) -> int:
        return self.heads * self.head_dim


FULL = Shape(batch=4, seq=512, heads=8, head_dim=64, mlp=2048)
TINY = Shape(batch=1, seq=16, heads=1, head_dim=64, mlp=128)


def init_weights(shape: Shape, seed: int, device) -> dict:
    """fp32 master weights, torch.nn.Linear's layout (out_features, in_features)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    d = shape.model

    def linear(out_features, in_features):
        return torch.randn(out_features, in_features, generator=gen) / math.sqrt(in_features)
    weights = {"ln_w": 1 + 0.1 * torch.randn(d, generator=gen),
               "ln_b": 0.1 * torch.randn(d, generator=gen),
               "qkv": linear(3 * d, d), "out": linear(d, d),
               "rms_w": 1 + 0.1 * torch.randn(d, generator=gen),
               "up": linear(shape.mlp, d), "down": linear(d, shape.mlp)}
    return {name: w.to(device).requires_grad_() for name, w in weights.items()}


def attention_inputs(qkv, shape: Shape):
    """q, k, v as (batch, seq, heads, head_dim) views of the (batch * seq, 3 * model) QKV."""
    return qkv.view(shape.batch, shape.seq, 3, shape.heads, shape.head_dim).unbind(2)


def sdpa(q, k, v):
    """torch's causal attention on (batch, seq, heads, head_dim) tensors."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True)
    return o.transpose(1, 2)


def block_layoutkit(w: dict, x, shape: Shape):
    """The block on (batch * seq, model) bf16 rows; GEMMs and norms through layoutkit."""
    def linear(h, weight):                          # F.linear(h, weight): gemm(h, weight.t())
        return lkt.gemm(h, weight.to(BF16).t())
    h = lkt.layernorm(x, w["ln_w"].to(BF16), w["ln_b"].to(BF16), 1e-5)
    q, k, v = attention_inputs(linear(h, w["qkv"]), shape)
    x = x + linear(sdpa(q, k, v).reshape(x.shape), w["out"])
    h = lkt.rmsnorm(x, w["rms_w"].to(BF16), 1e-6)
    return x + linear(F.gelu(linear(h, w["up"])), w["down"])


def block_torch(w: dict, x, shape: Shape):
    """The same block in plain torch ops (the reference)."""
    def linear(h, weight):
        return F.linear(h, weight.to(BF16))
    h = F.layer_norm(x, x.shape[-1:], w["ln_w"].to(BF16), w["ln_b"].to(BF16), 1e-5)
    q, k, v = attention_inputs(linear(h, w["qkv"]), shape)
    x = x + linear(sdpa(q, k, v).reshape(x.shape), w["out"])
    h = F.rms_norm(x, x.shape[-1:], w["rms_w"].to(BF16), 1e-6)
    return x + linear(F.gelu(linear(h, w["up"])), w["down"])


def loss_of(block, shape: Shape):
    def loss(w, x, target):
        return F.mse_loss(block(w, x, shape).float(), target)
    return loss


def batch(shape: Shape, device):
    """One fixed batch (the steps fit it, so the loss must fall): bf16 rows and f32 targets."""
    gen = torch.Generator(device="cpu").manual_seed(1234)
    rows, d = shape.batch * shape.seq, shape.model
    x = torch.randn(rows, d, generator=gen).to(BF16)
    return x.to(device), (0.5 * torch.randn(rows, d, generator=gen)).to(device)


def train(loss_fn, weights: dict, shape: Shape, steps: int, device) -> list[float]:
    optimizer = torch.optim.AdamW(weights.values(), lr=1e-3)
    losses = []
    x, target = batch(shape, device)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(weights, x, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def check_attention(weights: dict, shape: Shape, device, backend: str) -> float:
    """layoutkit's flash_attention forward (compiled, no grad) on the trained block's q, k, v
    against SDPA; returns the error relative to max |o|."""
    x = batch(shape, device)[0]

    @torch.compile(fullgraph=True, backend=backend)
    def both(w, x):
        h = lkt.layernorm(x, w["ln_w"].to(BF16), w["ln_b"].to(BF16), 1e-5)
        q, k, v = attention_inputs(lkt.gemm(h, w["qkv"].to(BF16).t()), shape)
        return lkt.flash_attention(q, k, v, causal=True)[0], sdpa(q, k, v)
    with torch.no_grad():
        ours, theirs = both(weights, x)
    return ((ours.double() - theirs.double()).abs().max() /
            theirs.double().abs().max()).item()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    parser.add_argument("--device", default="cuda", help="cuda (a Hopper GPU) or cpu")
    parser.add_argument("--backend", default=None,
                        help="torch.compile backend (default: inductor on cuda, aot_eager on cpu)")
    parser.add_argument("--tiny", action="store_true",
                        help=f"the tiny shape {TINY} instead of {FULL} (for the interpreter)")
    parser.add_argument("--tolerance", type=float, default=2e-2,
                        help="the largest |loss - reference| / reference allowed (default 2e-2)")
    args = parser.parse_args(argv)
    shape = TINY if args.tiny else FULL
    backend = args.backend or ("inductor" if args.device.startswith("cuda") else "aot_eager")

    compiled = torch.compile(loss_of(block_layoutkit, shape), fullgraph=True, backend=backend)
    ours = init_weights(shape, 0, args.device)
    losses = train(compiled, ours, shape, args.steps, args.device)
    reference = train(loss_of(block_torch, shape), init_weights(shape, 0, args.device), shape,
                      args.steps, args.device)
    print(f"{shape}, {args.steps} AdamW steps, torch.compile(backend={backend!r}, "
          "fullgraph=True)")
    print(f"{'step':>4} {'layoutkit (compiled)':>21} {'torch (eager)':>14} {'relative diff':>14}")
    worst = 0.0
    for step, (got, want) in enumerate(zip(losses, reference)):
        diff = abs(got - want) / abs(want)
        worst = max(worst, diff)
        print(f"{step:>4} {got:>21.6f} {want:>14.6f} {diff:>14.2e}")
    attention_error = check_attention(ours, shape, args.device, backend)
    print(f"layoutkit flash_attention vs SDPA on the trained block (no grad): "
          f"{attention_error:.2e} of max |o|")
    ok = worst <= args.tolerance and attention_error <= 2 ** -7 and \
        all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    print("OK" if ok else f"MISMATCH (losses within {args.tolerance:g} and decreasing, "
          "attention within 2**-7 required)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
