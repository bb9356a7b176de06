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
  layoutkit cache info      where the cubin cache lives, its entries and bytes
  layoutkit cache clear     delete every cached cubin
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
    if args.action == "clear":
        removed = ptx.cache_clear()
        print(f"removed {removed} cached cubin(s) from {ptx.cache_info().directory}")
    else:
        print(ptx.cache_info())
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
    cache = commands.add_parser("cache", help="inspect or clear the cubin cache")
    cache.add_argument("action", choices=("info", "clear"))
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
