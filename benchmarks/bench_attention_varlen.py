"""Variable-length forward attention: recipes/flash_attention_varlen.py against the padded recipe
(recipes/flash_attention.py) and FlashAttention-4's varlen forward (flash_attn.cute's
flash_attn_varlen_func, from the peers pack), same run.

    PYTHONPATH=. python3 benchmarks/bench_attention_varlen.py [--reps 20] [--quick]
                                                              [--head-dims 128 ...] [--peers .peers]

bf16, heads = 2048 / head_dim, about 16k tokens a batch, causal and not. Two tables:
- equal lengths (batch x seqlen = 16k tokens, seqlen 1k, 4k, 16k): varlen on the packed batch
  against the padded kernel on the same (batch, seqlen) tensors, which do the same work (the
  varlen kernel's target is >= 0.95 of the padded kernel's TFLOP/s); checked bit for bit first.
- skewed lengths (one long sequence and many short ones, random lengths, halving lengths):
  varlen against padding every sequence to the longest and running the padded kernel (what
  a batch without varlen costs: its keys past a sequence's end are not even masked, so it is a
  timing baseline only), both in TFLOP/s of the batch's real work, sum over sequences of
  4 * heads * seqlen^2 * head_dim (halved for causal).
FA4 runs on the same packed tensors in both tables; each of its cases is checked against
layoutkit's output first. When FA4 cannot be imported the tables say why and leave it out.
Everything is timed interleaved with the L2 flushed before each call
(layoutkit.tools.benchmarking); ratios are layoutkit varlen / the other.
"""
from __future__ import annotations

import argparse
import random
import sys

import torch

from bench_attention import fa4_forward  # noqa: E402  (this folder is the script's sys.path[0])
from layoutkit.tools.benchmarking import interleaved, tflops
from layoutkit.tools.recipe_runner import load_recipe

TOKENS, CHANNELS = 16384, 2048
EQUAL_SEQLENS = (1024, 4096, 16384)


def skewed_batches() -> dict[str, list[int]]:
    """Named length distributions of about TOKENS tokens (fixed seed)."""
    rng = random.Random(0)
    uniform = []
    while sum(uniform) < TOKENS:
        uniform.append(rng.randint(64, 4096))
    return {"8192 + 16 x 512": [8192] + [512] * 16,
            "uniform 64..4096": uniform,
            "halving 8192..64": [8192 >> i for i in range(8)] + [64]}


def fa4_varlen(peers: str):
    """(FA4's flash_attn_varlen_func, None), or (None, why it cannot run)."""
    fa4, why = fa4_forward(peers)              # the pack activated, or why it cannot be
    if fa4 is None:
        return None, why
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception as exc:     # noqa: BLE001 - any reason the peer cannot run is reported
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"

    def run(q, k, v, cu_q, cu_k, max_q, max_k, causal):
        out = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                     max_seqlen_q=max_q, max_seqlen_k=max_k, causal=causal)
        return out[0] if isinstance(out, tuple) else out
    return run, None


def packed(lengths, heads: int, d: int):
    q, k, v = (torch.randn(sum(lengths), heads, d, device="cuda").to(torch.bfloat16)
               for _ in range(3))
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32,
                      device="cuda")
    return q, k, v, cu


def padded_copy(x, cu, lengths):
    """(batch, longest, heads, d) zeros with each sequence's rows of the packed `x`."""
    out = torch.zeros(len(lengths), max(lengths), *x.shape[1:], device="cuda", dtype=x.dtype)
    for b, (start, n) in enumerate(zip(cu.tolist(), lengths)):
        out[b, :n] = x[start:start + n]
    return out


def work(recipe, lengths, heads: int, d: int, causal: bool) -> float:
    return sum(recipe.padded.attention_flops(1, heads, n, n, d, causal) for n in lengths)


