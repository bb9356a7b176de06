"""layoutkit.torch: layoutkit's recipes as PyTorch operators, so a model can call them eagerly,
differentiate through them and place them in a `torch.compile(..., fullgraph=True)` graph.

``import layoutkit.torch`` defines, once per process:

    torch.ops.layoutkit.       computes (recipe)                          backward op
    gemm(a, b)                 a @ b, bf16 (gemm_hopper)                  two gemms
    gemm_grouped(a, b,         a_g @ b_g per group of offsets' token      none yet
      offsets)                 rows, bf16 (gemm_grouped; MoE experts)
    flash_attention(q, k, v,   (o, lse): FlashAttention's forward         flash_attention_backward,
      causal, scale, layout)   (flash_attention)                          pending (no kernel yet)
    softmax(x)                 softmax over the last dim (softmax)        softmax_backward
    layernorm(x, w, b, eps)    layer norm over the last dim (layernorm)   layernorm_backward
    rmsnorm(x, w, eps)         (y, rstd): RMSNorm (rmsnorm)               rmsnorm_backward
    transpose(x)               x.t().contiguous() (transpose)             a transpose

Each has a fake (meta) implementation that checks the arguments as the kernel does and gives
the outputs' shapes, dtypes and strides without running anything (FakeTensorMode, torch.compile,
torch.export). CUDA tensors run the recipe's kernel on the GPU (a Hopper GPU for the sm_90a
kernels). CPU tensors run the same kernel in layoutkit's CPU interpreter: slow, for tests and
tiny shapes (layoutkit.torch.interpreted says how slow and where it stops), but real, which is
what lets `torch.library.opcheck` and the gradient tests run on a machine without a GPU. Other
devices get torch's "could not run ... backend" error.

The functions below are the operators with their default arguments:

    >>> import torch, layoutkit.torch as lkt
    >>> x = torch.randn(4, 64).to(torch.bfloat16)
    >>> torch.allclose(lkt.softmax(x).float(), torch.softmax(x.float(), -1), atol=2e-3)
    True
"""
from layoutkit.tools.dependencies import require_torch

require_torch("layoutkit.torch")

import torch  # noqa: E402

from .registry import NAMESPACE, OpSpec, define  # noqa: E402
from .attention import FLASH_ATTENTION, FLASH_ATTENTION_BACKWARD  # noqa: E402
from .gemm import GEMM  # noqa: E402
from .gemm_grouped import GEMM_GROUPED  # noqa: E402
from .norms import LAYERNORM, LAYERNORM_BACKWARD  # noqa: E402
from .rmsnorm import RMSNORM, RMSNORM_BACKWARD  # noqa: E402
from .softmax import SOFTMAX, SOFTMAX_BACKWARD  # noqa: E402
from .transpose import TRANSPOSE  # noqa: E402

OPS = (GEMM, GEMM_GROUPED, FLASH_ATTENTION, FLASH_ATTENTION_BACKWARD, SOFTMAX, SOFTMAX_BACKWARD,
       LAYERNORM, LAYERNORM_BACKWARD, RMSNORM, RMSNORM_BACKWARD, TRANSPOSE)


def register() -> None:
    """Define every operator of OPS that torch's dispatcher does not hold yet (idempotent; the
    import does it)."""
    for spec in OPS:
        define(spec)


register()


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b by layoutkit's Hopper GEMM (bf16 M x K times K x N; see the module docstring)."""
    return torch.ops.layoutkit.gemm(a, b)


def gemm_grouped(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The grouped GEMM of MoE layers (layoutkit.torch.gemm_grouped says the shapes): c[rows of
    group g] = a[rows of group g] @ b[g], the groups' rows given by int32 offsets read on the
    device only."""
    return torch.ops.layoutkit.gemm_grouped(a, b, offsets)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    softmax_scale: float | None = None, layout: str = "bshd"):
    """(o, lse) of FlashAttention's forward by layoutkit's kernel (layoutkit.torch.attention
    says the shapes); o is differentiable (recipes/flash_attention_backward.py), lse is
    not."""
    return torch.ops.layoutkit.flash_attention(q, k, v, causal, softmax_scale, layout)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax(x, dim=-1) by layoutkit's kernel (bf16; see the module docstring)."""
    return torch.ops.layoutkit.softmax(x)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.layer_norm(x, (n,), weight, bias, eps) by layoutkit's kernel."""
    return torch.ops.layoutkit.layernorm(x, weight, bias, eps)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None = None,
            eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(mean(x^2, -1) + eps) (* weight) by layoutkit's kernel (its rstd dropped)."""
    return torch.ops.layoutkit.rmsnorm(x, weight, eps)[0]


def transpose(x: torch.Tensor) -> torch.Tensor:
    """x.t().contiguous() by layoutkit's swizzled-tile transpose (bf16, f16, f32)."""
    return torch.ops.layoutkit.transpose(x)


__all__ = ["NAMESPACE", "OPS", "OpSpec", "register", "gemm", "gemm_grouped", "flash_attention",
           "softmax", "layernorm", "rmsnorm", "transpose"]
