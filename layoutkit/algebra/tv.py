"""Thread-value layouts: (thread, value) -> tile coordinate index."""
from __future__ import annotations

from . import domain
from . import int_tuple as it
from .composition import composition
from .errors import LayoutError
from .inverse import right_inverse
from .layout import Layout, size
from .product import raked_product

__all__ = ["make_layout_tv"]


def make_layout_tv(thr_layout: Layout, val_layout: Layout):
    """``(tiler_mn, layout_tv)`` as CuTe's make_layout_tv: ``layout_mn = raked_product(thr, val)``
    maps a tile coordinate to (thread, value); ``layout_tv = right_inverse(layout_mn) ∘
    (size(thr), size(val))`` maps (thread, value) to the tile's column-major index, and
    ``tiler_mn`` is the tile's shape (product of each mode of layout_mn).

    >>> tiler, tv = make_layout_tv(Layout((2, 3), (3, 1)), Layout((2, 2), (2, 1)))
    >>> tiler, str(tv)
    ((4, 6), '((3,2),(2,2)):((8,2),(4,1))')
    """
    for name, l in (("thr_layout", thr_layout), ("val_layout", val_layout)):
        if not isinstance(l, Layout):
            domain.fail("make_layout_tv", name, l, "must be a Layout")
    layout_mn = raked_product(thr_layout, val_layout)
    inv = right_inverse(layout_mn)
    if it.eq(size(inv), size(layout_mn)) is not True:
        raise LayoutError(f"make_layout_tv: raked_product({thr_layout}, {val_layout}) = "
                          f"{layout_mn} is not a bijection (thr and val layouts must be compact)")
    layout_tv = composition(inv, Layout((size(thr_layout), size(val_layout))))
    return it.product_each(layout_mn.shape), layout_tv
