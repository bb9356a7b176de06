"""Static bounds: what tracing proves about indices, views and index widths, from the declared
facts of the kernel's integers, in closed form (never by enumerating a layout's elements).

Each runtime symbol has a range: the thread index 0..32*num_warps-1 (inside a warp role, the
role's threads), a block index below the grid's limit (2**31-1 along x, 65535 along y and z),
an integer parameter its type's range (narrowed by its specialization facts: an extent known
positive, or a multiple of 16), a loop index its `lk.range` bounds, an `lk.index_value` the
range its author states (else its type's); inside an `lk.if_` whose
condition compares a symbol with an integer (`i < 32`, `lk.thread_id() >= 64`, several joined
with `&`), the rules below take the symbol's range narrowed by it. `facts.interval` carries
these through sums, products, floor and Mod. A rule is then proven (nothing said),
refuted (`TraceError`: some value provably breaks it) or undecided (`BoundsWarning` at the
user's line, saying what could not be proven and the range that was found) - never silently
assumed.

The rules checked here:
- an index of a slice, and a tile's coordinate, lie inside their mode;
- every view of a shared buffer (slice, tile, re-layout) lies inside the buffer: its reach
  `offset + cosize(layout) - 1` (strides are >= 0) stays below the buffer's elements;
- a TV layout maps every (thread, value) into its tile;
- a bounds check runs in 32 bits only when its bound and its symbols fit in 32 bits (else 64).
"""
from __future__ import annotations

import warnings
import weakref

from layoutkit.algebra import cosize, less, less_equal
from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx.launch import MAX_GRID

from .arguments import INT_RANGE
from .errors import TraceError, here
from .facts import interval, sign_range
from .sync_trace import WARP_THREADS, current_role
from .tracer import current
from .types import i32

I32_MIN, I32_MAX = INT_RANGE["i32"]


class BoundsWarning(UserWarning):
    """A bounds rule that tracing could neither prove nor refute from the declared facts; the
    message names the rule, the expression and the range found for it."""


# ---- symbol ranges ------------------------------------------------------------------------
_RANGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


_FACTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def add_fact(trace, expr, lo: int | None, hi: int | None) -> None:
    """Record that the integer expression `expr` (of parameters) lies in lo..hi for every launch
    (lk.assume): a symbol's range narrows, a compound expression's range applies wherever its
    terms appear (facts.interval's hints)."""
    facts = _FACTS.setdefault(trace, {})
    facts[expr] = _intersect(facts.get(expr, (None, None)), (lo, hi))
    _RANGES.pop(trace, None)            # ranges found before the fact are stale


class SymbolRanges:
    """symbol -> (lo, hi) (None for an unknown end) over a trace's symbols, with `hints`: the
    ranges lk.assume gave compound expressions (facts.interval applies them)."""

    def __init__(self, trace, cache: dict, hints: dict):
        self.trace, self.cache, self.hints = trace, cache, hints
        self.tid = trace.specials.get(("thread_idx", 0))

    def __call__(self, sym):
        if sym == self.tid:               # inside a warp role: the role's threads
            role = current_role(self.trace)
            if role is not None:
                first = 4 * WARP_THREADS * role.first
                return first, first + role.threads - 1
        found = self.cache.get(sym)
        if found is None:
            found = _symbol_range(self.trace, sym, self)
            fact = self.hints.get(sym)
            if fact is not None:
                found = _intersect(found, fact)
            self.cache[sym] = found
        return found


def ranges_of(trace):
    """A function symbol -> (lo, hi) (None for an unknown end) over `trace`'s symbols (with no
    trace, outside a kernel: what the symbols' assumptions say)."""
    if trace is None:
        return sign_range
    cache = _RANGES.get(trace)
    if cache is None:
        cache = _RANGES[trace] = {}
    return SymbolRanges(trace, cache, _FACTS.get(trace, {}))


def _type_range(sym, value) -> tuple:
    lo, hi = INT_RANGE.get(getattr(value.type, "name", None), (None, None))
    divisor = getattr(sym, "divisor", None)
    if sym.is_positive:
        lo = 1 if lo is None else max(lo, 1)
    elif sym.is_nonnegative:
        lo = 0 if lo is None else max(lo, 0)
    if divisor and divisor > 1:
        lo = divisor if lo is None else max(lo, divisor)
        hi = None if hi is None else hi // divisor * divisor
    return lo, hi


