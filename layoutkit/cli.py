"""The ``layoutkit`` command line (also ``python -m layoutkit``).

  layoutkit tour            the README's main job: a checked layout-algebra session, then the
                            PTX toolchain (build, assemble and, on a Hopper GPU, run a kernel)
  layoutkit cache info      where the cubin cache lives, its entries and bytes
  layoutkit cache clear     delete every cached cubin
"""
from __future__ import annotations

import argparse
import sys


def _tour(args: argparse.Namespace) -> int:
    from layoutkit.tour import run_tour
    return 0 if run_tour(sys.stdout) else 1


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
    cache = commands.add_parser("cache", help="inspect or clear the cubin cache")
    cache.add_argument("action", choices=("info", "clear"))
    cache.set_defaults(run=_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
