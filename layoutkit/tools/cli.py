"""The ``layoutkit`` command line (also ``python -m layoutkit``).

  layoutkit tour            the README's main job: a checked layout-algebra session, every
                            recipe assembled and, on a Hopper GPU, checked and benchmarked
                            (one summary table)
  layoutkit compile RECIPE  assemble a recipe's default kernels for sm_90a (any machine):
                            [--ptx] [--sass] [--resources: registers per warp role, dynamic
                            shared memory per buffer, mbarriers, spills, ptxas notes]
  layoutkit run RECIPE      on a Hopper GPU: check the recipe against its reference, then
                            benchmark it beside the library doing the same work;
                            --cpu: run its check on the CPU interpreter (any machine)
  layoutkit tune RECIPE     on a Hopper GPU: run the recipe's autotuning sweep (its tune())
                            and print the configs it chose
  layoutkit bench RECIPE    on a Hopper GPU: the recipe's benchmark() as a table, with the
                            ratios to the reference library
  layoutkit cache info      the cubin cache (entries, bytes) and the specialization cache: its
                            entries per kernel, and why a kernel is not cached; -v: each
                            entry's facts
  layoutkit cache clear     delete every cached cubin, specialization and autotuning winner
"""
from __future__ import annotations

import argparse
import sys


def _tour(args: argparse.Namespace) -> int:
    from layoutkit.tools.tour import run_tour
    return 0 if run_tour(sys.stdout) else 1


def _compile(args: argparse.Namespace) -> int:
    from layoutkit import ptx
    from layoutkit.tools.recipe_runner import compile_recipe
    for spec in compile_recipe(args.recipe):
        print(f"== {spec.recipe}: {spec.name}: {spec.resource_line()}")
        if args.resources:
            print(spec.resource_table() + "\n")
        if args.ptx:
            print(spec.ptx)
        if args.sass:
            print(ptx.disassemble(spec.cubin))
    return 0


def _run(args: argparse.Namespace) -> int:
    from layoutkit.tools.recipe_runner import check_and_benchmark, load_recipe
    if args.cpu:
        recipe = load_recipe(args.recipe)
        if not callable(getattr(recipe, "check_cpu", None)):
            print(f"recipe {args.recipe} defines no check_cpu()", file=sys.stderr)
            return 2
        print(f"check on the CPU interpreter (seed {args.seed}): worst relative error "
              f"{recipe.check_cpu(seed=args.seed):.3g}")
        return 0
    from layoutkit.tools.dependencies import require_torch
    require_torch("layoutkit run (without --cpu)")
    worst, _ = check_and_benchmark(args.recipe)
    print(f"check: worst relative error {worst:.3g}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from layoutkit import ptx
    from layoutkit.dsl.core import spec_cache
    if args.action == "clear":
        removed = ptx.cache_clear()
        print(f"removed {removed} cached cubin(s) from {ptx.cache_info().directory}")
        specs = spec_cache.spec_cache_clear()
        tuned = _clear_autotune()
        print(f"removed {specs} cached specialization(s) from {spec_cache.cache_root()} and "
              f"{tuned} autotuning table(s)")
        from layoutkit.ptx import code_cache
        codes = code_cache.clear()
        print(f"removed {codes} compiled launcher(s) from {code_cache.code_directory().parent}")
        return 0
    print(ptx.cache_info())
    kernels = spec_cache.spec_cache_info()
    state = "on" if spec_cache.enabled() else "off (LAYOUTKIT_SPEC_CACHE)"
    print(f"{spec_cache.cache_root()}: {sum(k.entries for k in kernels)} specialization(s) of "
          f"{len(kernels)} kernel(s), {sum(k.bytes for k in kernels)} bytes; the cache is {state}")
    for entry in kernels:
        print("\n".join("  " + line for line in entry.lines(verbose=args.verbose)))
    return 0


def _clear_autotune() -> int:
    from layoutkit.ptx.settings import get_settings
    directory = get_settings().cache_dir / "autotune"
    removed = 0
    for path in directory.glob("*.json") if directory.is_dir() else ():
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def format_rows(rows: list[dict]) -> str:
    """Dict rows as an aligned table, columns in the order the keys first appear."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [columns] + [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _recipe_call(name: str, function: str, what: str):
    from layoutkit.tools.recipe_runner import RecipeError, load_recipe
    recipe = load_recipe(name)
    if not callable(getattr(recipe, function, None)):
        raise RecipeError(f"recipe {name} defines no {function}() ({what})")
    return getattr(recipe, function)()


def _tune(args: argparse.Namespace) -> int:
    rows = _recipe_call(args.recipe, "tune", "its autotuning sweep: the configs it chose, "
                        "one dict per key")
    if rows:
        print(format_rows(list(rows)))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from layoutkit.tools.recipe_runner import format_summary, recipe_stem, summarize
    rows = list(_recipe_call(args.recipe, "benchmark", "its timings beside the reference "
                             "library, one dict per case") or ())
    if rows:
        print(format_rows(rows) + "\n")
        print(format_summary(summarize(recipe_stem(args.recipe), rows)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="layoutkit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("tour", help="a checked layout-algebra session and a toolchain check"
                        ).set_defaults(run=_tour)
    compile_ = commands.add_parser("compile", help="assemble a recipe's kernels for sm_90a")
    compile_.add_argument("recipe", help="a name in recipes/ (e.g. softmax) or a path")
    for flag, what in (("--ptx", "print the PTX"), ("--sass", "print the SASS (nvdisasm)"),
                       ("--resources", "print a resource table per kernel: registers (per "
                        "warp role), shared memory per buffer, mbarriers, spills, ptxas notes")):
        compile_.add_argument(flag, action="store_true", help=what)
    compile_.set_defaults(run=_compile)
    run = commands.add_parser("run", help="check and benchmark a recipe on a Hopper GPU")
    run.add_argument("recipe", help="a name in recipes/ (e.g. softmax) or a path")
    run.add_argument("--cpu", action="store_true",
                     help="run the recipe's check on the CPU interpreter instead (no GPU)")
    run.add_argument("--seed", type=int, default=0, help="the interpreter's scheduling seed")
    run.set_defaults(run=_run)
    for name, run_it, what in (("tune", _tune, "run a recipe's autotuning sweep on a Hopper GPU"),
                               ("bench", _bench, "run a recipe's benchmark on a Hopper GPU")):
        command = commands.add_parser(name, help=what)
        command.add_argument("recipe", help="a name in recipes/ (e.g. gemm_hopper) or a path")
        command.set_defaults(run=run_it)
    cache = commands.add_parser("cache", help="inspect or clear the cubin and specialization "
                                "caches")
    cache.add_argument("action", choices=("info", "clear"))
    cache.add_argument("-v", "--verbose", action="store_true",
                       help="info: each cached specialization's facts")
    cache.set_defaults(run=_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    from layoutkit.tools.dependencies import MissingDependencyError
    from layoutkit.tools.recipe_runner import RecipeError
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except RecipeError as exc:
        print(f"layoutkit {args.command}: {exc}", file=sys.stderr)
        return 2
    except MissingDependencyError as exc:        # one line: what to install
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