def _symbol_range(trace, sym, rng) -> tuple:
    for (kind, axis), special in trace.specials.items():
        if special == sym:
            return (0, WARP_THREADS * trace.fn.num_warps - 1) if kind == "thread_idx" else \
                (0, MAX_GRID[axis] - 1)
    value = trace.symbols.get(sym)
    if value is None:
        return sign_range(sym)
    fallback = _type_range(sym, value)
    try:
        found = _defined_range(trace, value, rng)
    except (AttributeError, IndexError, KeyError, TypeError):   # an IR shape not known here
        found = None
    if found is None:
        return fallback
    lo = found[0] if fallback[0] is None or found[0] is not None and found[0] > fallback[0] \
        else fallback[0]
    hi = found[1] if fallback[1] is None or found[1] is not None and found[1] < fallback[1] \
        else fallback[1]
    return lo, hi


def _defined_range(trace, value, rng):
    """The range of `value` from the op that defines it in an open block: a loop's induction
    variable (its bounds) or an `index` op (its expression, e.g. a warp role's thread index)."""
    blocks = trace.blocks
    for depth in range(len(blocks) - 1, -1, -1):
        block = blocks[depth]
        if depth > 0 and block.args and block.args[0] is value:
            owner = blocks[depth - 1].ops[-1]
            if owner.name != "for":
                return None
            start, stop, step = (_expr_of(blocks[:depth], v) for v in owner.operands[:3])
            if start is None or stop is None or not isinstance(step, int):
                return None
            if step > 0:
                lo, hi = interval(start, rng)[0], interval(stop, rng)[1]
                return lo, None if hi is None else hi - 1
            lo, hi = interval(stop, rng)[0], interval(start, rng)[1]
            return None if lo is None else lo + 1, hi
        for op in block.ops:
            if op.name == "index" and op.results and op.results[0] is value:
                return interval(op.attrs["expr"], rng)
            if op.name == "index_value" and op.results[0] is value:   # the author's range
                return op.attrs["lo"], op.attrs["hi"]
    return None


def _expr_of(blocks, value):
    """The integer expression an `index` or `const` op of `blocks` (innermost first) gave
    `value`, or None."""
    for block in reversed(blocks):
        for op in reversed(block.ops):
            if op.results and op.results[0] is value:
                if op.name == "index":
                    return op.attrs["expr"]
                if op.name == "const" and type(op.attrs["value"]) is int:
                    return op.attrs["value"]
                return None
    return None


def value_range(trace, expr) -> tuple:
    """(lo, hi) of the integer expression over the trace's symbol ranges (None: unknown)."""
    if type(expr) is int:
        return expr, expr
    return interval(expr, ranges_of(trace))


# ---- what the enclosing lk.if_ conditions say --------------------------------------------
_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}


def _branch_facts(trace) -> dict:
    """symbol -> (lo, hi) (None: that end not narrowed) that the conditions of the lk.if_
    regions open here imply: a comparison of a symbol with an integer, or several joined with
    `&` (a condition built otherwise implies nothing here)."""
    facts: dict = {}
    blocks = trace.blocks if trace is not None else ()
    for depth in range(1, len(blocks)):
        owner = blocks[depth - 1].ops[-1] if blocks[depth - 1].ops else None
        if owner is not None and owner.name == "if" and owner.blocks[0] is blocks[depth]:
            _implied(blocks[:depth], owner.operands[0], facts)
    return facts


def _implied(blocks, value, facts: dict) -> None:
    op = _defining_op(blocks, value)
    if op is None:
        return
    if op.name == "logic" and op.attrs.get("kind") == "and":
        for operand in op.operands:
            _implied(blocks, operand, facts)
        return
    kind = op.attrs.get("kind")
    if op.name != "cmp" or kind not in _FLIPPED:
        return
    lhs, rhs = (_expr_of(blocks, v) for v in op.operands)
    if isinstance(rhs, sympy.Symbol) and isinstance(lhs, (int, sympy.Integer)):
        lhs, rhs, kind = rhs, lhs, _FLIPPED[kind]
    if not isinstance(lhs, sympy.Symbol) or not isinstance(rhs, (int, sympy.Integer)):
        return
    c = int(rhs)
    lo, hi = {"lt": (None, c - 1), "le": (None, c), "gt": (c + 1, None), "ge": (c, None),
              "eq": (c, c)}[kind]
    facts[lhs] = _intersect(facts.get(lhs, (None, None)), (lo, hi))


def _intersect(a: tuple, b: tuple) -> tuple:
    lo = a[0] if b[0] is None or a[0] is not None and a[0] >= b[0] else b[0]
    hi = a[1] if b[1] is None or a[1] is not None and a[1] <= b[1] else b[1]
    return lo, hi


def _defining_op(blocks, value):
    """The op of `blocks` (innermost first) whose result is `value`, or None."""
    for block in reversed(blocks):
        for op in reversed(block.ops):
            if value in op.results:
                return op
    return None


