"""layoutkit.algebra: CuTe's layout algebra in plain Python, integer and symbolic (sympy).

Imports: stdlib and sympy only, so it runs in a notebook with no CUDA. Semantics are CuTe's C++
(include/cute/layout.hpp); where pycute differs, the op's docstring says so.

>>> from layoutkit.algebra import Layout, composition, symbol
>>> str(composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))))
'((2,2),3):((24,2),8)'
>>> M, K = symbol("M", 128), symbol("K", 64)
>>> str(Layout((M, K), (K, 1)))
'(M,K):(K,1)'
"""
from .banks import BankReport, bank_conflicts
from .coalesce import coalesce, filter
from .complement import complement
from .composed import ComposedLayout
from .composition import composition
from .divide import flat_divide, logical_divide, tiled_divide, zipped_divide
from .errors import LayoutError
from .inverse import left_inverse, right_inverse
from .layout import (Layout, cosize, crd2idx, depth, flatten, idx2crd, make_layout, rank, shape,
                     size, stride)
from .partition import local_partition, local_tile
from .product import (blocked_product, flat_product, logical_product, raked_product,
                      tile_to_shape, tiled_product, zipped_product)
from .prove import divides, less, less_equal
from .render import Figure, layout_latex, layout_svg, show, svg_or_none, tv_layout_svg
from .swizzle import Swizzle
from .tv import make_layout_tv
from .vector import downcast, max_common_layout, max_common_vector, upcast

__all__ = [
    "Layout", "make_layout", "LayoutError", "symbol",
    "shape", "stride", "size", "cosize", "rank", "depth", "flatten", "crd2idx", "idx2crd",
    "coalesce", "filter", "composition", "complement", "right_inverse", "left_inverse",
    "logical_divide", "zipped_divide", "tiled_divide", "flat_divide",
    "logical_product", "zipped_product", "tiled_product", "flat_product",
    "blocked_product", "raked_product", "tile_to_shape",
    "local_partition", "local_tile",
    "upcast", "downcast", "max_common_vector", "max_common_layout",
    "Swizzle", "ComposedLayout", "make_layout_tv",
    "show", "Figure", "layout_latex", "layout_svg", "tv_layout_svg",
    "svg_or_none", "bank_conflicts", "BankReport",
    "divides", "less", "less_equal",
]


def __getattr__(name):
    if name == "symbol":        # symbolic.py imports sympy: only when a symbol is asked for
        from .symbolic import symbol
        return symbol
    raise AttributeError(f"module 'layoutkit.algebra' has no attribute {name!r}")
