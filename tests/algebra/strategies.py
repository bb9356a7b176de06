"""Hypothesis strategies and brute-force reference helpers for the layout-algebra property tests.

Everything here works on plain nested tuples of Python ints, so the same (shape, stride) pairs can
be fed to layoutkit.algebra and to pycute. Sizes stay small (size <= 256) so every property is
checked over the whole domain. Leaves are drawn from small integer ranges and structure from
booleans, so failing examples shrink to short, readable layouts.

The admissibility oracles (`composition_admissible`, `complement_admissible`) state CuTe's
divisibility conditions (docs/cpp/cute/02_layout_algebra.md, include/cute/layout.hpp): they decide
whether an op must succeed or must raise LayoutError; they never compute the op's result.
"""
from __future__ import annotations

from math import prod

from hypothesis import strategies as st

MAX_SIZE = 256


# ----------------------------------------------------------------------------- nested int tuples

def flat(t):
    """The leaves of a nested tuple (an int is its own single leaf), left to right."""
    if isinstance(t, tuple):
        return tuple(x for m in t for x in flat(m))
    return (t,)


def size_of(shape) -> int:
    return prod(flat(shape))


def modes(shape) -> tuple:
    """The top-level modes of a shape (an int shape has the single mode itself)."""
    return shape if isinstance(shape, tuple) else (shape,)


def refines(fine, coarse) -> bool:
    """True when `fine` has `coarse`'s profile, with each leaf of `coarse` split into a sub-shape
    of the same size (CuTe's `compatible(coarse, fine)` up to size-1 padding)."""
    if isinstance(coarse, tuple):
        return (isinstance(fine, tuple) and len(fine) == len(coarse)
                and all(refines(f, c) for f, c in zip(fine, coarse)))
    return size_of(fine) == coarse


def colex_coord(i: int, shape):
    """The natural (colexicographic) coordinate of flat index i in `shape`; the last leaf is not
    reduced, so indices past the end extend the last mode as CuTe's idx2crd does."""
    if not isinstance(shape, tuple):
        return i
    out = []
    for k, m in enumerate(shape):
        n = size_of(m)
        if k == len(shape) - 1:
            out.append(colex_coord(i, m))
        else:
            out.append(colex_coord(i % n, m))
            i //= n
    return tuple(out)


def value_at(shape, stride, i: int) -> int:
    """CuTe's layout function on a flat index: the inner product of i's colex coordinate with
    the strides, the last mode extended past the domain (needed for compositions that spill)."""
    crd = colex_coord(i, shape)
    return sum(c * d for c, d in zip(flat(crd), flat(stride)))


def coalesced_modes(shape, stride) -> list[tuple[int, int]]:
    """Flat (extent, stride) modes after CuTe's coalesce: size-1 modes dropped, a mode merged into
    the previous one when prev_extent * prev_stride == stride. Same function on the domain."""
    out: list[list[int]] = []
    for s, d in zip(flat(shape), flat(stride)):
        if s == 1:
            continue
        if out and out[-1][0] * out[-1][1] == d:
            out[-1][0] *= s
        else:
            out.append([s, d])
    return [tuple(m) for m in out] or [(1, 0)]


# ----------------------------------------------------------------------------- admissibility oracles

def composition_admissible(a_shape, a_stride, b_shape, b_stride) -> bool:
    """CuTe's conditions for A o B, per leaf s:d of B against A coalesced to (a_0..a_n):
    stride divisibility -- dividing d out of a_0, a_1, ... needs rest_d % a_k == 0 or
    a_k % rest_d == 0 for every k < n; shape divisibility -- modding s out needs the kept extent
    to divide the remaining s. The last mode of A is unbounded and imposes nothing. Leaves with
    s == 1 or d == 0 are always admissible (a single point / a broadcast). A is coalesced as C++'s
    coalesce_x does: a trailing size-1 leaf keeps its stride as the unbounded last mode."""
    a_leaves = flat(a_shape)
    if a_leaves[-1] == 1:
        a_shape, a_stride = a_leaves[:-1] + (2,), flat(a_stride)
    a_modes = coalesced_modes(a_shape, a_stride)
    for s, d in zip(flat(b_shape), flat(b_stride)):
        if s == 1 or d == 0 or len(a_modes) == 1:
            continue
        rest_shape, rest_stride = s, d
        for a, _ in a_modes[:-1]:
            if rest_stride % a == 0:
                rest_stride //= a
                continue
            if a % rest_stride != 0:
                return False
            kept = a // rest_stride
            rest_stride = 1
            if rest_shape > 1:
                new = min(kept, rest_shape)
                if rest_shape % new != 0:
                    return False
                rest_shape //= new
    return True


