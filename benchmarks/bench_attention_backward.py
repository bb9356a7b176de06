"""Attention backward, layoutkit's recipes/flash_attention_backward.py against torch SDPA's
backward with the cuDNN and Flash backends forced and FlashAttention-4's sm90 backward (its
CuTe DSL flash_bwd_sm90, through flash_attn_func's autograd, from the peers pack), same run.

    PYTHONPATH=. python3 benchmarks/bench_attention_backward.py [--reps 20] [--quick]
                                                                [--head-dims 64 128 ...]

bf16, 16 query heads, batch x seqlen = 16k tokens, seqlen 1k-16k (seqlen_q = seqlen_k), head
dims 64, 128 and 256 (a head dim the backward lacked would say n/a), causal and not;
then GQA rows (16 query heads, 4 kv heads, head dim 128, seqlen 8k). Every candidate is timed
from the same saved forward (outputs, lse or autograd graph built once, outside the timing):
layoutkit's backward call (its pre-pass, kernel and post-pass), and for SDPA and FA4
torch.autograd.grad(out, (q, k, v), dout) on their graph (their own pre/post kernels
included). SDPA reads GQA's K/V heads expanded (repeat_interleave before the graph: its dk, dv
are per query head, the group sum not timed). Interleaved medians with the L2 flushed before
each call (layoutkit.tools.benchmarking). TFLOP/s count the backward as 2.5 x the forward's
FLOPs (4 B H Sq Sk D, halved for causal): 5 matmuls against the forward's 2. Ratios are
layoutkit / FA4 and layoutkit / best SDPA backend. layoutkit's dq is checked against SDPA's
first (max error under 2e-2 of max |dq|). Then the ablation rows (seqlen 8k, each head dim):
recipes/flash_attention_backward.ablations, each pipeline choice switched in turn
(--ablations TEXT ...: only the rows naming one of them; --no-table: only the ablations).
"""
from __future__ import annotations

import argparse
import sys

import torch

from bench_attention import fa4_forward  # noqa: E402  (this folder is the script's sys.path[0])
from layoutkit.tools.benchmarking import interleaved, tflops
from layoutkit.tools.recipe_runner import load_recipe

SEQLENS = (1024, 2048, 4096, 8192, 16384)
TOKENS, HEADS = 16384, 16
BACKWARD_FLOPS = 2.5           # x the forward's FLOPs


def _backends():
    from torch.nn.attention import SDPBackend
    return {"cuDNN": SDPBackend.CUDNN_ATTENTION, "Flash": SDPBackend.FLASH_ATTENTION}


def _grad_of(out, inputs, dout):
    return lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)


