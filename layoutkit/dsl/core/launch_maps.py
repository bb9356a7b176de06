"""The launch fast path of a specialization whose hidden parameters are TMA tensor maps: one
generated function per (specialization, grid) that computes each map's cache key from the
arguments the fast path has already read, takes the map from its MapResolver's cache, and calls
the configured launcher's `from_pointers` entry with the maps in their PTX places.

A map's key is the one MapResolver.__call__ (the checked path) makes: (device ordinal, address,
dims, strides), the dims and strides the resolver's expressions (launch_plan.tensor_map_json)
written out as Python over the launch's integers and tensor extents and strides. The
specialization's facts fix the box, swizzle and dtype; a new address or new extents (equal
facts) encode a new map (MapResolver.encode, the checked path's rules); a map that does not
encode, and a tensor on no CUDA device, return MISS, and the fast path then launches through
the checked path, which words the error. The function holds its last maps with the inputs they
were made of (the map tensors' pointers and the integers their dims and strides read, one tuple
read and written whole): a call with the same inputs takes them without reading devices,
building keys or looking them up; `from_pointers` tests every tensor's device as before, so a
tensor elsewhere at the same address still goes to the checked path.

>>> from layoutkit.dsl.core.arguments import parameter
>>> from layoutkit.dsl.core.types import Pointer, Tensor, bf16, i32
>>> params = [parameter("a", Tensor[bf16, 2]), parameter("c", Pointer[bf16]),
...           parameter("M", i32)]
>>> maps = [(0, [["s", "a_shape1"], ["s", "a_shape0"]], [1, ["s", "a_stride0"]],
...          {"a_shape1": ["field", 0, "shape", 1], "a_shape0": ["field", 0, "shape", 0],
...           "a_stride0": ["field", 0, "stride", 0]}),
...         (1, [64, ["s", "M"]], [1, 64], {"M": ["arg", 2]})]
>>> print(entry_source(params, maps))
def entry(a0, s0_0, s0_1, t0_0, t0_1, a1, a2, p0, p1, /):
    global held
    inputs = (p0, s0_1, s0_0, t0_0, p1, a2)
    last = held   # (the inputs, their maps) of the last call's maps, in one read
    if inputs == last[0]:
        m0, m1 = last[1]
    else:
        d0 = a0.get_device()
        k0 = (d0, p0, (s0_1, s0_0), (1, t0_0))
        m0 = cache0(k0)
        if m0 is None:
            if d0 < 0:
                return MISS
            try:
                m0 = encode0(k0)
            except KernelArgumentError:
                return MISS
        d1 = a1.get_device()
        k1 = (d1, p1, (64, a2), (1, 64))
        m1 = cache1(k1)
        if m1 is None:
            if d1 < 0:
                return MISS
            try:
                m1 = encode1(k1)
            except KernelArgumentError:
                return MISS
        held = (inputs, (m0, m1))
    return launch(a0, s0_0, s0_1, t0_0, t0_1, a1, a2, m0, m1, p0, p1)
"""
from __future__ import annotations

from layoutkit.ptx.code_cache import compiled

from .arguments import Parameter
from .errors import KernelArgumentError
from .fingerprint import NotCacheable
from .launch_plan import tensor_map_json

__all__ = ["MISS", "entry_source", "hidden_entry"]


class _Miss:
    """What an entry returns when the launch must go through the checked path."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<tensor map miss>"


MISS = _Miss()
HELD_NONE = (None, None)   # an entry's held (inputs, maps) before its first maps
_OPERATORS = {"+": " + ", "*": " * "}


class _NoSource(Exception):
    """An expression the generated code does not compute (a rational, floor, ceil)."""


def _expression(tree, local_of) -> str:
    """Python source of an expression_json tree over integers; `local_of(name)` names each
    symbol's local. _NoSource for a node whose integer arithmetic it does not spell."""
    if type(tree) is int:
        return repr(tree)
    op = tree[0]
    if op == "s":
        return local_of(tree[1])
    if op in _OPERATORS:
        return "(" + _OPERATORS[op].join(_expression(t, local_of) for t in tree[1:]) + ")"
    if op == "^":
        return f"({_expression(tree[1], local_of)} ** {tree[2]})"
    if op == "mod":        # sympy's Mod of integers has the divisor's sign, as Python's %
        return f"({_expression(tree[1], local_of)} % {_expression(tree[2], local_of)})"
    if op in ("min", "max"):
        return f"{op}({', '.join(_expression(t, local_of) for t in tree[1:])})"
    raise _NoSource(op)