def case(recipe, lengths, d: int, causal: bool, reps: int, fa4, equal: bool, notes: list) -> dict:
    """{name: TFLOP/s of the batch's work} for varlen, padded and FA4 (where it runs; why not
    is appended to `notes`)."""
    heads, longest = CHANNELS // d, max(lengths)
    q, k, v, cu = packed(lengths, heads, d)
    varlen = (lambda: recipe.flash_attention_varlen(q, k, v, cu, cu, longest, longest, causal))
    o, _ = varlen()
    if equal:                        # the padded tensors are views of the packed ones
        qp, kp, vp = (x.view(len(lengths), longest, heads, d) for x in (q, k, v))
        o_pad, _ = recipe.padded.flash_attention(qp, kp, vp, causal)
        if not torch.equal(o, o_pad.reshape(o.shape)):
            raise AssertionError(f"d={d} causal={causal} {lengths[:3]}...: varlen differs from "
                                 "the padded kernel on equal lengths")
    else:
        qp, kp, vp = (padded_copy(x, cu, lengths) for x in (q, k, v))
    candidates = {"varlen": varlen,
                  "padded": lambda: recipe.padded.flash_attention(qp, kp, vp, causal)}
    if fa4 is not None:
        try:
            got = fa4(q, k, v, cu, cu, longest, longest, causal)
            torch.cuda.synchronize()
        except Exception as exc:     # noqa: BLE001 - a case FA4 cannot run is reported
            notes.append(f"d={d} causal={causal} {recipe.describe(lengths)}: FA4 skipped "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
            fa4 = None
    if fa4 is not None:
        err = (got.float() - o.float()).abs().max().item()
        if not err < 2e-2:
            raise AssertionError(f"FA4 varlen d={d} causal={causal}: max difference {err:.3g} "
                                 "from layoutkit")
        candidates["FA4"] = lambda: fa4(q, k, v, cu, cu, longest, longest, causal)
    times = interleaved(candidates, reps=reps)
    flops = work(recipe, lengths, heads, d, causal)
    return {name: tflops(flops, t.median_ms) for name, t in times.items()}


def _ratio(got: dict, other: str) -> str:
    return f"{got['varlen'] / got[other]:.3f}" if other in got else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="head dim 128 only, seqlen 4k")
    parser.add_argument("--head-dims", type=int, nargs="+", default=None)
    parser.add_argument("--peers", default=".peers", help="the peers pack folder (FA4)")
    args = parser.parse_args(argv)
    fa4, why = fa4_varlen(args.peers)        # before anything else imports the CuTe DSL
    recipe = load_recipe("flash_attention_varlen")
    torch.manual_seed(0)
    head_dims = args.head_dims or ((128,) if args.quick else recipe.HEAD_DIMS)
    seqlens = (4096,) if args.quick else EQUAL_SEQLENS
    fa4_cols = ["FA4"] if fa4 else []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}  (TFLOP/s of each batch's "
          "work; ratios = layoutkit varlen / the other)\n")
    if why:
        print(f"FA4 not measured: {why}\n")
    notes: list = []
    print("Equal lengths (varlen on the packed batch, padded on the same tensors):\n")
    print("| hd | causal | lengths | varlen | padded | " + "".join(f"{c} | " for c in fa4_cols) +
          "vs padded | vs FA4 |")
    print("|---|---|---|---|---|" + "---|" * len(fa4_cols) + "---|---|")
    for d in head_dims:
        for causal in (False, True):
            for seqlen in seqlens:
                lengths = [seqlen] * max(1, TOKENS // seqlen)
                got = case(recipe, lengths, d, causal, args.reps, fa4, True, notes)
                cells = "".join(f"{got[c]:.1f} | " if c in got else "skip | " for c in fa4_cols)
                print(f"| {d} | {causal} | {recipe.describe(lengths)} | {got['varlen']:.1f} | "
                      f"{got['padded']:.1f} | {cells}{_ratio(got, 'padded')} | "
                      f"{_ratio(got, 'FA4')} |", flush=True)
    print("\nSkewed lengths (padded: every sequence padded to the longest, the padded kernel):\n")
    print("| hd | causal | lengths | tokens | varlen | padded | " +
          "".join(f"{c} | " for c in fa4_cols) + "vs padded | vs FA4 |")
    print("|---|---|---|---|---|---|" + "---|" * len(fa4_cols) + "---|---|")
    for d in head_dims:
        for causal in (False, True):
            for name, lengths in skewed_batches().items():
                got = case(recipe, lengths, d, causal, args.reps, fa4, False, notes)
                cells = "".join(f"{got[c]:.1f} | " if c in got else "skip | " for c in fa4_cols)
                print(f"| {d} | {causal} | {name} | {sum(lengths)} | {got['varlen']:.1f} | "
                      f"{got['padded']:.1f} | {cells}{_ratio(got, 'padded')} | "
                      f"{_ratio(got, 'FA4')} |", flush=True)
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
