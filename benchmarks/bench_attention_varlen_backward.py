"""Variable-length attention backward: recipes/flash_attention_varlen_backward.py against the
padded backward (recipes/flash_attention_backward.py) and FlashAttention-4's varlen backward
(autograd through flash_attn.cute's flash_attn_varlen_func, from the peers pack), same run.

    PYTHONPATH=. python3 benchmarks/bench_attention_varlen_backward.py [--reps 20] [--quick]
                                                         [--head-dims 128 ...] [--peers .peers]

bf16, heads = 2048 / head_dim, about 16k tokens a batch, causal and not; the batches of
benchmarks/bench_attention_varlen.py. Equal lengths: varlen on the packed batch against the
padded backward on the same tensors (the same work; target >= 0.95). Skewed lengths: against
padding every sequence to the longest and running the padded backward (a timing baseline).
TFLOP/s of the batch's real work, 2.5 x the forward's. FA4 runs on the same packed tensors,
its gradients checked against layoutkit's first; where it cannot run, the table says why.
Timed interleaved with the L2 flushed before each call (layoutkit.tools.benchmarking); ratios
are layoutkit varlen / the other.
"""
from __future__ import annotations

import argparse
import sys

import torch

from bench_attention_varlen import (CHANNELS, EQUAL_SEQLENS, TOKENS, _ratio, fa4_varlen, packed,
                                    padded_copy, skewed_batches)
from layoutkit.tools.benchmarking import interleaved, tflops
from layoutkit.tools.recipe_runner import load_recipe


def fa4_backward(fa4, q, k, v, do, cu, longest, causal):
    """A callable running FA4's varlen backward for `do` (its forward run once, kept)."""
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    out = fa4(*leaves, cu, cu, longest, longest, causal)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def case(recipe, lengths, d: int, causal: bool, reps: int, fa4, equal: bool, notes: list) -> dict:
    """{name: TFLOP/s of the batch's backward work} for varlen, padded and FA4."""
    fwd, padded = recipe.forward, recipe.padded
    heads, longest, batch = CHANNELS // d, max(lengths), len(lengths)
    q, k, v, cu = packed(lengths, heads, d)
    do = torch.randn_like(q)
    o, lse = fwd.flash_attention_varlen(q, k, v, cu, cu, longest, longest, causal)
    varlen = (lambda: recipe.flash_attention_varlen_backward(do, q, k, v, o, lse, cu, cu,
                                                             longest, longest, causal))
    mine = varlen()
    if equal:                        # the padded tensors are views of the packed ones
        qp, kp, vp, dop, op = (x.view(batch, longest, heads, d) for x in (q, k, v, do, o))
        lsep = lse.view(heads, batch, longest).transpose(0, 1)
    else:
        qp, kp, vp, dop = (padded_copy(x, cu, lengths) for x in (q, k, v, do))
        op, lsep = fwd.padded.flash_attention(qp, kp, vp, causal)
    candidates = {"varlen": varlen,
                  "padded": lambda: padded.flash_attention_backward(dop, qp, kp, vp, op, lsep,
                                                                    causal)}
    if fa4 is not None:
        try:
            run = fa4_backward(fa4, q, k, v, do, cu, longest, causal)
            got = run()
            torch.cuda.synchronize()
            err = max(((g.float() - m.float()).abs().max() /
                       m.float().abs().max().clamp_min(1e-2)).item() for g, m in zip(got, mine))
            if not err < 2 ** -6:
                raise AssertionError(f"FA4 varlen backward d={d} causal={causal}: relative "
                                     f"difference {err:.3g} from layoutkit")
            candidates["FA4"] = run
        except Exception as exc:     # noqa: BLE001 - a case FA4 cannot run is reported
            notes.append(f"d={d} causal={causal} {fwd.describe(lengths)}: FA4 skipped "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
    times = interleaved(candidates, reps=reps)
    flops = 2.5 * sum(fwd.padded.attention_flops(1, heads, n, n, d, causal) for n in lengths)
    return {name: tflops(flops, t.median_ms) for name, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="head dim 128 only, seqlen 4k")
    parser.add_argument("--head-dims", type=int, nargs="+", default=None)
    parser.add_argument("--peers", default=".peers", help="the peers pack folder (FA4)")
    args = parser.parse_args(argv)
    fa4, why = fa4_varlen(args.peers)        # before anything else imports the CuTe DSL
    recipe = load_recipe("flash_attention_varlen_backward")
    torch.manual_seed(0)
    head_dims = args.head_dims or ((128,) if args.quick else recipe.HEAD_DIMS)
    seqlens = (4096,) if args.quick else EQUAL_SEQLENS
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}  (backward TFLOP/s of "
          "each batch's work; ratios = layoutkit varlen / the other)\n")
    if why:
        print(f"FA4 not measured: {why}\n")
    notes: list = []
    batches = [("equal", [s] * max(1, TOKENS // s)) for s in seqlens] + \
        [("skewed", lengths) for lengths in skewed_batches().values()]
    print("| hd | causal | kind | lengths | varlen | padded | FA4 | vs padded | vs FA4 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in head_dims:
        for causal in (False, True):
            for kind, lengths in batches:
                got = case(recipe, lengths, d, causal, args.reps, fa4, kind == "equal", notes)
                fa4_cell = f"{got['FA4']:.1f}" if "FA4" in got else "skip"
                print(f"| {d} | {causal} | {kind} | {recipe.forward.describe(lengths)[:28]} | "
                      f"{got['varlen']:.1f} | {got['padded']:.1f} | {fa4_cell} | "
                      f"{_ratio(got, 'padded')} | {_ratio(got, 'FA4')} |", flush=True)
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
