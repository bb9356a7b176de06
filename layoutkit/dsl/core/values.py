"""Runtime values while tracing: `Scalar` (one value, the same in every thread's view), register
tensors (`RegisterTensor`: one value per value index of a TV layout) and elementwise math.

Elementwise ops take tensors, scalars and Python numbers. Tensors must share one TV layout
(else `LayoutMismatchError`, showing both) and every operand one dtype (else `TraceError`):
layoutkit converts neither implicitly; `cast` and (later) `convert_layout` are explicit.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from layoutkit.algebra import Layout, make_layout_tv, size
from layoutkit.algebra.sympy_gate import sympy

from .bounds import check_tv, require_tv
from .errors import LayoutMismatchError, TraceError
from .ir import Value
from .tracer import current, is_int_expr
from .types import DType, bool_, f32, i32, i64


@dataclass(frozen=True)
class TVLayout:
    """A thread-value layout over a tile: `layout` maps (thread, value) to the column-major
    index of a coordinate in the tile of shape `tile`.

    >>> tv = tv_layout(Layout(128), Layout(4))
    >>> str(tv), tv.num_threads, tv.num_values
    ('(128,4):(4,1) over tile (512,)', 128, 4)
    """

    tile: tuple
    layout: Layout

    def __post_init__(self):
        if not isinstance(self.layout, Layout) or len(self.layout) != 2:
            raise TraceError(f"a TV layout is a rank-2 Layout (thread, value), got {self.layout}")
        check_tv(self)      # every (thread, value) maps inside the tile (core/bounds.py)

    @property
    def num_threads(self) -> int:
        return size(self.layout[0])

    @property
    def num_values(self) -> int:
        return size(self.layout[1])

    def __str__(self) -> str:
        tile = "(" + ",".join(map(str, self.tile)) + (",)" if len(self.tile) == 1 else ")")
        return f"{self.layout} over tile {tile}"

    def _repr_svg_(self):
        """The tile coloured by owning thread, each cell labelled with its value index (a
        notebook's picture; None where it cannot be drawn, e.g. symbolic)."""
        from layoutkit.algebra import svg_or_none
        return svg_or_none(self, title=str(self))


def tv_layout(thr_layout: Layout, val_layout: Layout) -> TVLayout:
    """The TV layout that gives each thread of `thr_layout` a `val_layout` block of values
    (CuTe's make_layout_tv: the tile is the raked product of the two)."""
    tile, layout = make_layout_tv(thr_layout, val_layout)
    return TVLayout(tuple(tile), layout)


class _Arith:
    """Python operators shared by Scalar and RegisterTensor."""

    def __add__(self, o): return _apply("binary", "add", self, o)
    def __radd__(self, o): return _apply("binary", "add", o, self)
    def __sub__(self, o): return _apply("binary", "sub", self, o)
    def __rsub__(self, o): return _apply("binary", "sub", o, self)
    def __mul__(self, o): return _apply("binary", "mul", self, o)
    def __rmul__(self, o): return _apply("binary", "mul", o, self)
    def __truediv__(self, o): return _apply("binary", "div", self, o)
    def __rtruediv__(self, o): return _apply("binary", "div", o, self)
    def __neg__(self): return _apply("unary", "neg", self)
    def __lt__(self, o): return _apply("cmp", "lt", self, o)
    def __le__(self, o): return _apply("cmp", "le", self, o)
    def __gt__(self, o): return _apply("cmp", "gt", self, o)
    def __ge__(self, o): return _apply("cmp", "ge", self, o)
    def __and__(self, o): return _apply("logic", "and", self, o)
    def __or__(self, o): return _apply("logic", "or", self, o)

    # No Python truth value and no Python ==: both would be decided while tracing (see
    # core/constructs.py); lk.if_, lk.where and lk.eq / lk.ne decide them at run time.
    def __bool__(self):
        from . import constructs
        raise constructs.construct_error(constructs.at_frame(sys._getframe(1)),
                                         constructs.describe(self))

    def __eq__(self, o):      # against None, a string, a layout...: never equal (identity)
        from . import constructs
        if not constructs.comparable(o):
            return NotImplemented
        raise constructs.refused_equality(self, o, False, sys._getframe(1))

    def __ne__(self, o):
        from . import constructs
        if not constructs.comparable(o):
            return NotImplemented
        raise constructs.refused_equality(self, o, True, sys._getframe(1))

    __hash__ = object.__hash__


class Scalar(_Arith):
    """One runtime value of `dtype` (a float parameter, a reduction result, ...)."""

    def __init__(self, value: Value):
        self.value = value
        self.dtype: DType = value.type

    def __repr__(self) -> str:
        return f"Scalar({self.dtype})"


class RegisterTensor(_Arith):
    """A tile held in registers: `layout` (a TVLayout) says which tile coordinate each
    (thread, value) pair holds; `values[v]` is this thread's value index v (a trace-time
    index: registers are never indexed at run time)."""

    def __init__(self, dtype: DType, layout: TVLayout, values):
        self.dtype = dtype
        self.layout = layout
        self.values = tuple(values)
        require_tv(layout)      # a TV layout made outside the kernel and mapping outside its tile
        if len(self.values) != layout.num_values:
            raise TraceError(f"a register tensor over {layout} holds {layout.num_values} "
                             f"values per thread, got {len(self.values)}")

    def __repr__(self) -> str:
        return f"RegisterTensor({self.dtype}, {self.layout})"

    def _repr_svg_(self):
        """Its TV layout's picture: which thread holds which tile coordinate."""
        from layoutkit.algebra import svg_or_none
        return svg_or_none(self.layout, title=repr(self))


def _name(kind: str) -> str:
    return {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
            "ge": ">=", "and": "&", "or": "|"}.get(kind, kind)


def _common(what: str, args) -> tuple[TVLayout | None, DType]:
    layout, dtype = None, None
    first = None
    for a in args:
        if isinstance(a, RegisterTensor):
            if layout is None:
                layout, first = a.layout, a
            elif a.layout != layout:
                raise LayoutMismatchError(
                    f"{what}: the operands' layouts differ\n"
                    f"      {first.dtype} tensor: {first.layout}\n"
                    f"      {a.dtype} tensor: {a.layout}\n"
                    "  layoutkit never converts layouts implicitly: build both operands with the "
                    "same TV layout")
        if isinstance(a, (RegisterTensor, Scalar)):
            if dtype is None:
                dtype = a.dtype
            elif a.dtype != dtype:
                raise TraceError(f"{what}: operand types differ ({dtype} and {a.dtype}); cast "
                                 "one explicitly with lk.cast(x, dtype)")
    if dtype is None:
        raise TraceError(f"{what}: needs at least one runtime operand (a tensor or a scalar)")
    return layout, dtype


def _operand(what: str, x, dtype: DType):
    """A per-element operand: a tuple of Values (tensor) or one Value (broadcast)."""
    if isinstance(x, RegisterTensor):
        return x.values
    if isinstance(x, Scalar):
        return x.value
    trace = current(what)
    if isinstance(x, bool):
        raise TraceError(f"{what}: a Python bool is not an operand; compare runtime values")
    if dtype.storage_only and not isinstance(x, bool):
        raise TraceError(f"{what}: the constant {x!r} cannot be a {dtype} operand ({dtype} is a "
                         "storage type: make the value in f32 and lk.cast it)")
    if isinstance(x, float) or (isinstance(x, int) and dtype.is_float):
        if not dtype.is_float:
            raise TraceError(f"{what}: the float constant {x} cannot be a {dtype} operand "
                             "(no implicit conversion)")
        return trace.constant(float(x), dtype)
    if is_int_expr(x):
        if dtype.is_float:
            raise TraceError(f"{what}: the integer expression {x} is not a {dtype} operand; "
                             f"convert it explicitly with lk.cast({x}, lk.{dtype})")
        return trace.index(x, dtype) if isinstance(x, sympy.Basic) else \
            trace.constant(int(x), dtype)
    raise TraceError(f"{what}: {x!r} is not a tensor, scalar or number")


def _apply(op: str, kind, *args, result: DType | None = None, extra: dict | None = None):
    what = "lk.where" if op == "select" else f"operator {_name(kind)}" if kind in ("add", "sub", "mul", "div", "lt", "le", "gt",
                                                 "ge", "and", "or") else f"lk.{kind}"
    data = args[1:] if op == "select" else args
    layout, dtype = _common(what, data)
    if op == "logic" and dtype != bool_:
        raise TraceError(f"{what}: combines bool values (comparison results), got {dtype}")
    if op == "select":
        cond_layout, cond_dtype = _common(what, (args[0],))
        if cond_dtype != bool_:
            raise TraceError(f"{what}: the condition is a bool, got {cond_dtype}")
        if cond_layout is not None:
            for a in data:
                if isinstance(a, RegisterTensor) and a.layout != cond_layout:
                    raise LayoutMismatchError(
                        f"{what}: the condition's and a value's layouts differ\n"
                        f"      condition: {cond_layout}\n      {a.dtype} tensor: {a.layout}\n"
                        "  layoutkit never converts layouts implicitly")
            layout = cond_layout
        operands = [_operand(what, args[0], bool_)] + [_operand(what, a, dtype) for a in data]
    else:
        operands = [_operand(what, a, dtype) for a in data]
    check_math(what, op, kind, dtype)
    out = result or (bool_ if op == "cmp" else dtype)
    trace = current(what)
    attrs = {} if kind is None else {"kind": kind}
    attrs.update(extra or {})
    if layout is None:
        return Scalar(trace.emit(op, operands, [out], attrs)[0])
    values = []
    for v in range(layout.num_values):
        row = [o[v] if isinstance(o, tuple) else o for o in operands]
        values.append(trace.emit(op, row, [out], attrs)[0])
    return RegisterTensor(out, layout, values)


# PTX has these forms only for some types (PTX ISA; ex2 bf16 needs .ftz, no f16/bf16 div).
_FLOAT_ONLY = {"exp2": ("f32", "f16", "bf16"), "log2": ("f32",), "sqrt": ("f32", "f64"),
               "rsqrt": ("f32", "f64"), "rcp": ("f32", "f64"), "tanh": ("f32",), "div": ("f32", "f64", "i32", "i64"),
               "fma": ("f32", "f64", "f16", "bf16")}


def check_math(what: str, op: str, kind, dtype: DType) -> None:
    key = "fma" if op == "fma" else kind
    allowed = _FLOAT_ONLY.get(key)
    if allowed is not None and dtype.name not in allowed:
        raise TraceError(f"{what} on {dtype}: PTX has it for {', '.join(allowed)} only; "
                         f"cast to f32 first with lk.cast(x, lk.f32)")
    if op in ("binary", "unary", "fma", "cmp") and dtype == bool_:
        raise TraceError(f"{what}: arithmetic on bool values; use & and | (or lk.where)")
    if dtype.storage_only and op != "cast":
        raise TraceError(f"{what} on {dtype}: {dtype} is a storage type (PTX has no arithmetic, "
                         f"comparison or select on it); convert with lk.cast(x, lk.f32) first")


def compare(kind: str, a, b):
    """Elementwise comparison `kind` (lt le gt ge eq ne) of tensors/scalars of one dtype and
    layout: a bool result (lk.eq and lk.ne use it; Python's == is refused on runtime values)."""
    return _apply("cmp", kind, a, b)


def maximum(a, b):
    """Elementwise max of tensors/scalars of one dtype and layout; of two kernel integers, the
    kernel integer max(a, b) (its range known to the bounds and protocol checks)."""
    if _kernel_ints(a, b):
        return max(a, b) if type(a) is type(b) is int else sympy.Max(a, b)
    return _apply("binary", "max", a, b)


def minimum(a, b):
    """Elementwise min of tensors/scalars of one dtype and layout; of two kernel integers, the
    kernel integer min(a, b)."""
    if _kernel_ints(a, b):
        return min(a, b) if type(a) is type(b) is int else sympy.Min(a, b)
    return _apply("binary", "min", a, b)


def _kernel_ints(a, b) -> bool:
    return is_int_expr(a) and is_int_expr(b)


def fma(a, b, c):
    """Elementwise a * b + c, rounded once (float types)."""
    return _apply("fma", None, a, b, c)


def exp2(x, *, ftz: bool = False):
    """Elementwise 2**x (the SFU approximation, ex2.approx; f32, f16, bf16). `ftz=True` (f32)
    flushes subnormal inputs and results to zero: one MUFU.EX2, where the IEEE-subnormal form
    costs a compare and two multiplies more (softmax exponents, whose tiny results do not
    matter, take it; bf16 always flushes)."""
    if not isinstance(ftz, bool):
        raise TraceError(f"lk.exp2: ftz is True or False, got {ftz!r}")
    return _apply("unary", "exp2", x, extra={"ftz": True} if ftz else None)


def log2(x):
    """Elementwise log2(x) (the SFU approximation, lg2.approx; f32): -inf at 0, NaN below."""
    return _apply("unary", "log2", x)


def sqrt(x):
    """Elementwise square root (IEEE-rounded, sqrt.rn; f32, f64)."""
    return _apply("unary", "sqrt", x)


def rsqrt(x):
    """Elementwise 1/sqrt(x) (rsqrt.approx; f32, f64)."""
    return _apply("unary", "rsqrt", x)


def tanh(x):
    """Elementwise tanh(x) (the SFU approximation, tanh.approx.f32: one MUFU.TANH; maximum
    relative error 2^-10.987, so 1 + tanh(x) near x = -inf keeps only ~2^-11 absolute)."""
    return _apply("unary", "tanh", x)


def where(cond, a, b):
    """Elementwise `a if cond else b` (cond a bool tensor/scalar from a comparison, or a
    condition of kernel integers such as `lk.thread_id() < n`, the same for every value). Two
    kernel integers give an i32 scalar (i64 when one of them is 64-bit)."""
    if isinstance(cond, sympy.logic.boolalg.Boolean) and not isinstance(cond, sympy.Symbol):
        from .conditions import condition
        cond = Scalar(condition(current("lk.where"), cond, "lk.where"))
    if is_int_expr(a) and is_int_expr(b):
        wide = current("lk.where").wide
        dtype = i64 if any(isinstance(x, sympy.Basic) and x.free_symbols & wide
                           for x in (a, b)) else i32
        a, b = cast(a, dtype), cast(b, dtype)
    return _apply("select", None, cond, a, b)


def cast(x, dtype: DType):
    """`x` converted to `dtype`, elementwise (round to nearest even when narrowing a float or
    going int -> float; toward zero for float -> int). An integer expression (a sympy int such
    as a kernel parameter) becomes a runtime `dtype` value."""
    if not isinstance(dtype, DType) or dtype == bool_:
        raise TraceError(f"lk.cast: the target is an element type such as lk.f32, got {dtype!r}")
    if is_int_expr(x) and not isinstance(x, (Scalar, RegisterTensor)):
        src = i64 if isinstance(x, sympy.Basic) and x.free_symbols & current("lk.cast").wide \
            else i32
        value = _operand("lk.cast", x, src)
        x = Scalar(value)
    if not isinstance(x, (Scalar, RegisterTensor)):
        raise TraceError(f"lk.cast: {x!r} is not a tensor, scalar or integer expression")
    if x.dtype == bool_:
        raise TraceError("lk.cast: a bool is not converted; use lk.where(cond, 1.0, 0.0)")
    if x.dtype == dtype:
        return x
    if x.dtype.storage_only or dtype.storage_only:
        return _cast_fp8(x, dtype)
    return _apply("cast", None, x, result=dtype)


# the conversions PTX has for the fp8 storage types (sm_90): to fp8 from f32 (f16 and bf16
# widen to f32 first, exactly), from fp8 to f16 (then on to f32, bf16 or f64, exactly)
_FP8_SOURCES = ("f32", "f16", "bf16")
_FP8_TARGETS = ("f32", "f16", "bf16", "f64")


def _cast_fp8(x, dtype: DType):
    """lk.cast to or from e4m3/e5m2: adjacent values of a register tensor convert as one pair
    (cvt's .e4m3x2/.e5m2x2 forms move two values); a lone value converts alone."""
    src = x.dtype
    if src.storage_only and dtype.storage_only:       # e4m3 <-> e5m2: exactly through f32
        return _cast_fp8(_cast_fp8(x, f32), dtype)
    if dtype.storage_only and src.name not in _FP8_SOURCES:
        raise TraceError(f"lk.cast: {src} -> {dtype} does not exist in PTX; fp8 values are "
                         f"made from {', '.join(_FP8_SOURCES)} (round an {src} value to f32 "
                         "first)")
    if src.storage_only and dtype.name not in _FP8_TARGETS:
        raise TraceError(f"lk.cast: {src} -> {dtype} does not exist in PTX; fp8 values widen "
                         f"to {', '.join(_FP8_TARGETS)} (then cast that)")
    if dtype.storage_only and src != f32:
        x = _apply("cast", None, x, result=f32)
    trace = current("lk.cast")
    if isinstance(x, Scalar):
        return Scalar(trace.emit("cast", [x.value], [dtype])[0])
    values = []
    for v in range(0, len(x.values) - 1, 2):
        values += trace.emit("cast", list(x.values[v:v + 2]), [dtype, dtype])
    if len(x.values) % 2:
        values += trace.emit("cast", [x.values[-1]], [dtype])
    return RegisterTensor(dtype, x.layout, values)


def full(layout: TVLayout, value, dtype: DType = f32) -> RegisterTensor:
    """A register tensor over `layout` with every value `value` (a Python number)."""
    if not isinstance(layout, TVLayout):
        raise TraceError(f"lk.full: the layout is a TVLayout (lk.tv_layout(...)), got {layout!r}")
    const = _operand("lk.full", value, dtype)
    return RegisterTensor(dtype, layout, (const,) * layout.num_values)


__all__ = ["TVLayout", "tv_layout", "Scalar", "RegisterTensor", "maximum", "minimum", "fma",
           "exp2", "log2", "sqrt", "rsqrt", "tanh", "where", "cast", "full", "compare", "i32"]
