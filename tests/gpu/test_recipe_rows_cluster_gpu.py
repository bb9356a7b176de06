"""GPU tests (marker `gpu`) of the five row recipes on issue 19's ragged grid, n in {1000, 3000,
32768 + 7, 131072} x m in {1, 7, 1000}: one CTA per row (n <= 16384) and rows split over a
cluster whose CTAs exchange their partials through distributed shared memory (32775: 3 CTAs
with a ragged last one; 131072: 8), each recipe's own check() against float64 (softmax,
layernorm: bf16; rmsnorm, softmax_backward, layernorm_backward: bf16 and f32, forward and
backward, statistics given and recomputed)."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from recipes import layernorm, layernorm_backward, rmsnorm, softmax, softmax_backward  # noqa: E402
from recipes import _row_split as rs  # noqa: E402

pytestmark = pytest.mark.gpu
COLUMNS = (1000, 3000, 32768 + 7, 131072)
ROWS = (1, 7, 1000)
SHAPES = [(m, n) for n in COLUMNS for m in ROWS]
RECIPES = {"softmax": lambda shapes: softmax.check(shapes),
           "layernorm": lambda shapes: layernorm.check(shapes),
           "rmsnorm": lambda shapes: rmsnorm.check(shapes),
           "softmax_backward": lambda shapes: softmax_backward.check(shapes),
           "layernorm_backward": lambda shapes: layernorm_backward.check(shapes)}


def test_the_grid_splits_wide_rows_over_clusters():
    """The wide columns of the grid do take the cluster (DSMEM) path of every recipe."""
    for n in COLUMNS[2:]:
        assert softmax.config(7, n).cluster > 1
        assert rmsnorm.forward_split(n, 2, 7).CLUSTER > 1
        assert softmax_backward.split_for(n, 2, 7).CLUSTER > 1
        assert layernorm_backward.split_for(n, 2).CLUSTER > 1
    assert all(softmax.config(1000, n).cluster == 1 for n in COLUMNS[:2])
    assert max(COLUMNS) <= rs.MAX_COLUMNS


@pytest.mark.parametrize("m, n", SHAPES)
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_recipe_matches_float64(recipe, m, n):
    RECIPES[recipe](((m, n),))      # each check() asserts its error bound (bf16 / f32)
    torch.cuda.empty_cache()
