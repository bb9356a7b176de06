"""Decode attention over a KV cache: recipes/flash_attention_kvcache.py against FlashAttention-4's
paged / seqused_k forward (flash_attn.cute's flash_attn_varlen_func, from the peers pack) and
torch (the pages gathered into a contiguous cache, then SDPA; SDPA on a contiguous cache), same
run.

    PYTHONPATH=. python3 benchmarks/bench_attention_kvcache.py [--reps 20] [--quick]
                                                               [--peers .peers] [--no-sweeps]

bf16, heads_q 32, heads_kv 8, head dim 128, seqlen_q 1 (non-causal) and 4 (causal, bottom-right
aligned), batch 1..128, every sequence's cache full (cache_seqlens = the capacity, 1k..64k keys;
cases over 8 GB of KV are left out); paged caches use 128-key pages in a random permutation
(FA4's TMA page path needs page_size = its key tile, 128 at head dim 128), and the contiguous
cache holds the same sequences. FA4 4.0.0b36 has no split-KV on sm90 (its interface asserts
num_splits = 1 there), so it runs one CTA per (batch, KV head) tile. Every candidate is checked
against layoutkit's output first.
Reported: GB/s of K and V read (4 * batch * seqlen * heads_kv * head_dim bytes: the bound of
decode; the H200's HBM3e peaks at 4.8 TB/s) and ratios layoutkit / peer (> 1: layoutkit
faster). Everything is timed interleaved with L2 flushed before each call, medians
(layoutkit.tools.benchmarking). Sweeps after the main table: num_splits around the heuristic's
choice, page sizes 16..256 (against FA4's paged path), and the kernel's (BN, STAGES) configs.
When FA4 cannot run, the table says why.
"""
from __future__ import annotations

import argparse
import sys

import torch

from bench_attention import fa4_forward  # noqa: E402  (this folder is the script's sys.path[0])
from layoutkit.tools.benchmarking import gbps, interleaved
from layoutkit.tools.recipe_runner import load_recipe

HQ, HK, D, PAGE = 32, 8, 128, 128
BATCHES, CACHES = (1, 8, 32, 128), (1024, 4096, 16384, 65536)
MAX_KV_BYTES = 8 << 30


def fa4_kvcache(peers: str):
    """(run(q, k, v, seqlens, table, causal) -> (o, lse), None) using FA4's varlen forward with
    seqused_k and page_table, or (None, why it cannot run)."""
    fa4, why = fa4_forward(peers)              # the pack activated, or why it cannot be
    if fa4 is None:
        return None, why
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception as exc:     # noqa: BLE001 - any reason the peer cannot run is reported
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"

    def run(q, k, v, seqlens, table, causal):
        out = flash_attn_varlen_func(q, k, v, seqused_k=seqlens, page_table=table,
                                     causal=causal, return_lse=True)
        return out if isinstance(out, tuple) else (out, None)
    return run, None


