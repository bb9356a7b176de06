"""The tensor map of a TMA copy as a hidden kernel parameter: its dims and strides are the global
tensor's (sympy expressions in the kernel's integer parameters), checked at trace time where
provable, evaluated and encoded at launch from the arguments (layoutkit.ptx.TensorMap), one
encoding per (device, address, dims, strides) kept in a small cache.
"""
from __future__ import annotations

from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx import TensorMap, device_address
from layoutkit.ptx.tensormap import (MAX_DIM, STRIDE_MULTIPLE, TensorMapError,
                                     encode_tiled_arguments)

from ...core.errors import KernelArgumentError
from .derive import TmaError
from ...core.types import tensormap

MAX_CACHED_MAPS = 64


def _compile(expr, index_of: dict):
    """A function args -> int computing the integer expression `expr` over parameter symbols
    (`index_of[s]`: a function args -> int reading symbol s's parameter)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        value = int(expr)
        return lambda args: value
    if expr.is_Symbol:
        return index_of[expr]
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [_compile(a, index_of) for a in expr.args]
        if isinstance(expr, sympy.Add):
            return lambda args: sum(p(args) for p in parts)

        def product(args):
            out = 1
            for p in parts:
                out *= p(args)
            return out
        return product
    free = sorted(expr.free_symbols, key=lambda s: s.name)
    at = [(s, index_of[s]) for s in free]
    return lambda args: int(expr.xreplace({s: sympy.Integer(read(args)) for s, read in at}))


def _parameter_index(trace, sym, what: str, role: str):
    """A function args -> int reading the parameter of `sym` from the bound arguments (an
    integer argument, or a Tensor argument's extent or stride: its param op's `read`)."""
    value = trace.symbols.get(sym)
    for op in trace.fn.params:
        if value is not None and op.results[0] is value and op.attrs["index"] is not None:
            i = op.attrs["index"]
            return op.attrs.get("read") or (lambda args: int(args[i]))
    raise TmaError(f"{what}: the {role} depends on {sym}, which is not an integer parameter of "
                   "the kernel; a tensor map is encoded at launch from the arguments, so its "
                   "extents and strides are expressions in the kernel's integer parameters")


class MapResolver:
    """`resolve(args)` of a tensor-map parameter: the TensorMap for the launch's arguments."""

    def __init__(self, pointer: str, pointer_index: int, dtype: str, element_bytes: int,
                 dims, strides, modes, box, swizzle: str, index_of: dict, *, compiled=None):
        """`compiled`: (dims, strides) as functions args -> int made elsewhere (a specialization
        from the on-disk cache, layoutkit.dsl.core.launch_plan); `dims`, `strides` then only
        name them in messages."""
        self.pointer, self.pointer_index = pointer, pointer_index
        self.dtype, self.element_bytes = dtype, element_bytes
        self.dims_text, self.strides_text, self.modes = dims, strides, modes
        if compiled is None:
            self.dims = [_compile(d, index_of) for d in dims]
            self.strides = [_compile(s, index_of) for s in strides]
        else:
            self.dims, self.strides = (list(fns) for fns in compiled)
        self.box, self.swizzle = box, swizzle
        self.cache: dict = {}

    def _fail(self, message: str) -> KernelArgumentError:
        return KernelArgumentError(f"argument {self.pointer}: {message}")

    def __call__(self, args) -> TensorMap:
        try:
            address, ordinal = device_address(args[self.pointer_index])
        except TypeError as exc:
            raise self._fail(f"the TMA tensor map needs a device tensor ({exc})") from None
        dims = tuple(f(args) for f in self.dims)
        strides = tuple(f(args) for f in self.strides)
        key = (ordinal, address, dims, strides)
        found = self.cache.get(key)
        if found is not None:
            return found
        return self.encode(key)

    def encode(self, key: tuple) -> TensorMap:
        """The TensorMap of `key` (device ordinal, address, dims, strides; the cache's key),
        its dims and strides checked, encoded and kept (the launch fast path's miss,
        layoutkit.dsl.core.launch_maps, calls it directly)."""
        ordinal, address, dims, strides = key
        self._check(dims, strides)
        try:
            encoding = encode_tiled_arguments(
                address, self.dtype, shape=dims[::-1], strides=strides[::-1], box=self.box[::-1],
                swizzle=self.swizzle)
        except TensorMapError as exc:
            raise self._fail(f"its TMA tensor map cannot be encoded: {exc}") from None
        tmap = TensorMap(encoding, ordinal)
        if len(self.cache) >= MAX_CACHED_MAPS:
            self.cache.clear()
        self.cache[key] = tmap
        return tmap

    def _check(self, dims, strides) -> None:
        e = self.element_bytes
        for d, (extent, text, mode) in enumerate(zip(dims, self.dims_text, self.modes)):
            if not 1 <= extent <= MAX_DIM:
                raise self._fail(f"mode {mode} of the tensor has extent {text} = {extent}; a TMA "
                                 "tensor-map dimension has 1..2^32 elements")
        for d in range(1, len(strides)):
            nbytes = strides[d] * e
            if nbytes <= 0 or nbytes % STRIDE_MULTIPLE:
                raise self._fail(
                    f"mode {self.modes[d]} of the tensor has stride {self.strides_text[d]} = "
                    f"{strides[d]} elements = {nbytes} bytes; TMA needs every stride but the "
                    f"contiguous one to be a positive multiple of {STRIDE_MULTIPLE} bytes")


