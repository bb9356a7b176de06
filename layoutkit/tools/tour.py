"""`layoutkit tour`: the README's main job — a short layout-algebra session that prints each result
and checks it against the value CuTe documents (or against brute force), then reports the
toolchain it found.

Each step is (title, expression text, computed object, expected CuTe notation or a check).
A wrong result exits non-zero, so the tour doubles as a smoke test of a fresh install.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TextIO

from layoutkit import algebra as la


@dataclass(frozen=True)
class TourStep:
    title: str
    expression: str
    compute: Callable[[], object]
    check: Callable[[object], bool]
    expected: str


def _equals(text: str) -> Callable[[object], bool]:
    return lambda result: str(result) == text


def _is_bijection_onto(n: int) -> Callable[[object], bool]:
    return lambda layout: sorted(layout(i) for i in range(la.size(layout))) == list(range(n))


def _steps() -> list[TourStep]:
    M, K = la.symbol("M", divisible_by=128), la.symbol("K", divisible_by=64)
    # Swizzles act on element offsets: the 128-byte swizzle of 16-bit data is Sw<3,3,3>
    # (Sw<3,4,3> on byte addresses, as hopper-ptx.md writes it).
    sw128_tile = la.ComposedLayout(la.Swizzle(3, 3, 3), 0, la.Layout((8, 64), (64, 1)))
    return [
        TourStep("column-major by default", "make_layout((4, 2))",
                 lambda: la.make_layout((4, 2)), _equals("(4,2):(1,4)"), "(4,2):(1,4)"),
        TourStep("composition is function composition",
                 "composition((6,2):(8,2), (4,3):(3,1))",
                 lambda: la.composition(la.Layout((6, 2), (8, 2)), la.Layout((4, 3), (3, 1))),
                 _equals("((2,2),3):((24,2),8)"), "((2,2),3):((24,2),8)"),
        TourStep("complement fills the gaps up to a cotarget", "complement(4:2, 24)",
                 lambda: la.complement(la.Layout(4, 2), 24), _equals("(2,3):(1,8)"),
                 "(2,3):(1,8)"),
        TourStep("logical_divide splits a layout into tiles",
                 "logical_divide((4,2,3):(2,1,8), 4:2)",
                 lambda: la.logical_divide(la.Layout((4, 2, 3), (2, 1, 8)), la.Layout(4, 2)),
                 _equals("((2,2),(2,3)):((4,1),(2,8))"), "((2,2),(2,3)):((4,1),(2,8))"),
        TourStep("symbolic: a row-major (M,K) global tensor tiled by (128,64)",
                 "zipped_divide((M,K):(K,1), (128,64)), M % 128 == 0, K % 64 == 0",
                 lambda: la.zipped_divide(la.Layout((M, K), (K, 1)), (la.Layout(128), la.Layout(64))),
                 _equals("((128,64),(M/128,K/64)):((K,1),(128*K,64))"),
                 "((128,64),(M/128,K/64)):((K,1),(128*K,64))"),
        TourStep("128-byte swizzle of an 8x64 bf16 smem tile is a permutation",
                 "Sw<3,3,3> o (8,64):(64,1)", lambda: sw128_tile, _is_bijection_onto(512),
                 "a bijection onto [0, 512)"),
        TourStep("thread-value layout: 32 threads x 4 values over a (4,32) tile",
                 "make_layout_tv((4,8):(8,1), (1,4):(4,1))",
                 lambda: la.make_layout_tv(la.Layout((4, 8), (8, 1)), la.Layout((1, 4), (4, 1)))[1],
                 _is_bijection_onto(128), "a bijection onto the 128 tile elements"),
    ]


def _compile_recipes(out: TextIO) -> bool:
    """Assemble every recipe's default kernels with ptxas (sm_90a) and print their resources."""
    from layoutkit.ptx import find_ptxas, ptxas_version
    from layoutkit.tools.recipe_runner import compile_recipe, recipe_names
    print(f"\nRecipes, assembled for sm_90a by {find_ptxas()} ({ptxas_version().build}):", file=out)
    recipes = recipe_names()
    if not recipes:
        print("   (the recipes package is not installed: `pip install -e .` from a checkout)",
              file=out)
    for name in recipes:
        for spec in compile_recipe(name):
            print(f"   {spec.recipe}: {spec.name}: {spec.resource_line()}", file=out)
    return True


def run_tour(out: TextIO) -> bool:
    """Print every step of the tour to ``out``, then compile the recipes (from a checkout) and,
    when a GPU is present, check and benchmark each, ending with one summary table; True when
    every result checks."""
    all_ok = _layout_steps(out)
    compiled = _compile_recipes(out)
    return _run_recipes(out) and compiled and all_ok


def _run_recipes(out: TextIO) -> bool:
    """On a GPU: every recipe's check() and benchmark(), then one table of their ratios."""
    from layoutkit.tools.recipe_runner import (check_and_benchmark, format_summary, gpu_present,
                                               recipe_names)
    if not gpu_present():
        print("\nNo GPU here: the recipes were assembled, not run (`layoutkit run RECIPE` on a "
              "Hopper GPU checks and benchmarks one; `layoutkit run RECIPE --cpu` runs its "
              "check on the CPU interpreter).", file=out)
        return True
    from layoutkit.tools.dependencies import torch_installed, torch_missing_message
    if not torch_installed():
        print("\n" + torch_missing_message("Checking and benchmarking the recipes on this GPU"),
              file=out)
        return False
    lines, ok = [], True
    for name in recipe_names():
        print(f"\n== {name}: check and benchmark", file=out, flush=True)
        try:
            worst, rows = check_and_benchmark(name)
        except AssertionError as exc:
            print(f"   CHECK FAILED: {exc}", file=out)
            ok = False
            continue
        print(f"   check: worst relative error {worst:.3g}", file=out)
        lines += rows
    print("\nSummary (layoutkit / reference library, same run; > 1 is faster):", file=out)
    print(format_summary(lines), file=out)
    return ok


def _layout_steps(out: TextIO) -> bool:
    all_ok = True
    for number, step in enumerate(_steps(), 1):
        result = step.compute()
        ok = step.check(result)
        all_ok &= ok
        print(f"{number}. {step.title}\n   {step.expression}\n   = {result}"
              f"   [{'ok' if ok else 'WRONG, expected ' + step.expected}]", file=out)
    return all_ok