def _branch_range(trace, expr) -> tuple:
    """value_range with the symbols narrowed by the enclosing lk.if_ conditions (a symbol whose
    narrowed range would be empty, a branch that never runs, keeps its own)."""
    if type(expr) is int:
        return expr, expr
    facts = _branch_facts(trace)
    rng = ranges_of(trace)
    if not facts:
        return interval(expr, rng)

    def narrowed(sym):
        own = rng(sym)
        fact = facts.get(sym)
        if fact is None:
            return own
        lo, hi = _intersect(own, fact)
        return own if lo is not None and hi is not None and lo > hi else (lo, hi)
    return interval(expr, narrowed)


def show_range(lo, hi) -> str:
    return f"{'-inf' if lo is None else lo}..{'inf' if hi is None else hi}"


# ---- deciding a rule ----------------------------------------------------------------------
def within(trace, expr, lo: int, hi: int) -> tuple[bool | None, tuple]:
    """(True: lo <= expr <= hi for every value of the symbols, False: for none, None: not
    decided; the range found for expr)."""
    if type(expr) is int or isinstance(expr, sympy.Integer):
        v = int(expr)
        return lo <= v <= hi, (v, v)
    e_lo, e_hi = _branch_range(trace, expr)
    if e_lo is not None and e_hi is not None and lo <= e_lo and e_hi <= hi:
        return True, (e_lo, e_hi)
    if e_lo is not None and e_lo > hi or e_hi is not None and e_hi < lo:
        return False, (e_lo, e_hi)
    # the algebra's prover knows facts the ranges do not (an extent's divisibility)
    above, below = less_equal(lo, expr), less_equal(expr, hi)
    if above is True and below is True:
        return True, (e_lo, e_hi)
    if above is False or below is False:
        return False, (e_lo, e_hi)
    attained = _attained(trace, expr)
    if attained is not None and (attained[0] < lo or attained[1] > hi):
        return False, attained
    return None, (e_lo, e_hi)


def _attained(trace, expr):
    """(lowest, highest) value `expr` certainly takes here, or None: an affine function a*i + b
    of one loop index i whose lk.range has constant bounds and whose every iteration reaches
    this point (no lk.if_ opened inside the loop above it)."""
    expr = sympy.sympify(expr)
    if trace is None or len(expr.free_symbols) != 1:
        return None
    (sym,) = expr.free_symbols
    a, b = expr.as_independent(sym, as_Add=True)[1].as_coeff_Mul()[0], expr.subs(sym, 0)
    if not (a.is_Integer and b.is_Integer and sympy.expand(expr - a * sym - b) == 0):
        return None
    first_last = _constant_loop(trace, trace.symbols.get(sym))
    if first_last is None:
        return None
    ends = sorted(int(a) * v + int(b) for v in first_last)
    return ends[0], ends[1]


def _constant_loop(trace, value):
    """(first, last) index of the open lk.range whose induction variable is `value`, when its
    bounds are constants, it runs at least once and no lk.if_ lies between its body and here."""
    blocks = trace.blocks
    for depth in range(len(blocks) - 1, 0, -1):
        owner = blocks[depth - 1].ops[-1]
        if owner.name == "for" and blocks[depth].args and blocks[depth].args[0] is value:
            bounds = [_expr_of(blocks[:depth], v) for v in owner.operands[:3]]
            if not all(isinstance(x, (int, sympy.Integer)) for x in bounds):
                return None
            steps = range(*(int(x) for x in bounds))
            return (steps[0], steps[-1]) if steps else None
        if owner.name != "for":            # an lk.if_ (or another region) in between
            return None
    return None


def undecided(message: str) -> None:
    """Warn (BoundsWarning) at the user's current line that `message` could not be proven."""
    location = here()
    warnings.warn_explicit(BoundsWarning(message), BoundsWarning,
                           location.file if location else "<kernel>",
                           location.line if location else 0)


def require_within(trace, expr, lo: int, hi: int, refuted, unproven) -> None:
    """Raise TraceError(refuted(range)) when expr provably leaves lo..hi, warn
    unproven(range) when that is not decided, return when it provably stays inside."""
    ok, found = within(trace, expr, lo, hi)
    if ok is False:
        raise TraceError(refuted(found))
    if ok is None:
        undecided(unproven(found))


# ---- layouts ------------------------------------------------------------------------------
def leaves(t) -> list:
    """The leaves of a nested int tuple, in order."""
    out, stack = [], [t]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out


def negative_stride(layout):
    """(position, stride) of the first stride of `layout` that is provably negative or not
    provably >= 0 (a symbolic one), else None."""
    for position, d in enumerate(leaves(layout.stride)):
        if type(d) is int:
            if d < 0:
                return position, d
        elif not sympy.sympify(d).is_nonnegative and less(-1, d) is not True:
            return position, d
    return None


