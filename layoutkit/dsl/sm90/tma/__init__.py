"""layoutkit.dsl.sm90.tma: TMA copies between a global tile and a shared tile (`copy`); the
tensor map, box, swizzle and expect-tx bytes derived from the two layouts (`derive`), the tensor
map a hidden kernel parameter (`tensor_map`); the IR ops' definitions (`ops`).
"""
from . import ops  # noqa: F401  (registers the TMA ops)
from .copy import TmaError, tma_load, tma_store, tma_store_commit, tma_store_wait
from .derive import tma_swizzle

__all__ = ["TmaError", "tma_load", "tma_store", "tma_store_commit", "tma_store_wait",
           "tma_swizzle"]
