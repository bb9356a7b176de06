"""The kernel IR: per-thread SSA values, ops, and blocks nested in ops (structured control flow).

A `Function` is one traced specialization. Every `Value` has a type (a DType or a PointerType)
and is defined once, by an op result or as a block argument. Ops with regions (`for`, `if`)
own `Block`s; a value is visible in its block and in blocks nested below it, never outside.
Tensors are a trace-time view: a register tensor is a tuple of Values, one per value index of
its TV layout, so the IR itself is scalar and the layout checks happen while tracing.

Op table (name: operands -> results; attrs):
  param:      -> v                       name, index (None for a hidden parameter: then also
                                          `resolve`, a function of the kernel's bound arguments
                                          giving the launch value, and `what`)
  thread_idx / block_idx: -> i32         axis
  const:      -> v                       value
  index:      syms... -> i32|i64         expr (sympy; operands bind expr's free symbols, `syms`)
  binary:     a, b -> v                  kind in add sub mul div max min
  fma:        a, b, c -> v
  unary:      a -> v                     kind in neg abs exp2 log2 sqrt rsqrt rcp tanh
  cast:       a -> v                     (the result type says the target)
  cmp:        a, b -> bool               kind in lt le gt ge eq ne
  logic:      a, b -> bool               kind in and or
  select:     c, a, b -> v
  load:       ptr, offset(i64)[, mask] -> v*vec   dtype, vec, masked
  store:      ptr, offset(i64), v*vec[, mask] ->   vec, masked
  shared_load:  offset(i32) -> v*vec      alloc, vec, disp, swizzle (B,M,S) or None
  shared_store: offset(i32), v*vec ->     alloc, vec, disp, swizzle
  barrier:    ->                          (bar.sync 0: every thread of the block)
  shfl:       v, lane(i32) -> v           mode in bfly idx (32-bit values)
  for:        start, stop, step, init... -> carried...   unroll, thread_dependent;
                                          body(iv, carried...) ends in yield
  if:         cond ->                     then-block (no results)
  yield:      v... ->                     (terminates a for body)

Every op kind is one definition (layoutkit.dsl.core.opdef.OpDef) in the module of its family
(lang/*_ops.py, sm80/ops.py, sm90/*_ops.py, sm90/tma/ops.py, sm90/wgmma/ops.py,
sm90/stmatrix.py), which documents its operands and attributes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from layoutkit.ptx.builder import SourceLocation

from .opdef import OpDef, definition
from .types import DType, PointerType


class Value:
    """An SSA value of `type`; `name` is its printed id (`%3`)."""

    __slots__ = ("id", "type", "hint")

    def __init__(self, vid: int, vtype: "DType | PointerType", hint: str = ""):
        self.id = vid
        self.type = vtype
        self.hint = hint

    def __repr__(self) -> str:
        return f"%{self.id}"


@dataclass
class Block:
    """A straight-line list of ops with arguments (loop induction variable, carried values)."""

    args: list[Value] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)


@dataclass
class Op:
    """One op of the IR. `name` may be given as the op's IR name or its OpDef class; `defn` is
    its definition (layoutkit.dsl.core.opdef), through which every pass handles it."""

    name: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attrs: dict
    blocks: tuple[Block, ...] = ()
    location: SourceLocation | None = None
    defn: "OpDef" = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.defn = definition(self.name)
        self.name = self.defn.name


@dataclass(frozen=True)
class SharedAllocation:
    """One shared-memory buffer of the kernel: `nbytes` at byte `offset` of the dynamic shared
    array (a multiple of `align`), made at `location` by the user's code."""

    name: str
    nbytes: int
    align: int
    offset: int
    what: str
    location: SourceLocation | None

    def describe(self) -> str:
        where = f"{self.location.file}:{self.location.line}" if self.location else "?"
        return (f"{self.name}: {self.nbytes} B, align {self.align}, at +{self.offset} "
                f"({self.what}; {where})")


@dataclass
class Function:
    """One traced kernel specialization: parameters (in PTX order), body, launch facts
    (`shared`: the dynamic shared-memory allocations, `shared_bytes` their total)."""

    name: str
    num_warps: int
    params: list[Op] = field(default_factory=list)
    body: Block = field(default_factory=Block)
    shared: list[SharedAllocation] = field(default_factory=list)
    _next_id: int = 0

    @property
    def hidden(self) -> list[Op]:
        """The param ops the DSL added (tensor maps, the debug error buffer), in PTX order."""
        return [op for op in self.params if op.attrs["index"] is None]

    @property
    def shared_bytes(self) -> int:
        """Bytes of dynamic shared memory a launch needs (end of the last allocation)."""
        return max((a.offset + a.nbytes for a in self.shared), default=0)

    def new_value(self, vtype, hint: str = "") -> Value:
        value = Value(self._next_id, vtype, hint)
        self._next_id += 1
        return value

    def __str__(self) -> str:
        return format_function(self)


def _attr_text(op: Op) -> str:
    parts = []
    for key, value in op.attrs.items():
        if key == "syms":
            continue
        text = str(value).replace(" ", "") if key == "expr" else repr(value) \
            if isinstance(value, str) else str(value)
        parts.append(f"{key}={text}")
    return " {" + ", ".join(parts) + "}" if parts else ""


def _format_block(block: Block, indent: str, out: list[str]) -> None:
    for op in block.ops:
        res = ", ".join(f"{r!r}: {r.type}" for r in op.results)
        head = f"{indent}{res + ' = ' if res else ''}{op.name}"
        operands = ", ".join(repr(v) for v in op.operands)
        line = f"{head} {operands}".rstrip() + _attr_text(op)
        if op.location is not None:
            line += f"  # line {op.location.line}"
        out.append(line)
        for i, inner in enumerate(op.blocks):
            args = ", ".join(f"{a!r}: {a.type}" for a in inner.args)
            out.append(f"{indent}  ^block{i}({args}):")
            _format_block(inner, indent + "    ", out)


def format_function(fn: Function) -> str:
    """The IR as text: one op per line, nested blocks indented."""
    params = ", ".join(f"{op.results[0]!r}: {op.results[0].type} {op.attrs['name']}"
                       for op in fn.params)
    out = [f"kernel {fn.name}({params}) num_warps={fn.num_warps} {{"]
    out += [f"  shared {a.describe()}" for a in fn.shared]
    _format_block(fn.body, "  ", out)
    out.append("}")
    return "\n".join(out)
