"""torch.ops.layoutkit.layernorm(x, weight, bias, eps): torch.nn.functional.layer_norm over
x's last dimension (biased variance) for bf16 x, weight, bias, by recipes/layernorm.py.
Non-contiguous inputs are made contiguous (a copy) first.
"""
from __future__ import annotations

from .checks import check_bf16, check_eps, check_vector, new_like
from .registry import OpSpec, recipe
from .rows import check_rows, run_rows


def layernorm_outputs(x, weight, bias, eps):
    check_bf16("layernorm", x=x, weight=weight, bias=bias)
    check_rows("layernorm", x, allow_empty_rows=False)
    check_vector("layernorm", x, weight=weight, bias=bias)
    check_eps("layernorm", eps)
    return new_like(x)


def layernorm_cuda(x, weight, bias, eps):
    out = layernorm_outputs(x, weight, bias, eps)
    return recipe("layernorm", "layernorm").layernorm(x.contiguous(), weight.contiguous(),
                                                      bias.contiguous(), eps, out)


def layernorm_cpu(x, weight, bias, eps):
    out = layernorm_outputs(x, weight, bias, eps)
    run_rows(recipe("layernorm", "layernorm"), "layernorm",
             {"x": x.contiguous(), "weight": weight.contiguous(), "bias": bias.contiguous(),
              "y": out}, (eps,))
    return out


LAYERNORM = OpSpec("layernorm", "(Tensor x, Tensor weight, Tensor bias, float eps=1e-05) -> "
                   "Tensor", layernorm_outputs, layernorm_cuda, layernorm_cpu)
