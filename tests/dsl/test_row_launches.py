"""The row recipes' launch descriptions ([(kernel, grid, args, constexprs)]) bind as the GPU path
passes them (recipes/_rowwise.launch: arguments by position, then the constexprs by position in
the kernel's parameter order, taken by name): every description names exactly the kernel's
remaining parameters, on forward and backward, narrow and cluster-split rows."""
import numpy as np
import pytest

import layoutkit as lk
from recipes import layernorm, layernorm_backward, rmsnorm, softmax, softmax_backward

SHAPES = [(7, 1000), (300, 4096), (4, 40000)]


def floats(count):
    return np.zeros(count, np.float32)


def descriptions(m, n):
    x, row = np.zeros((m, n), np.uint16), np.zeros(n, np.uint16)
    stats = np.zeros(m, np.float32)
    dtypes = (lk.bf16, lk.bf16)
    yield from softmax.launches(x, x, floats, m, n)
    yield from layernorm.launches(x, row, row, x, floats, m, n, 1e-5)
    yield from softmax_backward.launches(x, x, x, floats, m, n, lk.bf16)
    yield from rmsnorm.forward_launches(x, None, row, x, None, stats, floats, m, n, 1e-6, dtypes)
    yield from rmsnorm.backward_launches(x, x, row, stats, x, np.zeros(n, np.float32), floats,
                                         m, n, dtypes, 4)
    yield from layernorm_backward.launches(x, x, row, None, None, x, np.zeros((2, n), np.float32),
                                           floats, m, n, 1e-5, dtypes, 4)


@pytest.mark.parametrize("m, n", SHAPES)
def test_each_description_names_the_kernels_remaining_parameters(m, n):
    seen = 0
    for kernel, grid, args, constexprs in descriptions(m, n):
        rest = [p.name for p in kernel.params[len(args):]]
        assert rest == list(constexprs), (kernel.name, rest, list(constexprs))
        assert all(p.kind == "constexpr" for p in kernel.params[len(args):]), kernel.name
        seen += 1
    assert seen >= 8
