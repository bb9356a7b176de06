"""The package map of docs/DESIGN.md, enforced: each package imports only what its arrow allows."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "layoutkit"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

# package -> top-level modules it may import besides the stdlib and itself
ALLOWED = {
    "algebra": {"sympy"},
    "ptx": {"numpy", "cuda"},
    "sync": {"layoutkit.ptx"},
    "dsl": {"layoutkit.algebra", "layoutkit.sync", "layoutkit.ptx", "numpy", "sympy",
            "tqdm"},   # tqdm: optional, lazily (the progress bar of precompile and autotune)
    "tools": {"layoutkit", "numpy", "sympy", "recipes", "torch"},   # torch: optional, lazily
    # the recipes as torch operators: an app layer like tools, over the interpreter and recipes
    "torch": {"layoutkit.dsl", "layoutkit.tools", "recipes", "torch"},
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def is_allowed(module: str, package: str) -> bool:
    top = module.split(".")[0]
    if top in STDLIB:
        return True
    if module == f"layoutkit.{package}" or module.startswith(f"layoutkit.{package}."):
        return True
    for allowed in ALLOWED[package]:
        if module == allowed or module.startswith(allowed + ".") or top == allowed:
            return True
    return False


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_follow_the_design(package):
    violations = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imported_modules(path):
            if not is_allowed(module, package):
                violations.append(f"{path.relative_to(ROOT.parent)}:{line} imports {module}")
    assert not violations, (f"layoutkit/{package} may import only the stdlib and "
                            f"{sorted(ALLOWED[package])}:\n" + "\n".join(violations))


def test_relative_imports_stay_inside_their_package():
    for package in ALLOWED:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            depth = len(path.relative_to(ROOT / package).parts) - 1
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level > depth + 1:
                    pytest.fail(f"{path}:{node.lineno} climbs out of layoutkit/{package} "
                                "with a relative import; import the other package by name")
