"""Loads, stores and address conversion: ld, st, ld_param, cvta, cvta_param.

Rules (PTX ISA "ld"/"st", checked with ptxas 13.0): spaces global, shared, local, param
(read-only); vectors .v2/.v4 of at most 16 bytes; f16/bf16 move as .b16/.b32 (`ld.f16` is not
PTX). Cache operators (global only) ld: .ca .cg .cs .lu .cv, st: .wb .cg .cs .wt; L1 eviction
priorities (.L1::evict_normal/unchanged/first/last, .L1::no_allocate, global only) cannot be
combined with a cache operator; `.L2::64B/128B/256B` prefetch size on global loads; `.nc`
(read-only path) on global loads; `.volatile` on global/shared. Addresses: global needs a
64-bit register, shared/local take 32- or 64-bit, param only its Symbol.
"""
from __future__ import annotations

from ..builder import (TYPES, Address, KernelBuilder, Param, PTXBuildError, PTXType, PTXTypeError, Reg,
                       Requirement, Symbol, Vector, ptx_type)
from .checks import address, choose, dest, flag, mods, regs_of, source

SPACES = ("global", "shared", "local", "param")
LD_CACHE = ("ca", "cg", "cs", "lu", "cv")
ST_CACHE = ("wb", "cg", "cs", "wt")
L1_EVICTION = ("evict_normal", "evict_unchanged", "evict_first", "evict_last", "no_allocate")
L2_PREFETCH = ("64B", "128B", "256B")
MEM_TYPES = ("b8", "b16", "b32", "b64", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64",
             "f32", "f64")
EVICTION = Requirement((7, 4), 70)


def _mem_type(t: PTXType) -> PTXType:
    """The type written in the opcode: half-precision values move as .bN."""
    return TYPES[f"b{t.bits}"] if t.name in ("f16", "f16x2", "bf16", "bf16x2") else t


def _modifiers(instr: str, space: str, cache, cache_ops, eviction, volatile) -> list[str]:
    choose(instr, "space", space, SPACES if instr == "ld" else SPACES[:3])
    parts = []
    if flag(instr, "volatile", volatile):
        if space not in ("global", "shared") or cache or eviction:
            raise PTXBuildError(".volatile applies to global/shared without cache hints",
                                instruction=instr, operand="volatile", value=space)
        parts.append("volatile")
    parts.append(space)
    if cache is not None:
        if space != "global":
            raise PTXBuildError("cache operators apply to .global here", instruction=instr,
                                operand="cache", value=cache)
        parts.append(choose(instr, "cache", cache, cache_ops))
    if eviction is not None:
        if space != "global":
            raise PTXBuildError("L1 eviction priorities apply to .global", instruction=instr,
                                operand="eviction", value=eviction)
        if cache is not None:
            raise PTXBuildError("an L1 eviction priority cannot be combined with a cache operator "
                                "(ptxas)", instruction=instr, operand="eviction", value=eviction)
        parts.append("L1::" + choose(instr, "eviction", eviction, L1_EVICTION))
    return parts


def _vector(instr: str, vec, t: PTXType) -> str:
    choose(instr, "vec", vec, (1, 2, 4))
    if vec * t.nbytes > 16:
        raise PTXBuildError(f"a vector access moves at most 16 bytes; {vec} x .{t} is "
                            f"{vec * t.nbytes}", instruction=instr, operand="vec", value=vec)
    return "" if vec == 1 else f"v{vec}"


def _address(k: KernelBuilder, instr: str, space: str, addr) -> Address:
    if space == "param":
        base = addr.symbol if isinstance(addr, Param) else addr
        if not (isinstance(base, Symbol) and base.space == "param"):
            raise PTXTypeError("ld.param reads a kernel parameter (its Param or Symbol)",
                               instruction=instr, operand="address", value=addr)
        return Address(base)
    widths = (64,) if space == "global" else (32, 64)
    return address(k, instr, "address", addr, widths=widths)


