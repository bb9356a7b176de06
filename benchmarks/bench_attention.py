"""Forward attention, layoutkit's recipes/flash_attention.py against FlashAttention-4 (its CuTe
DSL sm90 forward, from the peers pack) and torch SDPA with each of its backends forced (cuDNN,
Flash, memory-efficient), same run.

    PYTHONPATH=. python3 benchmarks/bench_attention.py [--reps 20] [--quick] [--no-ablations]
                                                       [--head-dims 128 ...] [--peers .peers]
                                                       [--seqlens 2048 ...] [--sdpa cuDNN ...]
    PYTHONPATH=. python3 benchmarks/bench_attention.py --ablations --head-dims 64 128 \
        --seqlens 2048 8192 [--configs "3 consumers" ...]    # the ablation tables alone

FA4 comes from the git-ignored folder that ../shared/peers/pack.sh fills (`--peers`, default
`.peers`); when it cannot be imported the table says why and leaves its column out.

bf16, head dims 64, 128 and 256, seqlen 1k-16k (seqlen_q = seqlen_k), causal and not; batch x heads
fill the GPU (batch = 16384 / seqlen, heads = 2048 / head_dim: 16k tokens x 2048 channels).
Each SDPA backend runs on two input layouts, the (b, h, s, d) views of the same (b, s, h, d)
storage layoutkit reads and contiguous (b, h, s, d) copies, and reports the faster of the two.
Each case is checked against SDPA first; then every candidate is timed interleaved with the L2
flushed before each call (layoutkit.tools.benchmarking). Prints TFLOP/s (4*B*H*Sq*Sk*D / time,
halved for causal) and the ratios layoutkit / FA4 and layoutkit / best SDPA backend; a backend
that raises for a case is skipped and named. GQA rows (32 query heads, 8 key/value heads, head
dim 128) follow the square ones. Then the ablation rows (head dim 128, seqlen 8k; `--ablations`:
only these, for --head-dims at --seqlens): each pipeline choice switched off in turn and the
other tile shapes (recipes/flash_attention.ablations; `--configs` keeps the named rows and the
default), timed interleaved with FA4 and the SDPA backends, as ratios to the default, to FA4 and
to cuDNN.
"""
from __future__ import annotations

import argparse
import sys

import torch

from layoutkit.tools.benchmarking import interleaved, tflops
from layoutkit.tools.recipe_runner import load_recipe

SEQLENS = (1024, 2048, 4096, 8192, 16384)
TOKENS, CHANNELS = 16384, 2048


def _backends():
    from torch.nn.attention import SDPBackend
    return {"cuDNN": SDPBackend.CUDNN_ATTENTION, "Flash": SDPBackend.FLASH_ATTENTION,
            "mem-eff": SDPBackend.EFFICIENT_ATTENTION}


