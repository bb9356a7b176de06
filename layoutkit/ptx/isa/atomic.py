"""Atomics and reductions on global/shared memory: atom (returns the old value) and red.

Rules (PTX ISA "atom"/"red"): add on .u32 .s32 .u64 .f32 .f64; min/max on .u32 .s32 .u64
.s64; inc/dec on .u32; and/or/xor on .b32 .b64; exch and cas (atom only) on .b32 .b64.
Optional memory order .relaxed/.acquire/.release/.acq_rel (acquire: atom only) and scope
.cta/.cluster/.gpu/.sys (cluster needs sm_90). Global addresses are 64-bit registers. red.global
.add.f32 also takes a vector of 2 or 4 values (`red.global.add.v4.f32 [a], {...}`: PTX 8.1,
sm_90; checked with ptxas 13.0).
"""
from __future__ import annotations

from ..builder import TYPES, KernelBuilder, PTXBuildError, Reg, Requirement, Vector
from .checks import address, check_type, choose, dest, infer_type, mods, source

OP_TYPES = {
    "add": ("u32", "s32", "u64", "f32", "f64"),
    "min": ("u32", "s32", "u64", "s64"), "max": ("u32", "s32", "u64", "s64"),
    "inc": ("u32",), "dec": ("u32",),
    "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64"),
    "exch": ("b32", "b64"), "cas": ("b32", "b64"),
}
SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")
SCOPES = ("cta", "cluster", "gpu", "sys")
RED_VECTORS = (2, 4)                    # red.global.add.v2/.v4.f32
RED_VECTOR = Requirement((8, 1), 90)


def _prepare(k: KernelBuilder, instr: str, space: str, op: str, addr, value, dtype, sem, scope):
    choose(instr, "space", space, ("global", "shared"))
    choose(instr, "op", op, tuple(o for o in OP_TYPES if instr == "atom" or o not in ("exch", "cas")))
    t = infer_type(instr, dtype, value)
    if OP_TYPES[op][0].startswith("b") and t.bits in (32, 64) and not t.is_float:
        t = TYPES[f"b{t.bits}"]
    t = check_type(f"{instr}.{op}", t, OP_TYPES[op])
    if sem is not None:
        choose(instr, "sem", sem, SEMANTICS if instr == "atom" else ("relaxed", "release"))
    if scope is not None:
        choose(instr, "scope", scope, SCOPES)
    opcode = mods(instr, sem or "", scope or "", space, op, t.name)
    a = address(k, opcode, "address", addr, widths=(64,) if space == "global" else (32, 64))
    requires = Requirement((7, 8), 90) if scope == "cluster" else Requirement()
    return t, opcode, a, requires


def atom(k: KernelBuilder, space: str, op: str, addr, value, *, compare=None, dtype=None, sem=None,
         scope=None, out=None, pred=None) -> Reg:
    """old = atomically [addr] op= value; returns old. `cas` also takes `compare`
    (`atom.global.cas.b32 d, [a], compare, value`).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); p = k.reg("u64"); x = k.reg("f32")
    >>> _ = atom(k, "global", "add", p, x); k.body_lines()[-1]
    '    atom.global.add.f32 %f1, [%ud0], %f0;'
    """
    t, opcode, a, requires = _prepare(k, "atom", space, op, addr, value, dtype, sem, scope)
    srcs = [source(k, opcode, "value", value, t)]
    if op == "cas":
        if compare is None:
            raise PTXBuildError("cas needs compare= (the expected old value)", instruction=opcode,
                                operand="compare", value=None)
        srcs.insert(0, source(k, opcode, "compare", compare, t))
    elif compare is not None:
        raise PTXBuildError("compare= applies to cas only", instruction=opcode,
                            operand="compare", value=compare)
    value_reg = value if isinstance(value, Reg) else None
    d = dest(k, opcode, out, value_reg.type if out is None and value_reg is not None else t)
    k.emit(opcode, (d, a, *srcs), defs=(d,), pred=pred, requires=requires)
    return d


def red(k: KernelBuilder, space: str, op: str, addr, value, *, dtype=None, sem=None, scope=None,
        pred=None) -> None:
    """[addr] op= value with no result (`red.shared.add.u32 [%u0], 1;`); a tuple of 2 or 4
    f32 values is one vector reduction on global memory.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); p = k.reg("u64"); x, y = k.reg("f32"), k.reg("f32")
    >>> red(k, "global", "add", p, (x, y)); k.body_lines()[-1]
    '    red.global.add.v2.f32 [%ud0], {%f0, %f1};'
    """
    if not isinstance(value, (tuple, list)):
        t, opcode, a, requires = _prepare(k, "red", space, op, addr, value, dtype, sem, scope)
        k.emit(opcode, (a, source(k, opcode, "value", value, t)), pred=pred, requires=requires)
        return
    t, opcode, a, requires = _prepare(k, "red", space, op, addr, value[0], dtype, sem, scope)
    if len(value) not in RED_VECTORS or space != "global" or op != "add" or t.name != "f32":
        raise PTXBuildError(f"a vector reduction is red.global.add of {RED_VECTORS} f32 values, "
                            f"got {len(value)} x .{t.name} {op} on .{space}", instruction=opcode,
                            operand="value", value=value)
    opcode = opcode[:-len(".f32")] + f".v{len(value)}.f32"
    srcs = Vector(tuple(source(k, opcode, f"value[{i}]", v, t) for i, v in enumerate(value)))
    k.emit(opcode, (a, srcs), pred=pred, requires=RED_VECTOR)