def complement_admissible(shape, stride) -> bool:
    """CuTe's complement precondition: after dropping size-1 and stride-0 modes and sorting by
    stride, each stride is at least the previous mode's extent*stride (otherwise the C++
    complement detects a non-injective layout and refuses)."""
    ms = sorted((d, s) for s, d in zip(flat(shape), flat(stride)) if s != 1 and d != 0)
    end = 1
    for d, s in ms:
        if d < end:
            return False
        end = d * s
    return True


def complement_exact(shape, stride) -> bool:
    """Admissible and each sorted stride divisible by the previous end: then (A, complement(A))
    tiles its codomain exactly (a bijection onto [0, cosize))."""
    ms = sorted((d, s) for s, d in zip(flat(shape), flat(stride)) if s != 1 and d != 0)
    end = 1
    for d, s in ms:
        if d % end != 0:
            return False
        end = d * s
    return True


def complement_end(shape, stride) -> int:
    """The extent*stride of the largest-stride mode: where the complement's repeat mode starts."""
    ms = sorted((d, s) for s, d in zip(flat(shape), flat(stride)) if s != 1 and d != 0)
    return ms[-1][0] * ms[-1][1] if ms else 1


def is_injective(shape, stride) -> bool:
    n = size_of(shape)
    return len({value_at(shape, stride, i) for i in range(n)}) == n


# ----------------------------------------------------------------------------- shapes and strides

@st.composite
def shapes(draw, max_depth: int = 3, max_size: int = MAX_SIZE, max_rank: int = 3, max_leaf: int = 8):
    """A nested shape of depth <= max_depth and size <= max_size with leaves in [1, max_leaf]."""
    budget = [max_size]

    def build(depth):
        if depth == 0 or not draw(st.booleans()):
            leaf = draw(st.integers(1, max(1, min(max_leaf, budget[0]))))
            budget[0] //= leaf
            return leaf
        return tuple(build(depth - 1) for _ in range(draw(st.integers(1, max_rank))))

    return build(max_depth)


def congruent(shape, leaves):
    """A tuple with `shape`'s profile whose leaves are taken in order from `leaves`."""
    it = iter(leaves)

    def build(s):
        return tuple(build(m) for m in s) if isinstance(s, tuple) else next(it)

    return build(shape)


@st.composite
def layouts(draw, max_stride: int = 12, **shape_kw):
    """An arbitrary (shape, stride) pair: strides in [0, max_stride], so 0 strides and
    non-injective layouts are common."""
    shape = draw(shapes(**shape_kw))
    strides = draw(st.lists(st.integers(0, max_stride), min_size=len(flat(shape)),
                            max_size=len(flat(shape))))
    return shape, congruent(shape, strides)


@st.composite
def compact_layouts(draw, gaps: bool = True, extras: bool = False, **shape_kw):
    """An injective (shape, stride) pair: the leaves in a drawn order get strides that are
    running products, each optionally dilated by a factor 1..3 (gaps). With `extras`, some leaves
    get stride 0 (the layout stops being injective but stays complement-admissible)."""
    shape = draw(shapes(**shape_kw))
    leaves = flat(shape)
    order = draw(st.permutations(range(len(leaves))))
    strides = [0] * len(leaves)
    end = 1
    for k in order:
        end *= draw(st.integers(1, 3)) if gaps else 1
        strides[k] = end
        end *= leaves[k]
    if extras:
        for k in range(len(leaves)):
            if draw(st.integers(0, 4)) == 0:
                strides[k] = 0
    return shape, congruent(shape, strides)


