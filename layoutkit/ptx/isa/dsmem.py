"""Distributed shared memory: ld/st.shared::cluster and the asynchronous st.async / red.async.

Addresses are shared::cluster addresses (from `cluster.mapa`), 32- or 64-bit registers.
Rules (PTX ISA, hopper-ptx.md §9, snippet 18): `ld/st.shared::cluster{.v2,.v4}.type` as ld/st
(PTX 7.8, sm_90; at most 16 bytes per access). `st.async` stores to a peer CTA's shared memory
and signals the peer's mbarrier with complete_tx of the stored bytes: types .b32 .b64 .u32 .s32
.u64 .s64 .f32 .f64, `.v2` of any, `.v4` of the 32-bit ones. `red.async.relaxed.cluster` reduces
into it: .inc/.dec on .u32, .min/.max on .u32/.s32, .add on .u32/.s32/.u64, .and/.or/.xor on
.b32. Both PTX 8.1, sm_90.
"""
from __future__ import annotations

from ..builder import KernelBuilder, PTXTypeError, Reg, Vector, ptx_type
from .checks import choose, dest, mods, regs_of, source
from .hopper_operands import ASYNC_STORE, SM90, shared_address
from .memory import MEM_TYPES, _mem_type, _vector

COMPLETE_TX = "mbarrier::complete_tx::bytes"
ST_ASYNC_TYPES = ("b32", "b64", "u32", "s32", "u64", "s64", "f32", "f64")
RED_ASYNC_TYPES = {"inc": ("u32",), "dec": ("u32",), "min": ("u32", "s32"),
                   "max": ("u32", "s32"), "add": ("u32", "s32", "u64"),
                   "and": ("b32",), "or": ("b32",), "xor": ("b32",)}


def ld_shared_cluster(k: KernelBuilder, addr, dtype, *, vec: int = 1, out=None, pred=None):
    """Load `vec` values of `dtype` from a (possibly peer CTA's) shared::cluster address.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); a = k.reg("u32")
    >>> _ = ld_shared_cluster(k, a, "u32"); k.body_lines()[-1]
    '    ld.shared::cluster.u32 %u1, [%u0];'
    """
    t = ptx_type(dtype)
    mt = _mem_type(t)
    choose("ld.shared::cluster", "type", mt.name, MEM_TYPES)
    instr = mods("ld.shared::cluster", _vector("ld.shared::cluster", vec, mt), mt.name)
    a = shared_address(k, instr, "address", addr)
    defs = (dest(k, instr, out, t),) if vec == 1 else (
        regs_of(k, instr, "out", out, t, vec) if out is not None else k.regs(t, vec))
    k.emit(instr, (defs[0] if vec == 1 else Vector(defs), a), defs=defs, pred=pred, requires=SM90)
    return defs[0] if vec == 1 else defs


def _values(k: KernelBuilder, instr_base: str, values, dtype, allowed) -> tuple:
    seq = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    first = next((v for v in seq if isinstance(v, Reg)), None)
    if dtype is None and first is None:
        raise PTXTypeError("the type cannot be inferred from immediates; pass dtype=",
                           instruction=instr_base, operand="values", value=values)
    t = ptx_type(dtype) if dtype is not None else first.type
    mt = _mem_type(t)
    choose(instr_base, "type", mt.name, allowed)
    return seq, t, mt


def st_shared_cluster(k: KernelBuilder, addr, values, *, dtype=None, pred=None) -> None:
    """Store one value or a tuple of 2/4 values to a shared::cluster address."""
    seq, t, mt = _values(k, "st.shared::cluster", values, dtype, MEM_TYPES)
    instr = mods("st.shared::cluster", _vector("st.shared::cluster", len(seq), mt), mt.name)
    a = shared_address(k, instr, "address", addr)
    srcs = tuple(source(k, instr, f"values[{i}]", v, t if isinstance(v, Reg) else mt)
                 for i, v in enumerate(seq))
    k.emit(instr, (a, srcs[0] if len(srcs) == 1 else Vector(srcs)), pred=pred, requires=SM90)


def st_async(k: KernelBuilder, addr, values, bar, *, dtype=None, pred=None) -> None:
    """Store to a peer CTA's shared memory and complete_tx the stored bytes on its mbarrier
    [bar] (both shared::cluster addresses from mapa)."""
    seq, t, mt = _values(k, "st.async", values, dtype, ST_ASYNC_TYPES)
    if len(seq) == 4 and mt.bits != 32:
        raise PTXTypeError("st.async.v4 stores 32-bit types only", instruction="st.async",
                           operand="values", value=mt.name)
    instr = mods("st.async.shared::cluster", COMPLETE_TX, _vector("st.async", len(seq), mt),
                 mt.name)
    a = shared_address(k, instr, "address", addr)
    srcs = tuple(source(k, instr, f"values[{i}]", v, mt) for i, v in enumerate(seq))
    k.emit(instr, (a, srcs[0] if len(srcs) == 1 else Vector(srcs),
                   shared_address(k, instr, "bar", bar)), pred=pred, requires=ASYNC_STORE)


def red_async(k: KernelBuilder, op: str, addr, value, bar, *, dtype=None, pred=None) -> None:
    """Reduce `value` into a peer CTA's shared memory (relaxed, cluster scope) and complete_tx
    on its mbarrier [bar].

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); a, b = k.reg("u32"), k.reg("u32")
    >>> red_async(k, "add", a, 1, b, dtype="u32"); print(k.body_lines()[-1])
        red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%u0], 1, [%u1];
    """
    choose("red.async", "op", op, RED_ASYNC_TYPES)
    seq, t, mt = _values(k, "red.async", value, dtype, RED_ASYNC_TYPES[op])
    instr = mods("red.async.relaxed.cluster.shared::cluster", COMPLETE_TX, op, mt.name)
    if len(seq) != 1:
        raise PTXTypeError("red.async takes one value", instruction=instr, operand="value",
                           value=value)
    k.emit(instr, (shared_address(k, instr, "address", addr), source(k, instr, "value", seq[0], mt),
                   shared_address(k, instr, "bar", bar)), pred=pred, requires=ASYNC_STORE)


__all__ = ["RED_ASYNC_TYPES", "ST_ASYNC_TYPES", "ld_shared_cluster", "red_async", "st_async",
           "st_shared_cluster"]