def ld(k: KernelBuilder, space: str, addr, dtype, *, vec: int = 1, cache=None, eviction=None,
       prefetch=None, nc: bool = False, volatile: bool = False, out=None, pred=None):
    """Load `vec` values of `dtype` from [addr]; returns a register, or a tuple for vec > 1.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); p = k.reg("u64")
    >>> _ = ld(k, "global", p, "f32", vec=4, cache="cg"); k.body_lines()[-1]
    '    ld.global.cg.v4.f32 {%f0, %f1, %f2, %f3}, [%ud0];'
    """
    t = ptx_type(dtype)
    mt = _mem_type(t)
    choose("ld", "type", mt.name, MEM_TYPES)
    parts = _modifiers("ld", space, cache, LD_CACHE, eviction, volatile)
    if flag("ld", "nc", nc):
        if space != "global" or volatile:
            raise PTXBuildError(".nc (read-only data path) applies to non-volatile .global loads",
                                instruction="ld", operand="nc", value=space)
        parts.insert(1, "nc")
    if prefetch is not None:
        if space != "global":
            raise PTXBuildError("an L2 prefetch size applies to .global", instruction="ld",
                                operand="prefetch", value=prefetch)
        parts.append("L2::" + choose("ld", "prefetch", prefetch, L2_PREFETCH))
    opcode = mods("ld", *parts, _vector("ld", vec, mt), mt.name)
    a = _address(k, opcode, space, addr)
    if vec == 1:
        d = dest(k, opcode, out, t)
        defs, target = (d,), d
    else:
        defs = regs_of(k, opcode, "out", out, t, vec, writes=True) if out is not None else k.regs(t, vec)
        target = Vector(defs)
    requires = EVICTION if eviction or prefetch else Requirement()
    k.emit(opcode, (target, a), defs=defs, pred=pred, requires=requires)
    return defs if vec > 1 else defs[0]


def ld_param(k: KernelBuilder, param: Param, *, out=None, pred=None) -> Reg:
    """Read a scalar kernel parameter: `ld.param.u64 %ud0, [out];`."""
    if not isinstance(param, Param) or param.type is None:
        raise PTXTypeError("ld_param reads a scalar Param (a CUtensorMap param is used through "
                           "cvta_param)", instruction="ld.param", operand="param", value=param)
    return ld(k, "param", param, param.type, out=out, pred=pred)


def st(k: KernelBuilder, space: str, addr, values, *, dtype=None, cache=None, eviction=None,
       volatile: bool = False, pred=None) -> None:
    """Store one value or a tuple of 2/4 values to [addr]: `st.global.v2.f32 [%ud0], {%f0, %f1};`.
    The type comes from `dtype` or the first register; immediates are allowed."""
    seq = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    first = next((v for v in seq if isinstance(v, Reg)), None)
    if dtype is None and first is None:
        raise PTXTypeError("the store type cannot be inferred from immediates; pass dtype=",
                           instruction="st", operand="values", value=values)
    t = ptx_type(dtype) if dtype is not None else first.type
    mt = _mem_type(t)
    choose("st", "type", mt.name, MEM_TYPES)
    parts = _modifiers("st", space, cache, ST_CACHE, eviction, volatile)
    opcode = mods("st", *parts, _vector("st", len(seq), mt), mt.name)
    a = _address(k, opcode, space, addr)
    srcs = tuple(source(k, opcode, f"values[{i}]", v, t if isinstance(v, Reg) else mt)
                 for i, v in enumerate(seq))
    k.emit(opcode, (a, srcs[0] if len(srcs) == 1 else Vector(srcs)), pred=pred,
           requires=EVICTION if eviction else Requirement())


def cvta(k: KernelBuilder, space: str, a, *, to_generic: bool = False, out=None, pred=None) -> Reg:
    """Convert a generic address to `space` (`cvta.to.global.u64`), or with `to_generic`
    a `space` address to generic (`cvta.shared.u64`). 64-bit addresses."""
    choose("cvta", "space", space, ("global", "shared", "local", "const"))
    opcode = f"cvta.{space}.u64" if to_generic else f"cvta.to.{space}.u64"
    s = source(k, opcode, "a", a, TYPES["u64"], imm=False) if not isinstance(a, Symbol) else a
    d = dest(k, opcode, out, TYPES["u64"])
    k.emit(opcode, (d, s), defs=(d,), pred=pred)
    return d


def cvta_param(k: KernelBuilder, param: Param, *, out=None, pred=None) -> Reg:
    """The generic address of a by-value parameter (the CUtensorMap for TMA):
    `cvta.param.u64 %rd, tmap;` (PTX 7.8 on sm_90; hopper-ptx.md §1)."""
    if not isinstance(param, Param):
        raise PTXTypeError("cvta_param takes a kernel Param", instruction="cvta.param.u64",
                           operand="param", value=param)
    d = dest(k, "cvta.param.u64", out, TYPES["b64"])
    k.emit("cvta.param.u64", (d, param.symbol), defs=(d,), pred=pred,
           requires=Requirement((7, 8), 90))
    return d