def _factorizations(n: int):
    """Ordered factorizations of n into factors > 1 (n == 1 gives the empty one)."""
    if n == 1:
        return [()]
    out = []
    for f in range(2, n + 1):
        if n % f == 0:
            out += [(f,) + rest for rest in _factorizations(n // f)]
    return out


@st.composite
def digits_of(draw, shape, stride):
    """A refinement of A's coalesced extents into ordered factors ("digits") with their
    prefix-product offsets: every contiguous run of digits is an admissible sub-layout of A."""
    digits = []
    offset = 1
    if flat(shape)[-1] == 1:  # C++ coalesce_x: the trailing size-1 leaf stays as the last mode
        shape, stride = flat(shape)[:-1] + (2,), flat(stride)
    for s, _ in coalesced_modes(shape, stride):
        for f in draw(st.sampled_from(_factorizations(s))):
            digits.append((f, offset))
            offset *= f
    return digits


@st.composite
def admissible_right_operands(draw, a_shape, a_stride, injective: bool = False,
                              max_leaves: int = 3):
    """A layout B = (shape, stride) built from disjoint contiguous runs of A's digits in any order
    (plus, unless `injective`, stride-0 broadcasts and size-1 modes), nested by a drawn shape.
    A o B satisfies CuTe's divisibility conditions, and since B's leaves address disjoint digits
    of A, A o B is function composition (CuTe composes leaf by leaf, so overlapping leaves would
    carry differently)."""
    digits = draw(digits_of(a_shape, a_stride))
    leaves = []
    used = set()
    for _ in range(draw(st.integers(1, max_leaves))):
        kind = draw(st.integers(0, 5)) if not injective else 0
        if kind == 4:
            leaves.append((draw(st.integers(1, 4)), 0))
            continue
        if kind == 5 or not digits:
            leaves.append((1, draw(st.sampled_from([0, 1]))))
            continue
        lo = draw(st.integers(0, len(digits) - 1))
        hi = draw(st.integers(lo, min(len(digits) - 1, lo + 2)))
        span = set(range(lo, hi + 1))
        if span & used:
            continue
        used |= span
        leaves.append((prod(digits[k][0] for k in span), digits[lo][1]))
    if not leaves:
        leaves.append((1, 0))
    group = draw(st.sampled_from(["flat", "nested"])) if len(leaves) > 1 else "flat"
    if len(leaves) == 1:
        return leaves[0]
    if group == "flat":
        return tuple(s for s, _ in leaves), tuple(d for _, d in leaves)
    cut = draw(st.integers(1, len(leaves) - 1))
    shp = (tuple(s for s, _ in leaves[:cut]), tuple(s for s, _ in leaves[cut:]))
    std = (tuple(d for _, d in leaves[:cut]), tuple(d for _, d in leaves[cut:]))
    return shp, std


@st.composite
def composition_cases(draw, admissible: bool | None = True):
    """(A, B) pairs. admissible=True: B from A's digits; False: CuTe's conditions fail (found
    among small random B); None: either."""
    a = draw(layouts(max_size=64))
    if admissible is True or (admissible is None and draw(st.booleans())):
        return a, draw(admissible_right_operands(*a))
    b_shape, b_stride = draw(layouts(max_size=32, max_depth=2, max_stride=9))
    # A size-1 leaf with a non-zero stride is a don't-care: C++'s weak check passes it, pycute's
    # strong check may not, and it maps only 0 anyway.
    b = b_shape, congruent(b_shape, [0 if s == 1 else d for s, d in zip(flat(b_shape), flat(b_stride))])
    if admissible is False:
        from hypothesis import assume
        assume(not composition_admissible(*a, *b))
    return a, b


@st.composite
def by_mode_tilers(draw, a_shape, a_stride, injective: bool = True):
    """A tuple of per-mode tilers for A (length 1..rank(A)), each a layout admissible for that
    mode of A, or an int extent dividing the mode's first digit run (a shape tiler)."""
    a_modes = list(zip(modes(a_shape), modes(a_stride)))
    k = draw(st.integers(1, len(a_modes)))
    out = []
    for s, d in a_modes[:k]:
        b = draw(admissible_right_operands(s, d, injective=injective, max_leaves=2))
        if draw(st.integers(0, 3)) == 0:
            digits = draw(digits_of(s, d))
            out.append(digits[0][0] if digits else 1)
        else:
            out.append(b)
    return tuple(out)


@st.composite
def swizzles(draw):
    """Valid Swizzle(bits, base, shift) parameters: |shift| >= bits."""
    bits = draw(st.integers(0, 3))
    base = draw(st.integers(0, 3))
    shift = draw(st.integers(bits, 4)) * draw(st.sampled_from([1, -1]))
    return bits, base, shift


# ----------------------------------------------------------------------------- checks on built layouts

def settings_for(max_examples: int):
    """Hypothesis settings for one property: whole-domain checks are slow-ish, so no deadline."""
    from hypothesis import HealthCheck, settings
    return settings(max_examples=max_examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


def build(la, pair):
    """The algebra's Layout for a (shape, stride) pair."""
    return la.Layout(*pair)


def concat(la, *layouts):
    """The layout whose modes are `layouts` (CuTe's make_layout(L0, L1, ...))."""
    return la.Layout(tuple(l.shape for l in layouts), tuple(l.stride for l in layouts))


def values(la, layout) -> list[int]:
    """The layout's function on its whole domain, by flat index."""
    return [layout(i) for i in range(la.size(layout))]


def assert_same_function(la, got, want, what: str = ""):
    """got and want have the same size and agree on every flat index of the domain."""
    assert la.size(got) == la.size(want), f"{what}: size {la.size(got)} != {la.size(want)} ({got} vs {want})"
    for i in range(la.size(want)):
        assert got(i) == want(i), f"{what}: at {i}: {got(i)} != {want(i)} ({got} vs {want})"


def top_modes(la, layout) -> list:
    """The top-level modes of a layout (a rank-1 layout with an int shape is its own mode)."""
    return [layout[i] for i in range(la.rank(layout))] if isinstance(layout.shape, tuple) else [layout]