def _sdpa(backend, q, k, v, causal):
    from torch.nn.attention import sdpa_kernel

    def run():
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def fa4_forward(peers: str):
    """(FA4's forward, None) from the peers folder, or (None, why it cannot run)."""
    import os
    if not os.path.isdir(peers):
        return None, f"no {peers} folder (bash ../shared/peers/pack.sh fills it; carry it)"
    sys.path.insert(0, peers)
    try:
        import peers_site
        return peers_site.activate(), None
    except Exception as exc:     # noqa: BLE001 - any reason the peer cannot run is reported
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def _inputs(seqlen: int, d: int, gqa: int = 1):
    batch, heads = max(1, TOKENS // seqlen), CHANNELS // d
    q = torch.randn(batch, seqlen, heads, d, device="cuda").to(torch.bfloat16)
    k, v = (torch.randn(batch, seqlen, heads // gqa, d, device="cuda").to(torch.bfloat16)
            for _ in range(2))
    return batch, heads, q, k, v


def case(recipe, d: int, seqlen: int, causal: bool, reps: int, configs=None, fa4=None,
         gqa: int = 1, sdpa=None) -> dict:
    """Time one shape: {name: TFLOP/s} for layoutkit (each config), FA4 and the SDPA backends
    `sdpa` (names of _backends(); None: every one) (GQA: heads // gqa key/value heads, which
    SDPA reads expanded)."""
    batch, heads, q, k, v = _inputs(seqlen, d, gqa)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))         # SDPA's (b, h, s, d) views
    if gqa > 1:
        kt, vt = (x.repeat_interleave(gqa, dim=1) for x in (kt, vt))
    qc, kc, vc = (x.contiguous() for x in (qt, kt, vt))           # ... and its own storage order
    want = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    candidates, skipped = {}, []
    if fa4 is not None:
        got = fa4(q, k, v, causal=causal)
        err = (got.transpose(1, 2).float() - want.float()).abs().max().item()
        if not err < 2e-2:
            raise AssertionError(f"FA4 d={d} seqlen={seqlen} causal={causal}: max error {err:.3g}")
        candidates["FA4"] = lambda: fa4(q, k, v, causal=causal)
    for name, backend in _backends().items():
        if sdpa is not None and name not in sdpa:
            continue
        for label, args in ((name, (qt, kt, vt)), (f"{name} bhsd", (qc, kc, vc))):
            run = _sdpa(backend, *args, causal)
            try:
                run()
                torch.cuda.synchronize()
            except Exception as exc:     # noqa: BLE001 - a backend that cannot run this case
                skipped.append(f"{label} ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})")
                continue
            candidates[label] = run
    for label, cfg in (configs or {"layoutkit": None}).items():
        o, _ = recipe.flash_attention(q, k, v, causal=causal, config=cfg)
        err = (o.transpose(1, 2).float() - want.float()).abs().max().item()
        if not err < 2e-2:
            raise AssertionError(f"d={d} seqlen={seqlen} causal={causal} {label}: max error "
                                 f"{err:.3g} against SDPA")
        candidates[label] = (lambda cfg=cfg: recipe.flash_attention(q, k, v, causal=causal,
                                                                     config=cfg))
    times = interleaved(candidates, reps=reps)
    flops = recipe.attention_flops(batch, heads, seqlen, seqlen, d, causal)
    got = {name: tflops(flops, t.median_ms) for name, t in times.items()}
    for name in _backends():     # each backend at its faster input layout
        layouts = [got.pop(label) for label in (name, f"{name} bhsd") if label in got]
        if layouts:
            got[name] = max(layouts)
    return got, skipped, (batch, heads)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="seqlen 2k and 16k only")
    parser.add_argument("--seqlens", type=int, nargs="+", default=None,
                        help="only these seqlens (default: 1k-16k; 8k for the ablations)")
    parser.add_argument("--no-ablations", action="store_true")
    parser.add_argument("--ablations", action="store_true",
                        help="only the ablation tables, for --head-dims (default 128)")
    parser.add_argument("--configs", nargs="+", default=None,
                        help="only these ablation rows (and the default)")
    parser.add_argument("--sdpa", nargs="+", default=None, choices=list(_backends()),
                        help="only these SDPA backends (default: all)")
    parser.add_argument("--head-dims", type=int, nargs="+", default=None,
                        help="only these head dims (default: every one the recipe supports)")
    parser.add_argument("--peers", default=".peers", help="the peers pack folder (FA4)")
    args = parser.parse_args(argv)
    fa4, why = fa4_forward(args.peers)     # before anything else imports the CuTe DSL
    recipe = load_recipe("flash_attention")
    torch.manual_seed(0)
    seqlens = args.seqlens or ((2048, 16384) if args.quick else SEQLENS)
    sdpa = args.sdpa or list(_backends())
    backends = (["FA4"] if fa4 else []) + sdpa
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}  (TFLOP/s; ratios = "
          "layoutkit / FA4 and layoutkit / best SDPA backend)\n")
    if why:
        print(f"FA4 not measured: {why}\n")
    if args.configs:
        rows = {k for d in args.head_dims or recipe.HEAD_DIMS for causal in (False, True)
                for k in recipe.ablations(d, causal)}
        if set(args.configs) - rows:
            raise SystemExit(f"--configs: no ablation row named {sorted(set(args.configs) - rows)}"
                             f" (rows: {sorted(rows)})")
    if args.ablations:
        for d in args.head_dims or (128,):
            for seqlen in args.seqlens or (8192,):
                ablation_table(recipe, d, seqlen, args.reps, fa4, sdpa, args.configs)
        return 0
    print("| hd | seqlen | causal | B x Hq/Hkv | layoutkit | " + " | ".join(backends) +
          " | vs FA4 | vs SDPA |")
    print("|---|---|---|---|---|" + "---|" * len(backends) + "---|---|")
    notes = []
    rows = [(d, causal, seqlen, 1) for d in args.head_dims or recipe.HEAD_DIMS
            for causal in (False, True) for seqlen in seqlens]
    rows += [(128, causal, 8192, 4) for causal in (False, True)
             if 128 in (args.head_dims or recipe.HEAD_DIMS)]
    for d, causal, seqlen, gqa in rows:
        got, skipped, (b, h) = case(recipe, d, seqlen, causal, args.reps, fa4=fa4, gqa=gqa,
                                    sdpa=sdpa)
        best = max((got[x] for x in sdpa if x in got), default=float("nan"))
        cells = " | ".join(f"{got[x]:.1f}" if x in got else "skip" for x in backends)
        vs_fa4 = f"{got['layoutkit'] / got['FA4']:.3f}" if "FA4" in got else "-"
        print(f"| {d} | {seqlen} | {causal} | {b}x{h}/{h // gqa} | {got['layoutkit']:.1f} | "
              f"{cells} | {vs_fa4} | {got['layoutkit'] / best:.3f} |", flush=True)
        notes += [f"d={d} seqlen={seqlen} causal={causal}: skipped {s}" for s in skipped]
    for note in notes:
        print(note)
    if not args.no_ablations:
        ablation_table(recipe, 128, 8192, args.reps, fa4, sdpa, args.configs)
    return 0


