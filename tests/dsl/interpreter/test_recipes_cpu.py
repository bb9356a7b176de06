"""Recipes on the CPU interpreter on small shapes, against numpy references (what
`layoutkit run RECIPE --cpu` runs)."""
import warnings

import pytest

from layoutkit.tools.recipe_runner import load_recipe
from recipes._row_split import Config

# (m, n, config): the heuristic's splits of ragged shapes (None), and by hand the paths small
# shapes do not pick: several rows per warp with 8-byte accesses, rows of 2 warps, a row over
# the 4 CTAs of a cluster with 2 rows per CTA and over 2 CTAs of 2 warps each (16-byte
# accesses, a ragged last CTA)
ROW_CASES = [(1, 1, None), (3, 7, None), (5, 100, None), (2, 2049, None), (9, 250, None),
             (7, 60, Config(threads=32, rows=4, vector=4, chunks=2)),
             (3, 200, Config(threads=64, rows=1, vector=8, chunks=1)),
             (5, 400, Config(threads=32, rows=2, vector=8, chunks=1, cluster=4)),
             (2, 1000, Config(threads=64, rows=1, vector=8, chunks=1, cluster=2))]


@pytest.mark.parametrize("m, n, config", ROW_CASES)
def test_softmax_matches_numpy(m, n, config):
    softmax = load_recipe("softmax")
    assert softmax.check_cpu(seed=m + n, cases=[(m, n, config)]) < 2 ** -7


@pytest.mark.parametrize("m, n, config", ROW_CASES)
def test_layernorm_matches_numpy(m, n, config):
    layernorm = load_recipe("layernorm")
    assert layernorm.check_cpu(seed=m + n, cases=[(m, n, config)]) < 2 ** -7


@pytest.mark.parametrize("name, tolerance", [("softmax", 2 ** -7), ("layernorm", 2 ** -7),
                                             ("transpose", 0.0), ("mma_gemm", 2 ** -7),
                                             ("gemm_hopper", 2 ** -7)])
def test_recipe_check_cpu(name, tolerance):
    """Each recipe's check_cpu() (what `layoutkit run RECIPE --cpu` runs) passes on seed 0
    (flash_attention's: tests/dsl/test_recipe_flash_attention.py::test_interpreter_matches_numpy,
    and each attention recipe's test file runs its own)."""
    recipe = load_recipe(name)           # registers the module (gemm_hopper's dataclass needs it)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # protocol-check notes are not this test's subject
        err = recipe.check_cpu(seed=0)
    assert 0.0 <= err <= tolerance