def _reader_local(spec) -> str:
    """The entry's local holding the value a reader JSON (launch_plan._reader_json) reads."""
    if spec[0] == "arg":
        return f"a{spec[1]}"
    return f"{'s' if spec[2] == 'shape' else 't'}{spec[1]}_{spec[3]}"


def _signature(params: list[Parameter]) -> tuple[list[str], list[str]]:
    """(the runtime locals in the fast path's order, the pointer locals p<i>)."""
    runtime, pointers = [], []
    for i, p in enumerate(params):
        if p.kind == "constexpr":
            continue
        runtime.append(f"a{i}")
        if p.kind == "tensor":
            rank = p.annotation.rank
            runtime += [f"s{i}_{d}" for d in range(rank)] + [f"t{i}_{d}" for d in range(rank)]
        if p.kind in ("tensor", "pointer"):
            pointers.append(f"p{i}")
    return runtime, pointers


def entry_source(params: list[Parameter], maps: list) -> str:
    """The source of `entry(<runtime arguments>, <pointers>)` (module docstring); `maps`:
    (pointer parameter index, dims trees, strides trees, readers) per tensor map, in PTX order.
    Its globals: cache<j> (map j's cache lookup), encode<j> (MapResolver.encode), launch
    (from_pointers), MISS, KernelArgumentError."""
    runtime, pointers = _signature(params)
    devices, inputs, body = set(), [], []
    for j, (index, dims, strides, readers) in enumerate(maps):
        def local(name, readers=readers):
            return _reader_local(readers[name])
        if index not in devices:
            body.append(f"d{index} = a{index}.get_device()")
            devices.add(index)
        parts = [", ".join(_expression(t, local) for t in trees) + ("," if len(trees) == 1 else "")
                 for trees in (dims, strides)]
        inputs += [v for v in [f"p{index}", *(local(name) for name in readers)] if v not in inputs]
        body += [f"k{j} = (d{index}, p{index}, ({parts[0]}), ({parts[1]}))",
                 f"m{j} = cache{j}(k{j})",
                 f"if m{j} is None:",
                 f"    if d{index} < 0:\n        return MISS",
                 f"    try:\n        m{j} = encode{j}(k{j})",
                 "    except KernelArgumentError:\n        return MISS"]
    tensor_maps = [f"m{j}" for j in range(len(maps))]
    held_maps = f"{', '.join(tensor_maps)}{',' if len(maps) == 1 else ''}"
    lines = [f"def entry({', '.join(runtime + pointers)}, /):"]
    if maps:
        lines += ["    global held",
                  f"    inputs = ({', '.join(inputs)}{',' if len(inputs) == 1 else ''})",
                  "    last = held   # (the inputs, their maps) of the last call's maps, in one read",
                  "    if inputs == last[0]:",
                  f"        {held_maps} = last[1]",
                  "    else:"]
        lines += ["        " + line for chunk in body for line in chunk.split("\n")]
        lines.append(f"        held = (inputs, ({held_maps}))")
    lines.append(f"    return launch({', '.join(runtime + tensor_maps + pointers)})")
    return "\n".join(lines)


def hidden_entry(params: list[Parameter], spec, from_pointers):
    """The fast path's entry for specialization `spec` (whose hidden parameters are all tensor
    maps) launching through `from_pointers`, or None where it has another hidden parameter or
    a map expression the entry does not compute."""
    from ..sm90.tma.tensor_map import MapResolver
    namespace = {"launch": from_pointers, "MISS": MISS, "KernelArgumentError": KernelArgumentError,
                 "held": HELD_NONE}
    maps = []
    for j, (name, resolve) in enumerate(spec.plan.hidden):
        if not isinstance(resolve, MapResolver):
            return None
        try:
            data = tensor_map_json(spec.ir, name, resolve)
        except NotCacheable:
            return None
        maps.append((data["pointer_index"], data["dims"], data["strides"], data["readers"]))
        namespace[f"cache{j}"], namespace[f"encode{j}"] = resolve.cache.get, resolve.encode
    try:
        source = entry_source(params, maps)
    except _NoSource:
        return None
    exec(compiled(source, f"<layoutkit tensor-map entry of {spec.plan.name}>"), namespace)
    return namespace["entry"]
