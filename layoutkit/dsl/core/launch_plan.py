"""What launching one specialization needs, without its IR: the PTX entry's name, the block
size, dynamic shared memory, cluster shape, the parameters (layoutkit.ptx ParamSpecs, PTX order)
and the functions that compute the hidden parameters' launch values from the bound arguments
(TMA tensor maps, a debug build's wait-error record).

`plan_of(ir, key)` reads it off a traced kernel; `plan_to_json(plan, ir)` writes it down for the
on-disk specialization cache and `plan_from_json` rebuilds it in another process, with no trace
and no sympy: a tensor map's dims and strides become small expression trees over the kernel's
integer parameters (a name and where its value is read: an integer argument, or an extent or
stride of a tensor argument), evaluated at launch as the traced resolver does; a wait-error
record's table (barrier names, wait sites) is written out. A hidden parameter of another kind
cannot be written down: NotCacheable names it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from layoutkit.ptx import ParamKind, ParamSpec

from .errors import KernelArgumentError
from .fingerprint import NotCacheable
from .tensor_args import field_reader
from .types import PointerType, TensorMapType

__all__ = ["Assumption", "LaunchPlan", "plan_of", "plan_to_json", "plan_from_json",
           "expression_json", "evaluate", "tensor_map_json"]

# lk.assume's relations, by sympy class name, and their host test
_RELATIONS = {"StrictLessThan": ("<", lambda a, b: a < b), "LessThan": ("<=", lambda a, b: a <= b),
              "StrictGreaterThan": (">", lambda a, b: a > b),
              "GreaterThan": (">=", lambda a, b: a >= b), "Equality": ("==", lambda a, b: a == b),
              "Unequality": ("!=", lambda a, b: a != b)}


@dataclass
class Assumption:
    """One lk.assume of the kernel: its text, its line (file, line, column or None), its
    relations as (sympy class name, lhs tree, rhs tree) of expression_json trees, and where each
    symbol's value is read from the bound arguments (the readers' JSON)."""

    text: str
    where: tuple | None
    relations: tuple
    readers: dict

    def __post_init__(self):
        readers = {n: _reader(spec) for n, spec in self.readers.items()}
        self._tests = [(_RELATIONS[kind][1], _compiled(lhs, readers), _compiled(rhs, readers))
                       for kind, lhs, rhs in self.relations]
        self._read = readers

    def check(self, values: tuple, kernel: str) -> None:
        """KernelArgumentError unless the assumption holds for the bound arguments `values`."""
        if all(test(lhs(values), rhs(values)) for test, lhs, rhs in self._tests):
            return
        at = "" if self.where is None else f" at {self.where[0]}:{self.where[1]}"
        found = ", ".join(f"{name} = {read(values)}" for name, read in sorted(self._read.items()))
        raise KernelArgumentError(f"kernel {kernel}: lk.assume({self.text}){at} does not hold "
                                  f"for these arguments ({found})")

    def to_json(self) -> dict:
        return {"text": self.text, "where": None if self.where is None else list(self.where),
                "relations": [list(r) for r in self.relations], "readers": self.readers}

    @classmethod
    def from_json(cls, data: dict) -> "Assumption":
        where = data["where"]
        return cls(data["text"], None if where is None else tuple(where),
                   tuple(tuple(r) for r in data["relations"]), dict(data["readers"]))


def _assumption(ir, op) -> Assumption:
    import sympy
    cond = op.attrs["relation"]
    rels = cond.args if isinstance(cond, sympy.And) else (cond,)
    relations = tuple((type(r).__name__, expression_json(r.lhs), expression_json(r.rhs))
                      for r in rels if not isinstance(r, sympy.logic.boolalg.BooleanAtom))
    names = set().union(*(_symbols(t) for _, lhs, rhs in relations for t in (lhs, rhs)))
    loc = op.location
    where = None if loc is None else (loc.file, loc.line, loc.column)
    return Assumption(op.attrs["text"], where, relations,
                      {n: _reader_json(ir, n) for n in sorted(names)})


def _assume_ops(block):
    for op in block.ops:
        if op.name == "assume":
            yield op
        for inner in op.blocks:
            yield from _assume_ops(inner)


@dataclass
class LaunchPlan:
    """One specialization's launch facts. `hidden`: (name, resolve) per hidden parameter, in PTX
    order after the kernel's own, `resolve(values)` its launch value for the bound arguments;
    `sink`: the debug build's WaitErrorSink (None in a release build); `protocol_checked`:
    whether the static protocol check ran (False when traced under lk.protocol_check_skipped())."""

    name: str
    num_warps: int
    target: str
    debug: bool
    shared_bytes: int
    cluster: tuple[int, int, int] | None
    params: tuple[ParamSpec, ...]
    hidden: tuple
    sink: object
    protocol_checked: bool
    assumptions: tuple = ()       # Assumption per lk.assume, checked at every launch

    def hidden_values(self, values: tuple) -> list:
        """The launch values of the hidden parameters for the bound arguments `values`."""
        return [resolve(values) for _, resolve in self.hidden]

    def check_assumptions(self, values: tuple) -> None:
        """KernelArgumentError naming the first lk.assume the bound arguments break."""
        for assumption in self.assumptions:
            assumption.check(values, self.name)


def _param_specs(ir, key: tuple) -> tuple[ParamSpec, ...]:
    """The PTX parameters as ParamSpecs, refined with the key's facts: a pointer must be 16-byte
    aligned where the key says so (else element-aligned); a 64-bit scalar takes ints only."""
    specs = []
    for op in ir.params:
        name, vtype = op.attrs["name"], op.results[0].type
        if isinstance(vtype, TensorMapType):
            specs.append(ParamSpec.tensormap(name))
        elif isinstance(vtype, PointerType) and op.attrs["index"] is None:
            specs.append(ParamSpec.pointer(name, align=vtype.dtype.nbytes, dtype=vtype.dtype.name))
        elif isinstance(vtype, PointerType):
            fact = key[op.attrs["index"]]      # a tensor's: (aligned, narrow, ...)
            aligned = fact is True or (type(fact) is tuple and fact[0] is True)
            align = 16 if aligned else vtype.dtype.nbytes
            specs.append(ParamSpec.pointer(name, align=align, dtype=vtype.dtype.name))
        else:
            specs.append(ParamSpec.scalar(name, vtype.ptx))
    return tuple(specs)


def plan_of(ir, key: tuple) -> LaunchPlan:
    """The LaunchPlan of the traced, verified kernel `ir` (a KernelFunction) of key `key`."""
    from ..sm90.debug_waits import sink_of
    return LaunchPlan(ir.name, ir.num_warps, ir.target, bool(ir.debug), ir.shared_bytes,
                      getattr(ir, "cluster", None), _param_specs(ir, key),
                      tuple((op.attrs["name"], op.attrs["resolve"]) for op in ir.hidden),
                      sink_of(ir), getattr(ir, "protocol_checked", True),
                      _distinct(_assumption(ir, op) for op in _assume_ops(ir.body)))


def _distinct(assumptions) -> tuple:
    """The assumptions in order, each once: a line traced several times (a store in an unrolled
    loop, one per tile) states the same relation at each."""
    seen, out = set(), []
    for a in assumptions:
        key = (a.text, a.where, repr(a.relations))     # the relations hold JSON lists
        if key not in seen:
            seen.add(key)
            out.append(a)
    return tuple(out)


# ---- integer expressions over the kernel's parameters ------------------------------------------
def expression_json(expr):
    """A sympy integer expression as a JSON tree: ints, ["q", p, q] for a rational,
    ["s", name] for a symbol, ["+" | "*", terms...], ["^", base, n], ["floor" | "ceil", x],
    ["mod", a, b], ["min" | "max", args...]; NotCacheable for anything else."""
    import sympy
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    if expr.is_Rational:
        return ["q", int(expr.p), int(expr.q)]
    if expr.is_Symbol:
        return ["s", expr.name]
    if isinstance(expr, sympy.Add):
        return ["+", *(expression_json(a) for a in expr.args)]
    if isinstance(expr, sympy.Mul):
        return ["*", *(expression_json(a) for a in expr.args)]
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp >= 0:
        return ["^", expression_json(expr.base), int(expr.exp)]
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        return ["floor" if isinstance(expr, sympy.floor) else "ceil", expression_json(expr.args[0])]
    if isinstance(expr, sympy.Mod):
        return ["mod", expression_json(expr.args[0]), expression_json(expr.args[1])]
    if isinstance(expr, (sympy.Min, sympy.Max)):
        return ["min" if isinstance(expr, sympy.Min) else "max",
                *(expression_json(a) for a in expr.args)]
    raise NotCacheable(f"the tensor-map expression {expr} has a {type(expr).__name__}, which "
                       "the specialization cache does not write down")


def evaluate(tree, value_of) -> int | Fraction:
    """The value of an expression_json tree, `value_of(name)` giving each symbol's.

    >>> evaluate(["+", ["*", ["q", 1, 64], ["s", "M"]], ["floor", ["*", ["q", 1, 3], ["s", "M"]]]],
    ...          {"M": 128}.get)
    44
    """
    if type(tree) is int:
        return tree
    op = tree[0]
    if op == "s":
        return value_of(tree[1])
    if op == "q":
        return Fraction(tree[1], tree[2])
    args = [evaluate(t, value_of) for t in tree[1:]] if op != "^" else None
    if op == "+":
        total = 0
        for a in args:
            total += a
        return _exact(total)
    if op == "*":
        product = 1
        for a in args:
            product *= a
        return _exact(product)
    if op == "^":
        return _exact(evaluate(tree[1], value_of) ** tree[2])
    if op == "floor":
        return math.floor(args[0])
    if op == "ceil":
        return math.ceil(args[0])
    if op == "mod":
        return _exact(args[0] % args[1])
    if op == "min":
        return min(args)
    if op == "max":
        return max(args)
    raise ValueError(f"unknown expression node {op!r}")


def _exact(x):
    return x.numerator if type(x) is Fraction and x.denominator == 1 else x


def _compiled(tree, readers: dict):
    """A function args -> int evaluating `tree` with each symbol read by `readers[name]`."""
    if type(tree) is int:
        return lambda args: tree
    if tree[0] == "s":
        return readers[tree[1]]
    used = sorted(_symbols(tree))

    def value(args):
        values = {name: readers[name](args) for name in used}
        return int(evaluate(tree, values.__getitem__))
    return value


def _symbols(tree) -> set[str]:
    """The symbol names an expression_json tree reads."""
    if type(tree) is int or tree[0] == "q":
        return set()
    if tree[0] == "s":
        return {tree[1]}
    return set().union(*(_symbols(t) for t in tree[1:]))


def _reader_json(ir, name: str):
    """Where the integer parameter named `name` is read from the bound arguments."""
    for op in ir.params:
        if op.attrs["name"] == name and op.attrs["index"] is not None:
            field = op.attrs.get("field")
            return ["arg", op.attrs["index"]] if field is None else \
                ["field", op.attrs["index"], field[0], field[1]]
    raise NotCacheable(f"a tensor map depends on {name}, which is not a parameter of the kernel")


def _reader(spec):
    if spec[0] == "arg":
        index = spec[1]
        return lambda args: int(args[index])
    return field_reader(spec[1], spec[2], spec[3])


# ---- hidden parameters ----------------------------------------------------------------------
def _hidden_json(ir, name: str, resolve) -> dict:
    from ..sm90.debug_waits import WaitErrorSink
    from ..sm90.tma.tensor_map import MapResolver
    if isinstance(resolve, MapResolver):
        dims = [expression_json(d) for d in resolve.dims_text]
        strides = [expression_json(s) for s in resolve.strides_text]
        names = set().union(*(_symbols(t) for t in dims + strides))
        return {"kind": "tensor_map", "name": name, "pointer": resolve.pointer,
                "pointer_index": resolve.pointer_index, "dtype": resolve.dtype,
                "element_bytes": resolve.element_bytes, "dims": dims, "strides": strides,
                "dims_text": [str(d) for d in resolve.dims_text],
                "strides_text": [str(s) for s in resolve.strides_text],
                "modes": list(resolve.modes), "box": list(resolve.box), "swizzle": resolve.swizzle,
                "readers": {n: _reader_json(ir, n) for n in sorted(names)}}
    if isinstance(resolve, WaitErrorSink):
        table = resolve.table
        return {"kind": "wait_errors", "name": name, "kernel": table.kernel,
                "timeout_s": resolve.timeout_s, "barriers": list(table.barriers),
                "sites": [[s.barrier, None if s.location is None else
                           [s.location.file, s.location.line, s.location.column]]
                          for s in table.sites]}
    raise NotCacheable(f"hidden parameter {name} is resolved by a {type(resolve).__name__}, "
                       "which the specialization cache cannot rebuild in another process")


def tensor_map_json(ir, name: str, resolve) -> dict:
    """The JSON of tensor-map parameter `name` (its MapResolver `resolve`): its dims and
    strides as expression_json trees, where each symbol is read (the readers' JSON), ... as the
    specialization cache writes it; `ir` (the traced IR) is read only for a resolver made by a
    trace. NotCacheable where it cannot be written down."""
    written = getattr(resolve, "json", None)
    return written if written is not None else _hidden_json(ir, name, resolve)


def _hidden_from_json(data: dict):
    if data["kind"] == "tensor_map":
        from ..sm90.tma.tensor_map import MapResolver
        readers = {n: _reader(spec) for n, spec in data["readers"].items()}
        compiled = ([_compiled(t, readers) for t in data["dims"]],
                    [_compiled(t, readers) for t in data["strides"]])
        resolver = MapResolver(data["pointer"], data["pointer_index"], data["dtype"],
                               data["element_bytes"], data["dims_text"], data["strides_text"],
                               tuple(data["modes"]), tuple(data["box"]), data["swizzle"], {},
                               compiled=compiled)
        resolver.json = data           # what tensor_map_json gives (no IR to read it from)
        return resolver
    if data["kind"] == "wait_errors":
        from layoutkit.ptx.builder import SourceLocation
        from layoutkit.sync.debug_record import WaitSite
        from ..sm90.debug_waits import WaitErrorSink
        sink = WaitErrorSink(data["kernel"], data["timeout_s"])
        sink.table.barriers.extend(data["barriers"])
        sink.table.sites.extend(WaitSite(b, None if at is None else SourceLocation(*at))
                                for b, at in data["sites"])
        return sink
    raise ValueError(f"unknown hidden parameter kind {data['kind']!r}")


def plan_to_json(plan: LaunchPlan, ir) -> dict:
    """The plan as JSON (`ir`: the IR it was read from, which names the parameters the hidden
    ones are computed from); NotCacheable when a hidden parameter cannot be written down."""
    return {"name": plan.name, "num_warps": plan.num_warps, "target": plan.target,
            "debug": plan.debug, "shared_bytes": plan.shared_bytes,
            "cluster": None if plan.cluster is None else list(plan.cluster),
            "params": [[p.name, p.ptx_type, p.kind.value, p.size, p.align, p.pointer_align,
                        p.dtype] for p in plan.params],
            "hidden": [_hidden_json(ir, name, resolve) for name, resolve in plan.hidden],
            "protocol_checked": plan.protocol_checked,
            "assumptions": [a.to_json() for a in plan.assumptions]}


def plan_from_json(data: dict) -> LaunchPlan:
    """The LaunchPlan that plan_to_json wrote (KeyError, TypeError or ValueError when `data` is
    not one)."""
    from ..sm90.debug_waits import WaitErrorSink
    params = tuple(ParamSpec(name, ptx_type, ParamKind(kind), size, align, pointer_align, dtype)
                   for name, ptx_type, kind, size, align, pointer_align, dtype in data["params"])
    hidden = tuple((h["name"], _hidden_from_json(h)) for h in data["hidden"])
    sinks = [resolve for _, resolve in hidden if isinstance(resolve, WaitErrorSink)]
    cluster = data["cluster"]
    return LaunchPlan(data["name"], int(data["num_warps"]), data["target"], bool(data["debug"]),
                      int(data["shared_bytes"]), None if cluster is None else tuple(cluster),
                      params, hidden, sinks[0] if sinks else None,
                      bool(data["protocol_checked"]),
                      tuple(Assumption.from_json(a) for a in data.get("assumptions", ())))