def ablation_table(recipe, d: int, seqlen: int, reps: int, fa4, sdpa, only=None) -> None:
    """Print the ablation rows of head dim d at seqlen (causal and not; `only`: these rows
    and the default), each case one interleaved run with FA4 and the SDPA backends `sdpa`:
    TFLOP/s and the ratios to the default, to FA4 and to cuDNN (or the best SDPA backend
    measured when cuDNN is not)."""
    ref = "cuDNN" if "cuDNN" in sdpa else "best SDPA"
    print(f"\nAblations (head dim {d}, seqlen {seqlen}; TFLOP/s; ratios to the default, FA4 "
          f"and {ref} of the same run):\n")
    print(f"| causal | config | TFLOP/s | vs default | vs FA4 | vs {ref} |\n"
          "|---|---|---|---|---|---|")
    for causal in (False, True):
        configs = {k: c for k, c in recipe.ablations(d, causal).items()
                   if only is None or k in only or k == "default"}
        got, skipped, _ = case(recipe, d, seqlen, causal, reps, configs, fa4=fa4, sdpa=sdpa)
        base = max((got[x] for x in sdpa if x in got), default=float("nan")) \
            if ref != "cuDNN" else got.get("cuDNN", float("nan"))
        fa4_tf = got.get("FA4", float("nan"))
        for name in configs:
            print(f"| {causal} | {name} | {got[name]:.1f} | {got[name] / got['default']:.3f} | "
                  f"{got[name] / fa4_tf:.3f} | {got[name] / base:.3f} |", flush=True)
        print(f"| {causal} | FA4 / cuDNN | {fa4_tf:.1f} / {got.get('cuDNN', float('nan')):.1f} "
              "| | | |", flush=True)
        for s in skipped:
            print(f"d={d} seqlen={seqlen} causal={causal}: skipped {s}")


if __name__ == "__main__":
    sys.exit(main())