def extremes(layout) -> tuple:
    """(lowest, highest) index `layout` produces (closed form: each leaf at 0 or its extent - 1
    by the sign of its stride) and the flat coordinates attaining them, for int layouts."""
    shapes, strides = leaves(layout.shape), leaves(layout.stride)
    lo = hi = 0
    lo_at, hi_at = [], []
    for s, d in zip(shapes, strides):
        lo += (s - 1) * min(d, 0)
        hi += (s - 1) * max(d, 0)
        lo_at.append(s - 1 if d < 0 else 0)
        hi_at.append(s - 1 if d > 0 else 0)
    return lo, hi, lo_at, hi_at


def _mode_index(layout_mode, leaf_coords) -> int:
    """The colexicographic index of leaf coordinates within one mode."""
    index, scale = 0, 1
    for s, c in zip(leaves(layout_mode.shape), leaf_coords):
        index += c * scale
        scale *= s
    return index


def check_tv(tv) -> None:
    """A TV layout maps every (thread, value) inside its tile: its indices lie in
    0..size(tile)-1 (closed form over the layout's strides). Made inside a kernel, one that
    does not is a TraceError at that line; made outside any kernel (at import, in a notebook)
    it keeps the error and raises it where a kernel uses it (`require_tv`), so defining a
    layout never fails an import."""
    layout, tile = tv.layout, tv.tile
    shapes = leaves(layout.shape)
    if not all(type(x) is int for x in shapes + leaves(layout.stride) + list(tile)):
        return _check_tv_symbolic(tv)
    elements = 1
    for t in tile:
        elements *= t
    lo, hi, lo_at, hi_at = extremes(layout)
    if 0 <= lo and hi < elements:
        return
    index, at = (lo, lo_at) if lo < 0 else (hi, hi_at)
    n_thr = len(leaves(layout[0].shape))
    thread, value = _mode_index(layout[0], at[:n_thr]), _mode_index(layout[1], at[n_thr:])
    message = (f"the TV layout {tv} maps (thread {thread}, value {value}) to tile index "
               f"{index}, outside its tile of {elements} elements (0..{elements - 1}); a TV "
               "layout maps every (thread, value) into its tile")
    if active_trace() is not None:
        raise TraceError(message)
    object.__setattr__(tv, "_outside", message)


def require_tv(tv) -> None:
    """Raise the error of a TV layout made outside a kernel that maps outside its tile, now
    that a kernel uses it (at the using line)."""
    message = getattr(tv, "_outside", None)
    if message is not None:
        raise TraceError(message)


def active_trace():
    """The active trace, or None outside a kernel."""
    try:
        return current()
    except TraceError:
        return None


def _check_tv_symbolic(tv) -> None:
    where = negative_stride(tv.layout)
    if where is not None:
        raise TraceError(f"the TV layout {tv} has the stride {where[1]} (leaf {where[0]}), not "
                         "provably >= 0; a TV layout's strides are >= 0")
    elements = 1
    for t in tv.tile:
        elements = elements * t
    fits = less_equal(cosize(tv.layout), elements)
    if fits is False:
        raise TraceError(f"the TV layout {tv} reaches tile index {cosize(tv.layout) - 1}, "
                         f"outside its tile of {elements} elements; a TV layout maps every "
                         "(thread, value) into its tile")
    if fits is None:
        undecided(f"the TV layout {tv}: could not prove that its largest tile index "
                  f"{cosize(tv.layout) - 1} is below the tile's {elements} elements")


# ---- index widths -------------------------------------------------------------------------
def needs_64_bits(trace, coordinate, bound) -> bool:
    """Whether the bounds check `coordinate < bound` must run in 64 bits: a symbol of either is
    not an i32 value (an lk.i64 or lk.u32 parameter, a 64-bit loop index), a constant does not
    fit i32, or the bound's range is not provably inside i32 (an extent such as M*K of two i32
    parameters). The coordinate of an element is taken to fit when the bound does: a tile's
    origin (block_id * tile) stays below the extent plus one tile when the grid covers it."""
    for expr in (coordinate, bound):
        if type(expr) is int:
            if not I32_MIN <= expr <= I32_MAX:
                return True
            continue
        expr = sympy.sympify(expr)
        for s in expr.free_symbols:
            value = trace.symbols.get(s)
            if value is not None and value.type != i32:
                return True
    lo, hi = value_range(trace, bound)      # the bound's value must fit, not just its parts
    return lo is None or hi is None or lo < I32_MIN or hi > I32_MAX


__all__ = ["BoundsWarning", "add_fact", "ranges_of", "value_range", "within", "require_within",
           "undecided", "negative_stride", "extremes", "check_tv", "require_tv", "active_trace",
           "needs_64_bits", "leaves", "show_range"]