def case(fa, fb, d: int, seqlen: int, causal: bool, reps: int, fa4=None, gqa: int = 1,
         configs=None, peers: bool = True):
    """{name: TFLOP/s} of one shape (layoutkit's default or each of `configs`, and the peers
    unless `peers` is False), the names skipped (with why), (batch, heads)."""
    batch = max(1, TOKENS // seqlen)
    q, do = (torch.randn(batch, seqlen, HEADS, d, device="cuda").to(torch.bfloat16)
             for _ in range(2))
    k, v = (torch.randn(batch, seqlen, HEADS // gqa, d, device="cuda").to(torch.bfloat16)
            for _ in range(2))
    candidates, skipped, reference_dq = {}, [], None
    for name, backend in (_backends() if peers else {}).items():
        from torch.nn.attention import sdpa_kernel
        leaves = [x.detach().transpose(1, 2) for x in (q, k, v)]
        leaves[1:] = [x.repeat_interleave(gqa, dim=1) for x in leaves[1:]]
        leaves = [x.requires_grad_() for x in leaves]
        try:
            with sdpa_kernel([backend]):
                out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
            run = _grad_of(out, leaves, do.transpose(1, 2))
            grads = run()
            torch.cuda.synchronize()
        except Exception as exc:     # noqa: BLE001 - a backend that cannot run this case
            skipped.append(f"{name} ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})")
            continue
        reference_dq = grads[0].transpose(1, 2) if reference_dq is None else reference_dq
        candidates[name] = run
    if fa4 is not None and peers:
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        try:
            out = fa4(*leaves, causal=causal)
            run = _grad_of(out, leaves, do)
            run()
            torch.cuda.synchronize()
            candidates["FA4"] = run
        except Exception as exc:     # noqa: BLE001 - FA4's backward cannot run this case
            skipped.append(f"FA4 ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})")
    if d in fb.HEAD_DIMS:
        o, lse = fa.flash_attention(q, k, v, causal)
        for label, cfg in (configs or {"layoutkit": None}).items():
            dq = fb.flash_attention_backward(do, q, k, v, o, lse, causal, config=cfg)[0]
            if reference_dq is not None:
                err = ((dq.float() - reference_dq.float()).abs().max() /
                       reference_dq.float().abs().max()).item()
                if not err < 2e-2:
                    raise AssertionError(f"d={d} seqlen={seqlen} causal={causal} {label}: dq "
                                         f"off by {err:.3g} of max |dq| against SDPA")
            candidates[label] = (lambda cfg=cfg: fb.flash_attention_backward(
                do, q, k, v, o, lse, causal, config=cfg))
    times = interleaved(candidates, reps=reps)
    flops = BACKWARD_FLOPS * fa.attention_flops(batch, HEADS, seqlen, seqlen, d, causal)
    return ({name: tflops(flops, t.median_ms) for name, t in times.items()}, skipped,
            (batch, HEADS))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="seqlen 2k and 16k only")
    parser.add_argument("--head-dims", type=int, nargs="+", default=(64, 128, 256))
    parser.add_argument("--peers", default=".peers", help="the peers pack folder (FA4)")
    parser.add_argument("--no-ablations", action="store_true")
    parser.add_argument("--no-table", action="store_true",
                        help="skip the table against the peers (ablation rows only)")
    parser.add_argument("--ablation-causal", choices=("both", "False", "True"), default="both",
                        help="the ablation rows' causal setting(s)")
    parser.add_argument("--ablations", nargs="+", metavar="TEXT",
                        help="only the ablation rows whose name contains one of these (and the "
                             "default)")
    args = parser.parse_args(argv)
    fa4, why = (None, "--no-table") if args.no_table else \
        fa4_forward(args.peers)            # before anything else imports the CuTe DSL
    fa, fb = load_recipe("flash_attention"), load_recipe("flash_attention_backward")
    torch.manual_seed(0)
    seqlens = (2048, 16384) if args.quick else SEQLENS
    peers = (["FA4"] if fa4 else []) + list(_backends())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}  (backward TFLOP/s = "
          f"{BACKWARD_FLOPS} x forward FLOPs / time; ratios = layoutkit / FA4 and layoutkit / "
          "best SDPA backend)\n")
    if why:
        print(f"FA4 not measured: {why}\n")
    print("| hd | seqlen | causal | B x Hq/Hkv | layoutkit | " + " | ".join(peers) +
          " | vs FA4 | vs SDPA |")
    print("|---|---|---|---|---|" + "---|" * len(peers) + "---|---|")
    rows = [(d, causal, seqlen, 1) for d in args.head_dims for causal in (False, True)
            for seqlen in seqlens]
    rows += [(128, causal, 8192, 4) for causal in (False, True) if 128 in args.head_dims]
    rows = [] if args.no_table else rows
    notes = []
    for d, causal, seqlen, gqa in rows:
        got, skipped, (b, h) = case(fa, fb, d, seqlen, causal, args.reps, fa4, gqa)
        ours = got.get("layoutkit")
        best = max((got[x] for x in _backends() if x in got), default=float("nan"))
        cells = " | ".join(f"{got[x]:.1f}" if x in got else "skip" for x in peers)
        vs_fa4 = f"{ours / got['FA4']:.3f}" if ours and "FA4" in got else "-"
        vs_sdpa = f"{ours / best:.3f}" if ours else "-"
        print(f"| {d} | {seqlen} | {causal} | {b}x{h}/{h // gqa} | "
              f"{f'{ours:.1f}' if ours else 'n/a'} | {cells} | {vs_fa4} | {vs_sdpa} |",
              flush=True)
        notes += [f"d={d} seqlen={seqlen} causal={causal}: skipped {s}" for s in skipped]
    for note in notes:
        print(note)
    if not args.no_ablations:
        print("\nAblations (seqlen 8192; TFLOP/s, ratio to the default):\n")
        print("| hd | causal | config | TFLOP/s | ratio |\n|---|---|---|---|---|")
        causals = (False, True) if args.ablation_causal == "both" else \
            (args.ablation_causal == "True",)
        for d in [d for d in (64, 128, 256) if d in args.head_dims]:
            for causal in causals:
                configs = {name: cfg for name, cfg in fb.ablations(d).items()
                           if name == "default" or not args.ablations or
                           any(text in name for text in args.ablations)}
                got, _, _ = case(fa, fb, d, 8192, causal, args.reps, configs=configs,
                                 peers=False)
                for name in configs:
                    print(f"| {d} | {causal} | {name} | {got[name]:.1f} | "
                          f"{got[name] / got['default']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