def sdpa_runner(causal: bool):
    """SDPA on (batch, seqlen, heads, dim) tensors with GQA; bottom-right causal through
    torch.nn.attention.bias.causal_lower_right (SDPA's is_causal is top-left aligned)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def run(q, k, v):
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        mask = None
        if causal:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(q.shape[1], k.shape[1])
        return sdpa(qt, kt, vt, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    return run


def problem(recipe, batch: int, seqlen: int, sq: int):
    """q, the paged cache (pool, block table), the same sequences contiguous, cache_seqlens."""
    gen = torch.Generator(device="cuda").manual_seed(batch * seqlen + sq)
    q = torch.randn(batch, sq, HQ, D, device="cuda", generator=gen).to(torch.bfloat16)
    pages = batch * seqlen // PAGE
    k_pool, v_pool = (torch.randn(pages, PAGE, HK, D, device="cuda", generator=gen)
                      .to(torch.bfloat16) for _ in range(2))
    table = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32)
    table = table.view(batch, seqlen // PAGE)
    k, v = (recipe.gather_cache(x, table.long(), batch).contiguous() for x in (k_pool, v_pool))
    seqlens = torch.full((batch,), seqlen, dtype=torch.int32, device="cuda")
    return q, k_pool, v_pool, table, k, v, seqlens


def close(got, want, what: str) -> None:
    err = (got.float() - want.float()).abs().max().item()
    if not err < 2e-2:
        raise AssertionError(f"{what}: max difference {err:.3g} from layoutkit")


def case(recipe, batch, seqlen, sq, reps, fa4, notes) -> dict:
    """{candidate: GB/s of KV read} of one shape."""
    causal = sq > 1
    q, k_pool, v_pool, table, k, v, seqlens = problem(recipe, batch, seqlen, sq)
    ours = recipe.flash_attention_with_kvcache
    o, _ = ours(q, k_pool, v_pool, seqlens, table, causal=causal)
    o_contig, _ = ours(q, k, v, seqlens, causal=causal)
    close(o_contig, o, "layoutkit contiguous vs paged")
    candidates = {"paged": lambda: ours(q, k_pool, v_pool, seqlens, table, causal=causal),
                  "contiguous": lambda: ours(q, k, v, seqlens, causal=causal)}
    what = f"batch {batch} cache {seqlen} seqlen_q {sq}"
    if fa4 is not None:
        for name, args in (("FA4 paged", (k_pool, v_pool, seqlens, table)),
                           ("FA4 contiguous", (k, v, seqlens, None))):
            try:
                got, _ = fa4(q, *args, causal)
                torch.cuda.synchronize()
            except Exception as exc:     # noqa: BLE001 - a case FA4 cannot run is reported
                notes.append(f"{what}: {name} skipped ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:100]})")
                continue
            close(got, o, f"{what}: {name}")
            candidates[name] = (lambda a=args: fa4(q, *a, causal))

    table_long = table.long()
    for name in ("gather + SDPA", "SDPA contiguous"):
        for attempt_causal in ((True, False) if causal else (False,)):
            run, want = sdpa_runner(attempt_causal), o
            if attempt_causal != causal:        # timing stand-in: 4 rows' mask costs ~nothing
                want, _ = ours(q, k, v, seqlens, causal=False)

            def fn(run=run, name=name):
                if name == "SDPA contiguous":
                    return run(q, k, v)
                kk, vv = (recipe.gather_cache(x, table_long, batch) for x in (k_pool, v_pool))
                return run(q, kk, vv)
            try:
                close(fn(), want, f"{what}: {name}")
            except Exception as exc:     # noqa: BLE001 - a peer that cannot run is reported
                notes.append(f"{what}: {name}{' causal' if attempt_causal else ''} skipped "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
                continue
            if attempt_causal != causal:
                notes.append(f"{what}: {name} timed non-causal (bottom-right causal failed)")
            candidates[name] = fn
            break
    times = interleaved(candidates, reps=reps)
    nbytes = recipe.kv_bytes(batch, seqlen, HK, D)
    return {name: gbps(nbytes, t.median_ms) for name, t in times.items()}


PEERS = ("FA4 paged", "FA4 contiguous", "gather + SDPA", "SDPA contiguous")


def main_table(recipe, reps, fa4, quick) -> list:
    notes: list = []
    print("| batch | cache | seqlen_q | splits | layoutkit paged | layoutkit contiguous | " +
          " | ".join(PEERS) + " | paged / FA4 paged | contiguous / FA4 contiguous | "
          "paged / gather+SDPA | contiguous / SDPA |")
    print("|---|---|---|---|---|---|" + "---|" * (len(PEERS) + 4))
    batches, caches = ((1, 32), (4096, 16384)) if quick else (BATCHES, CACHES)
    for sq in (1, 4):
        for batch in batches:
            for seqlen in caches:
                if recipe.kv_bytes(batch, seqlen, HK, D) > MAX_KV_BYTES:
                    continue
                got = case(recipe, batch, seqlen, sq, reps, fa4, notes)
                splits = recipe.choose_splits(
                    batch * HK * -(-sq // recipe.packing(HQ // HK)[1]),
                    seqlen // recipe.CONFIGS[D].BN, recipe._sm_count(torch.device("cuda", 0)),
                    recipe.CONFIGS[D].ctas_per_sm(D))
                cells = " | ".join(f"{got[p]:.0f}" if p in got else "-" for p in PEERS)

                def ratio(a, b):
                    return f"{got[a] / got[b]:.3f}" if b in got else "-"
                print(f"| {batch} | {seqlen} | {sq} | {splits} | {got['paged']:.0f} | "
                      f"{got['contiguous']:.0f} | {cells} | {ratio('paged', 'FA4 paged')} | "
                      f"{ratio('contiguous', 'FA4 contiguous')} | "
                      f"{ratio('paged', 'gather + SDPA')} | "
                      f"{ratio('contiguous', 'SDPA contiguous')} |", flush=True)
    return notes


def split_sweep(recipe, reps) -> None:
    """GB/s of the paged kernel per num_splits around the heuristic's choice."""
    print("\nnum_splits sweep (paged, seqlen_q 1; * marks the heuristic's choice):\n")
    counts = (1, 2, 4, 8, 16, 32, 64, 128)
    print("| batch | cache | " + " | ".join(map(str, counts)) + " |")
    print("|---|---|" + "---|" * len(counts))
    for batch, seqlen in ((1, 16384), (1, 65536), (8, 16384), (32, 4096), (128, 1024)):
        q, k_pool, v_pool, table, _, _, seqlens = problem(recipe, batch, seqlen, 1)
        chosen = recipe.choose_splits(batch * HK, seqlen // recipe.CONFIGS[D].BN,
                                      recipe._sm_count(torch.device("cuda", 0)),
                                      recipe.CONFIGS[D].ctas_per_sm(D))
        times = interleaved({str(n): (lambda n=n: recipe.flash_attention_with_kvcache(
            q, k_pool, v_pool, seqlens, table, num_splits=n)) for n in counts}, reps=reps)
        nbytes = recipe.kv_bytes(batch, seqlen, HK, D)
        cells = " | ".join(f"{gbps(nbytes, times[str(n)].median_ms):.0f}"
                           f"{'*' if n == chosen else ''}" for n in counts)
        print(f"| {batch} | {seqlen} | {cells} |" + ("" if chosen in counts else
                                                      f" (heuristic: {chosen})"), flush=True)