def _trace_time_checks(what: str, name: str, dims, strides, modes, e: int) -> None:
    for d in range(1, len(strides)):
        s = strides[d]
        if s.is_Integer and (int(s) * e <= 0 or int(s) * e % STRIDE_MULTIPLE):
            raise TmaError(f"{what}: mode {modes[d]} of {name} has stride {s} elements = "
                           f"{int(s) * e} bytes; TMA needs every stride but the contiguous one "
                           f"to be a positive multiple of {STRIDE_MULTIPLE} bytes")
    for d, extent in enumerate(dims):
        if extent.is_Integer and not 1 <= int(extent) <= MAX_DIM:
            raise TmaError(f"{what}: mode {modes[d]} of {name} has extent {extent}; a TMA "
                           "tensor-map dimension has 1..2^32 elements")


def tensormap_param(trace, what: str, tile, modes, plan):
    """(Value of the hidden tensormap parameter, {"dims", "strides"} in TMA order) for copies
    of `plan`'s box over the whole tensor of `tile` (one parameter per distinct map)."""
    e = tile.dtype.nbytes
    dims = tuple(sympy.sympify(modes.extents[m]) for m in plan.order)
    strides = []
    for m, extent in zip(plan.order, dims):
        s = sympy.sympify(modes.strides[m])
        if s == 0 and extent == 1:           # a broadcast mode of extent 1: any legal stride
            s = sympy.Integer(STRIDE_MULTIPLE // e)
        strides.append(s)
    strides = tuple(strides)
    name = tile.ptr.name
    _trace_time_checks(what, name, dims, strides, plan.order, e)
    key = (name, dims, strides, plan.box, plan.swizzle, tile.dtype.name)
    for op in trace.fn.params:
        if op.attrs.get("tma") == key:
            return op.results[0], {"dims": dims, "strides": strides}
    index_of = {}
    for expr, role in [(d, "tensor extent") for d in dims] + [(s, "tensor stride")
                                                            for s in strides]:
        for sym in expr.free_symbols:
            index_of[sym] = _parameter_index(trace, sym, what, f"{role} {expr}")
    pointer_index = next(op.attrs["index"] for op in trace.fn.params
                         if op.results[0] is tile.ptr.value)
    taken = {op.attrs["name"] for op in trace.fn.params}
    pname, n = f"tmap_{name}", 1
    while pname in taken:
        pname, n = f"tmap_{name}_{n}", n + 1
    resolver = MapResolver(name, pointer_index, tile.dtype.ptx, e, dims, strides, plan.order,
                           plan.box, plan.swizzle, index_of)
    value = trace.hidden_param(pname, tensormap, resolver,
                               f"TMA tensor map of {name}: box {plan.box[::-1]}, swizzle "
                               f"{plan.swizzle}")
    trace.fn.params[-1].attrs["tma"] = key
    return value, {"dims": dims, "strides": strides}


__all__ = ["tensormap_param", "MapResolver"]
