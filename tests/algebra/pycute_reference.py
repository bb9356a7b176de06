"""layoutkit.algebra's public names implemented on NVIDIA's pycute: the reference for the
differential tests, and a stand-in that runs the property tests against pycute to validate the
properties themselves.

Where pycute and CuTe C++ (include/cute/layout.hpp) differ, this follows C++:
- composition with a tuple tiler drops A's modes past the tiler's length (C++ transform_layout
  with empty tails; pycute keeps them);
- logical_product with an int tiler is a product (pycute calls logical_divide);
- complement's default cotarget is cosize(filter(A)) (pycute: 1), and a layout whose sorted
  strides overlap (C++'s "Non-injective Layout detected in complement") raises.
pycute's assertion failures become LayoutError. Ops pycute lacks (flat_divide, blocked/raked
products, tile_to_shape, upcast/downcast, max_common_vector, local_tile/local_partition,
make_layout_tv) are built from pycute's primitives by their C++ / CuTe DSL definitions.
"""
from __future__ import annotations

import functools
from math import prod

import pycute as pc

Layout = pc.Layout


class LayoutError(ValueError):
    """Raised where pycute asserts (an inadmissible input)."""


def _guarded(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (AssertionError, ZeroDivisionError) as exc:
            raise LayoutError(f"{fn.__name__}{args}: {exc!r}") from exc
    return run


def _tiler(x):
    """A tiler: a layout, an int extent (the layout x:1), None (keep the mode), or a tuple of tilers."""
    if isinstance(x, tuple):
        return tuple(_tiler(v) for v in x)
    if isinstance(x, int):
        return pc.Layout(x)
    return x


def _concat(layouts):
    layouts = list(layouts)
    return pc.Layout(tuple(l.shape for l in layouts), tuple(l.stride for l in layouts))


def _modes(layout):
    return [layout[i] for i in range(len(layout))]


def make_layout(shape, stride=None):
    return pc.Layout(shape, stride)


def size(x):
    return x.size() if pc.is_layout(x) else pc.product(x)


def cosize(x):
    return x.cosize()


def rank(x):
    return len(x)


def _depth(t):
    return 1 + max((_depth(m) for m in t), default=0) if isinstance(t, tuple) else 0


def depth(x):
    return _depth(x.shape if pc.is_layout(x) else x)


def flatten(x):
    if pc.is_layout(x):
        return pc.Layout(pc.flatten(x.shape), pc.flatten(x.stride))
    return pc.flatten(x)


crd2idx = _guarded(pc.crd2idx)
idx2crd = _guarded(pc.idx2crd)
coalesce = _guarded(pc.coalesce)
filter = _guarded(pc.filter)  # noqa: A001 - the CuTe name


@_guarded
def right_inverse(layout):
    """C++'s right_inverse (layout.hpp): over the coalesced modes sorted by stride, take each mode
    whose stride is the running extent; others (stride 0) are skipped. pycute stops at the first
    mismatch, so a stride-0 mode makes its result trivial."""
    c = pc.coalesce(layout)
    shape = c.shape if isinstance(c.shape, tuple) else (c.shape,)
    stride = c.stride if isinstance(c.stride, tuple) else (c.stride,)
    preprod = pc.prefix_product(shape)
    r_shape, r_stride, cur = [1], [0], 1
    for k in sorted(range(len(shape)), key=lambda k: stride[k]):
        if stride[k] == cur:
            r_shape.append(shape[k])
            r_stride.append(preprod[k])
            cur = shape[k] * stride[k]
    return pc.coalesce(pc.Layout(tuple(r_shape), tuple(r_stride)))


@_guarded
def left_inverse(layout):
    """C++'s left_inverse (layout.hpp): sort the coalesced modes by stride, skip stride-0 ones,
    and invert the rest; pycute's version via complement breaks on stride-0 modes."""
    c = pc.coalesce(layout)
    shape = c.shape if isinstance(c.shape, tuple) else (c.shape,)
    stride = c.stride if isinstance(c.stride, tuple) else (c.stride,)
    preprod = pc.prefix_product(shape)
    order = sorted(range(len(shape)), key=lambda k: stride[k])
    r_shape, r_stride = [], [0]
    for k in order:
        if stride[k] == 0:
            continue
        assert stride[k] % pc.product(tuple(r_shape)) == 0, "left inverse divisibility"
        r_shape.append(stride[k] // pc.product(tuple(r_shape)))
        r_stride.append(preprod[k])
    r_shape.append(shape[order[-1]])
    return pc.coalesce(pc.Layout(tuple(r_shape), tuple(r_stride)))


@_guarded
def composition(a, b):
    if isinstance(a, pc.ComposedLayout):
        return pc.ComposedLayout(a.layoutB, a.offset, composition(a.layoutA, b))
    b = _tiler(b)
    if isinstance(b, tuple):
        assert len(b) <= len(a), "tiler longer than the layout's rank"
        return _concat(composition(a[i], b[i]) if b[i] is not None else a[i] for i in range(len(b)))
    return pc.composition(_extendable(a), b)


def _extendable(a):
    """A with a trailing size-1 leaf widened to 2: the same function inside A's domain and past
    it, as C++'s coalesce_x keeps it (pycute's coalesce would drop the mode and its stride)."""
    shape, stride = pc.flatten(a.shape), pc.flatten(a.stride)
    if shape[-1] != 1:
        return a
    return pc.Layout(shape[:-1] + (2,), stride)


@_guarded
def complement(a, cotarget=None):
    if cotarget is None:
        cotarget = pc.cosize(pc.filter(a))
    ms = sorted((d, s) for s, d in zip(pc.flatten(a.shape), pc.flatten(a.stride)) if s != 1 and d != 0)
    end = 1
    for d, s in ms:
        assert d >= end, "Non-injective Layout detected in complement"
        end = d * s
    return pc.complement(a, pc.product(cotarget))


def _by_mode(op, a, b):
    b = _tiler(b)
    if isinstance(b, tuple):
        assert len(b) <= len(a), "tiler longer than the layout's rank"
        return _concat([op(a[i], b[i]) for i in range(len(b))] + _modes(a)[len(b):])
    return op(a, b)


@_guarded
def logical_divide(a, b):
    if isinstance(a, pc.ComposedLayout):
        return pc.ComposedLayout(a.layoutB, a.offset, logical_divide(a.layoutA, b))
    def one(x, t):
        if isinstance(t, tuple):
            return logical_divide(x, t)
        return composition(x, _concat([t, complement(t, pc.size(x))]))
    return _by_mode(one, a, b)


@_guarded
def logical_product(a, b):
    def one(x, t):
        if isinstance(t, tuple):
            return logical_product(x, t)
        return _concat([x, composition(complement(x, pc.size(x) * pc.cosize(t)), t)])
    return _by_mode(one, a, b)


def _unzip(op, a, b):
    b = _tiler(b)
    if not isinstance(b, tuple):
        return op(a, b)
    split = op(a, b)
    k = len(b)
    return _concat([_concat(split[i][0] for i in range(k)),
                    _concat([split[i][1] for i in range(k)] + _modes(split)[k:])])


def _sub_modes(layout):
    return _modes(layout) if isinstance(layout.shape, tuple) else [layout]


@_guarded
def zipped_divide(a, b):
    return _unzip(logical_divide, a, b)


@_guarded
def tiled_divide(a, b):
    z = zipped_divide(a, b)
    return _concat([z[0]] + _sub_modes(z[1]))


@_guarded
def flat_divide(a, b):
    z = zipped_divide(a, b)
    return _concat(_sub_modes(z[0]) + _sub_modes(z[1]))


@_guarded
def zipped_product(a, b):
    return _unzip(logical_product, a, b)


@_guarded
def tiled_product(a, b):
    z = zipped_product(a, b)
    return _concat([z[0]] + _sub_modes(z[1]))


def _pad(layout, r):
    return _concat(_modes(layout) + [pc.Layout(1, 0)] * (r - len(layout)))


def _rank_sensitive_product(block, tiler, raked):
    r = max(len(block), len(tiler))
    lp = logical_product(_pad(block, r), _pad(tiler, r))
    inner, outer = (lp[1], lp[0]) if raked else (lp[0], lp[1])
    return _concat(_concat([inner[i], outer[i]]) for i in range(r))


@_guarded
def blocked_product(block, tiler):
    return _rank_sensitive_product(block, tiler, raked=False)


@_guarded
def raked_product(block, tiler):
    return _rank_sensitive_product(block, tiler, raked=True)


def _product_each(shape):
    return tuple(pc.product(m) for m in shape) if isinstance(shape, tuple) else (shape,)


@_guarded
def tile_to_shape(block, trg_shape, order=None):
    trg = _product_each(trg_shape)
    r = len(trg)
    assert len(block) <= r, "rank of the block exceeds the target's"
    padded = _pad(block, r)
    blk = _product_each(padded.shape)
    assert all(t % b == 0 for t, b in zip(trg, blk)), "block shape does not divide the target shape"
    reps = tuple(t // b for t, b in zip(trg, blk))
    order = tuple(range(r)) if order is None else tuple(order)
    strides = [0] * r
    run = 1
    for k in sorted(range(r), key=lambda k: (order[k], k)):
        strides[k] = run
        run *= reps[k]
    return blocked_product(padded, pc.Layout(reps, tuple(strides)))


@_guarded
def upcast(layout, n):
    def leaf(s, d):
        if d == 0:
            return s, d
        assert d % n == 0 or n % d == 0, "upcast divisibility"
        return -(-s // -(-n // d)), -(-d // n)
    return _map_leaves(layout, leaf)


@_guarded
def downcast(layout, n):
    assert 1 in pc.flatten(layout.stride), "downcast requires a stride-1 mode"
    return _map_leaves(layout, lambda s, d: (s * n, d) if d == 1 else (s, d * n))


def _map_leaves(layout, f):
    pairs = [f(s, d) for s, d in zip(pc.flatten(layout.shape), pc.flatten(layout.stride))]
    k = iter(range(len(pairs)))

    def rebuild(t, which):
        return tuple(rebuild(m, which) for m in t) if isinstance(t, tuple) else pairs[next(k)][which]
    shape = rebuild(layout.shape, 0)
    k = iter(range(len(pairs)))
    return pc.Layout(shape, rebuild(layout.shape, 1))


@_guarded
def max_common_vector(a, b):
    common = pc.coalesce(composition(a, right_inverse(b)))
    first = common[0]
    return first.shape if first.stride == 1 else 1


@_guarded
def local_tile(layout, tiler, coord):
    z = zipped_divide(layout, tiler)
    return z[0], z[1](coord)


@_guarded
def local_partition(layout, tile, index):
    hier = pc.idx2crd(index, tile.shape, tile.stride)
    shp = tile.shape if isinstance(tile.shape, tuple) else (tile.shape,)
    hier = hier if isinstance(tile.shape, tuple) else (hier,)
    coord = tuple(pc.crd2idx(c, s) for c, s in zip(hier, shp))
    tiler = _product_each(tile.shape)
    z = zipped_divide(layout, tiler if len(tiler) > 1 else tiler[0])
    return z[1], z[0](coord if len(coord) > 1 else coord[0])


class Swizzle(pc.Swizzle):
    def __init__(self, bits, base, shift):
        if bits < 0 or base < 0 or abs(shift) < bits:
            raise LayoutError(f"Swizzle({bits},{base},{shift}): needs bits, base >= 0 and |shift| >= bits")
        super().__init__(bits, base, shift)


def ComposedLayout(swizzle, offset, layout):  # noqa: N802 - mirrors the class name
    return pc.ComposedLayout(swizzle, offset, layout)


@_guarded
def make_layout_tv(thr_layout, val_layout):
    layout_mn = raked_product(thr_layout, val_layout)
    tmp = pc.Layout((pc.size(thr_layout), pc.size(val_layout)))
    layout_tv = pc.composition(pc.right_inverse(layout_mn), tmp)
    return _product_each(layout_mn.shape), layout_tv


def symbol(name, divisible_by=1):
    raise NotImplementedError("pycute has no symbolic layouts")


__all__ = [n for n in dir() if not n.startswith("_") and n not in {"annotations", "functools", "pc", "prod"}]