def page_sweep(recipe, reps, fa4) -> None:
    """GB/s of the paged kernel and FA4's per page size (pages below 128 keys: FA4's non-TMA
    page path; below 64: several of layoutkit's TMA boxes a key block)."""
    sizes = (16, 32, 64, 128, 256)
    print("\npage size sweep (seqlen_q 1, GB/s, layoutkit / FA4):\n")
    print("| batch | cache | " + " | ".join(map(str, sizes)) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for batch, seqlen in ((32, 4096), (8, 16384)):
        q, k, v, _, _, _, seqlens = problem(recipe, batch, seqlen, 1)
        cells = []
        for page in sizes:
            kp, vp = (x.reshape(-1, page, HK, D) for x in (k, v))   # the same keys, re-paged
            table = torch.arange(kp.shape[0], device="cuda", dtype=torch.int32).view(batch, -1)
            candidates = {"layoutkit": lambda kp=kp, vp=vp, t=table: (
                recipe.flash_attention_with_kvcache(q, kp, vp, seqlens, t))}
            if fa4 is not None:
                try:
                    fa4(q, kp, vp, seqlens, table, False)
                    candidates["FA4"] = lambda kp=kp, vp=vp, t=table: fa4(q, kp, vp, seqlens, t,
                                                                          False)
                except Exception:        # noqa: BLE001 - shown as '-'
                    pass
            times = interleaved(candidates, reps=reps)
            got = {n: gbps(recipe.kv_bytes(batch, seqlen, HK, D), t.median_ms)
                   for n, t in times.items()}
            cells.append(f"{got['layoutkit']:.0f} / " +
                         (f"{got['FA4']:.0f}" if "FA4" in got else "-"))
        print(f"| {batch} | {seqlen} | " + " | ".join(cells) + " |", flush=True)


def config_sweep(recipe, reps) -> None:
    """GB/s of the paged kernel per (BN, STAGES) config (the default's split heuristic)."""
    configs = {f"BN={bn} STAGES={st}": recipe.Config(BN=bn, STAGES=st)
               for bn, st in ((64, 2), (64, 3), (64, 4), (128, 2))}
    print("\nconfig sweep (paged, seqlen_q 1, GB/s; the default is "
          f"{recipe.CONFIGS[D]}):\n")
    print("| batch | cache | " + " | ".join(configs) + " |")
    print("|---|---|" + "---|" * len(configs))
    for batch, seqlen in ((1, 65536), (8, 16384), (32, 4096), (128, 4096)):
        q, k_pool, v_pool, table, _, _, seqlens = problem(recipe, batch, seqlen, 1)
        times = interleaved({name: (lambda c=c: recipe.flash_attention_with_kvcache(
            q, k_pool, v_pool, seqlens, table, config=c)) for name, c in configs.items()},
            reps=reps)
        nbytes = recipe.kv_bytes(batch, seqlen, HK, D)
        print(f"| {batch} | {seqlen} | " + " | ".join(
            f"{gbps(nbytes, times[n].median_ms):.0f}" for n in configs) + " |", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="batch 1 and 32, cache 4k, 16k")
    parser.add_argument("--peers", default=".peers", help="the peers pack folder (FA4)")
    parser.add_argument("--no-sweeps", action="store_true", help="the main table only")
    args = parser.parse_args(argv)
    fa4, why = fa4_kvcache(args.peers)        # before anything else imports the CuTe DSL
    recipe = load_recipe("flash_attention_kvcache")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}  (GB/s of K and V read; "
          f"heads {HQ}/{HK}, head dim {D}, {PAGE}-key pages; ratios = layoutkit / peer)\n")
    if why:
        print(f"FA4 not measured: {why}\n")
    notes = main_table(recipe, args.reps, fa4, args.quick)
    for note in notes:
        print(note)
    if not args.no_sweeps:
        split_sweep(recipe, args.reps)
        page_sweep(recipe, args.reps, fa4)
        config_sweep(recipe, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
