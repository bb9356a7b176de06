"""The ``layoutkit`` command line (also ``python -m layoutkit``)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="layoutkit", description=__doc__)
    parser.add_subparsers(dest="command", required=True)
    args = parser.parse_args(argv)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
