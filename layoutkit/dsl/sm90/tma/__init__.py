"""layoutkit.dsl.sm90.tma: TMA copies between a global tile and a shared tile; the tensor map,
box, swizzle and expect-tx bytes derived from the two layouts (`derive`), the tensor map a hidden
kernel parameter (`tensor_map`).
"""
from .copy import TmaError, tma_load, tma_store, tma_store_commit, tma_store_wait

__all__ = ["TmaError", "tma_load", "tma_store", "tma_store_commit", "tma_store_wait"]
