"""Recipes on the CPU interpreter on small shapes, against numpy references (what
`layoutkit run RECIPE --cpu` runs)."""
import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
from layoutkit.tools.recipe_runner import load_recipe

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"cpu_recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row_relative(got, want) -> float:
    """The softmax recipe's metric: error relative to the largest output of its row."""
    return float((np.abs(got - want) / want.max(axis=-1, keepdims=True)).max())


@pytest.mark.parametrize("m, n", [(1, 1), (3, 7), (5, 100), (2, 2049)])
def test_softmax_matches_numpy(m, n):
    softmax = load("softmax")
    x = to_bf16(np.random.default_rng(m * n).standard_normal((m, n)) * 4)
    xf = from_bf16(x).astype(np.float64)
    want = np.exp(xf - xf.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    kernel, grid, constexprs = softmax._arguments(m, n)
    err = check_on_cpu(kernel, grid, x, np.zeros((m, n), np.uint16), m, n, expect={"y": want},
                       tolerance=2 ** -7, error=row_relative, **constexprs)
    assert err < 2 ** -7


@pytest.mark.parametrize("name, tolerance", [("softmax", 2 ** -7), ("layernorm", 2 ** -7),
                                             ("transpose", 0.0), ("mma_gemm", 2 ** -7),
                                             ("gemm_hopper", 2 ** -7),
                                             ("flash_attention", 2 ** -7)])
def test_recipe_check_cpu(name, tolerance):
    """Each recipe's check_cpu() (what `layoutkit run RECIPE --cpu` runs) passes on seed 0."""
    recipe = load_recipe(name)           # registers the module (gemm_hopper's dataclass needs it)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # protocol-check notes are not this test's subject
        err = recipe.check_cpu(seed=0)
    assert 0.0 <= err <= tolerance
