"""The tracing context: the IR being built, the open blocks, and the runtime symbols.

Integers inside a kernel are sympy expressions: integer parameters, `thread_id()`,
`block_id(axis)` and loop induction variables are symbols bound to IR values, so layouts over
them stay symbolic; `Trace.index(expr)` turns an expression into an `index` op when a runtime
value is needed (the lowering shares common subexpressions). One trace is active at a time per
thread of the Python program (a ContextVar), only while a kernel is being traced.
"""
from __future__ import annotations

import contextlib
import contextvars

from layoutkit.algebra.sympy_gate import deferred_module, sympy
from layoutkit.ptx.isa.warp import WARP_SIZE

from .errors import TraceError, here
from .facts import integer_by_form
from .scoping import escaped
from .ir import Block, Function, Op, Value
from .opdef import SM90A, definition
from .types import DType, i32, i64, u32

symbolic = deferred_module("layoutkit.algebra.symbolic")   # (sympy: at a trace, not at import)

_ACTIVE: contextvars.ContextVar["Trace | None"] = contextvars.ContextVar("layoutkit_trace",
                                                                        default=None)


class Trace:
    """The state of one kernel trace (see the module docstring)."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.blocks: list[Block] = [fn.body]
        self.memo: list[dict] = [{}]
        self.symbols: dict[sympy.Symbol, Value] = {}
        self.specials: dict[tuple[str, int], sympy.Symbol] = {}
        self.wide: set[sympy.Symbol] = set()   # symbols bound to i64 or u32 values
        self._loop_count = 0
        # scoping (checked as each op is emitted): value id -> (its block, its op or None for a
        # block argument); the ids of the blocks open now; block id -> the op owning it
        self.home: dict[int, tuple[Block, Op | None]] = {}
        self.open: set[int] = {id(fn.body)}
        self.owner: dict[int, Op] = {}

    # ---- building -------------------------------------------------------------------------
    def emit(self, name: str, operands=(), result_types=(), attrs=None, blocks=(),
             location=None) -> tuple[Value, ...]:
        target = getattr(self.fn, "target", SM90A)
        defn = definition(name)
        if target not in defn.targets:
            raise TraceError(f"IR op '{defn.name}' exists on {', '.join(sorted(defn.targets))}; "
                             f"this kernel's target is {target!r} (@lk.kernel(target=...)): "
                             "use the op on a kernel of its target, or a form the target has",
                             location)
        for v in operands:
            home = self.home.get(v.id)
            if home is not None and id(home[0]) not in self.open:
                raise escaped(self, v, home, name, attrs, location)
        results = tuple(self.fn.new_value(t) for t in result_types)
        op = Op(name, tuple(operands), results, dict(attrs or {}), tuple(blocks),
                location if location is not None else here())
        block = self.blocks[-1]
        block.ops.append(op)
        for r in results:
            self.home[r.id] = (block, op)
        return results

    def hidden_param(self, name: str, vtype, resolve, what: str) -> Value:
        """A kernel parameter the user did not write (a tensor map, an error buffer), declared
        after the user's parameters; `resolve(args)` gives its launch value from the kernel's
        bound arguments (all of them, in signature order). One per `name`."""
        for op in self.fn.params:
            if op.attrs["name"] == name:
                return op.results[0]
        value = self.fn.new_value(vtype)
        self.fn.params.append(Op("param", (), (value,), {"name": name, "index": None,
                                                         "resolve": resolve, "what": what},
                                 (), here()))
        return value

    @contextlib.contextmanager
    def block(self, block: Block):
        """Emit into `block` (a region of an op) inside the `with`; its values (and arguments)
        are visible there only."""
        parent = self.blocks[-1]
        if parent.ops and id(block) not in self.owner:
            self.owner[id(block)] = parent.ops[-1]
        for arg in block.args:
            self.home.setdefault(arg.id, (block, None))
        self.blocks.append(block)
        self.memo.append({})
        self.open.add(id(block))
        try:
            yield block
        finally:
            self.open.discard(id(block))
            self.blocks.pop()
            self.memo.pop()

    def thread_dependent(self, expr) -> bool:
        """Whether the integer expression `expr` mentions a thread index."""
        tids = {s for (kind, _), s in self.specials.items() if kind == "thread_idx"}
        return bool(sympy.sympify(expr).free_symbols & tids)

    def require_uniform(self, what: str, cluster: bool = False) -> None:
        """Raise unless every thread of the block (with `cluster`, of the cluster) reaches this
        point: not inside an lk.range whose bounds depend on the thread, nor inside an lk.if_
        whose condition may differ between the block's threads (with `cluster`, inside no
        lk.if_ at all: its CTAs may disagree). bar.sync and shfl.sync over the full warp must
        be executed by all participating threads, else they hang or are undefined: PTX ISA
        "bar", "shfl.sync"."""
        for parent in self.blocks[:-1]:
            owner = parent.ops[-1]
            if owner.name == "if" and not cluster and self.block_uniform(owner.operands[0]):
                continue
            if owner.name == "if" or (owner.name == "for" and owner.attrs.get("thread_dependent")):
                kind = "lk.if_" if owner.name == "if" else "an lk.range with thread-dependent bounds"
                line = owner.location.line if owner.location is not None else "?"
                fix = "move it out of the branch" if cluster else \
                    "move it out of the branch, or branch on a condition every thread of the " \
                    "block shares (kernel integers without the thread index)"
                raise TraceError(f"{what} inside {kind} (opened at line {line}): every thread of "
                                 f"the {'cluster' if cluster else 'block'} must reach it, or the "
                                 f"barrier/shuffle hangs; {fix}")

    def block_uniform(self, value: Value) -> bool:
        """Whether `value` (an IR value visible here) is the same in every thread of the CTA: a
        parameter, a constant, an index expression without a thread index (block indices,
        parameters, lk.index_value integers, loop indices of uniform loops), or comparisons and
        logic of those."""
        return self.uniform(value, lambda expr: not self.thread_dependent(expr))

    def uniform(self, value: Value, index_uniform) -> bool:
        """Whether `value` (an IR value visible here) is the same across a group of threads: a
        parameter, a constant, an index expression `index_uniform(expr)` accepts, or comparisons
        and logic of those (block_uniform; warp roles' lane-uniform conditions)."""
        defs = {r.id: op for block in self.blocks for op in block.ops for r in op.results}
        params = {op.results[0].id for op in self.fn.params}

        def uniform(v) -> bool:
            if v.id in params:
                return True
            op = defs.get(v.id)
            if op is None:
                return False
            if op.name == "const":
                return True
            if op.name == "index":
                return index_uniform(op.attrs["expr"])
            return op.name in ("cmp", "logic") and all(uniform(x) for x in op.operands)
        return uniform(value)

    def _lookup(self, key):
        for memo in reversed(self.memo):
            if key in memo:
                return memo[key]
        return None

    # ---- symbols ----------------------------------------------------------------------------
    def bind(self, sym: sympy.Symbol, value: Value) -> sympy.Symbol:
        if sym in self.symbols:
            raise TraceError(f"the name {sym} is bound twice in this kernel; rename the "
                             "parameter (tid, bid_x/y/z and i<N> name runtime indices)")
        self.symbols[sym] = value
        if value.type in (i64, u32):     # u32 values 2**31.. are negative as s32
            self.wide.add(sym)
        return sym

    def special(self, kind: str, axis: int) -> sympy.Symbol:
        """The symbol of %tid.<axis> / %ctaid.<axis>, made on first use at the kernel's top."""
        key = (kind, axis)
        if key not in self.specials:
            name = ("tid" if kind == "thread_idx" else "bid") + ("" if axis == 0 and
                                                                  kind == "thread_idx"
                                                                  else "_" + "xyz"[axis])
            sym = sympy.Symbol(name, integer=True, nonnegative=True)
            value = self.fn.new_value(i32)
            # at the front of the body, so it dominates every block already opened
            self.fn.body.ops.insert(self._top_count(),
                                    Op(kind, (), (value,), {"axis": axis}, (), here()))
            self.specials[key] = self.bind(sym, value)
        return self.specials[key]

    def _top_count(self) -> int:
        count = 0
        for op in self.fn.body.ops:
            if op.name not in ("thread_idx", "block_idx"):
                break
            count += 1
        return count

    def loop_symbol(self, nonnegative: bool) -> sympy.Symbol:
        self._loop_count += 1
        return sympy.Symbol(f"i{self._loop_count - 1}", integer=True,
                            nonnegative=True if nonnegative else None)

    # ---- values -----------------------------------------------------------------------------
    def index(self, expr, dtype: DType | None = None) -> Value:
        """An integer Value computing `expr` (a sympy expression over bound symbols or an int).
        `dtype` defaults to i64 when a symbol of the expression is i64 or u32, else i32."""
        expr = sympy.sympify(expr)
        free = sorted(expr.free_symbols, key=lambda s: s.name)
        unknown = [s for s in free if s not in self.symbols]
        if unknown:
            raise TraceError(f"the integer expression {expr} uses {', '.join(map(str, unknown))}, "
                             "which is not a kernel parameter, thread_id(), block_id() or loop "
                             "index of this kernel")
        if not (integer_by_form(expr) or expr.is_integer):
            raise TraceError(f"the index expression {expr} is not provably an integer; use "
                             "floor division (//) or declare divisibility")
        if dtype is None:
            dtype = i64 if any(s in self.wide for s in free) else i32
        key = ("index", expr, dtype)
        found = self._lookup(key)
        if found is None:
            (found,) = self.emit("index", [self.symbols[s] for s in free], [dtype],
                                 {"expr": expr, "syms": tuple(free)})
            self.memo[-1][key] = found
        return found

    def constant(self, value, dtype: DType) -> Value:
        key = ("const", value, dtype)
        found = self._lookup(key)
        if found is None:
            (found,) = self.emit("const", (), [dtype], {"value": value})
            self.memo[-1][key] = found
        return found


def active_trace() -> "Trace | None":
    """The active trace, or None outside a traced kernel."""
    return _ACTIVE.get()


def current(what: str = "this operation") -> Trace:
    """The active trace, or a TraceError saying `what` works only inside a traced kernel."""
    trace = _ACTIVE.get()
    if trace is None:
        raise TraceError(f"{what} is a kernel operation: call it inside a @lk.kernel function "
                         "(it runs while the kernel is traced)")
    return trace


@contextlib.contextmanager
def tracing(fn: Function):
    token = _ACTIVE.set(Trace(fn))
    try:
        yield _ACTIVE.get()
    finally:
        _ACTIVE.reset(token)


def thread_id() -> sympy.Symbol:
    """The thread's index in its block (%tid.x), a sympy symbol in 0..32*num_warps-1."""
    return current("lk.thread_id()").special("thread_idx", 0)


def warp_id():
    """The thread's warp in the block, tid // 32 (a warp-uniform kernel integer)."""
    return sympy.floor(current("lk.warp_id()").special("thread_idx", 0) / WARP_SIZE)


def lane_id():
    """The thread's lane in its warp, tid % 32."""
    return symbolic.mod(current("lk.lane_id()").special("thread_idx", 0), WARP_SIZE)


def block_id(axis: int = 0) -> sympy.Symbol:
    """The block's index along `axis` of the grid (%ctaid), a non-negative sympy symbol."""
    if axis not in (0, 1, 2):
        raise TraceError(f"block_id(axis={axis!r}): axis is 0, 1 or 2")
    return current("lk.block_id()").special("block_idx", axis)


def is_int_expr(x) -> bool:
    """A Python int or an integer sympy expression (the kernel's integers)."""
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, sympy.Basic) and
                                  (integer_by_form(x) or bool(x.is_integer)))


__all__ = ["Trace", "current", "tracing", "thread_id", "warp_id", "lane_id", "block_id",
           "is_int_expr", "i32", "i64"]
