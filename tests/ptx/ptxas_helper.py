"""Assemble PTX text with ptxas in tests, through the toolchain's `layoutkit.ptx.assemble`.

`assemble(ptx, arch)` returns the Cubin (no cache: tests never write the cubin cache);
ptxas's rejection surfaces as the toolchain's PTXAssemblyError with the offending lines.
"""
from __future__ import annotations

import pytest

from layoutkit.ptx import assemble as _assemble
from layoutkit.ptx.toolchain import ToolNotFoundError, find_ptxas


def _ptxas_missing() -> bool:
    try:
        find_ptxas()
    except ToolNotFoundError:
        return True
    return False


requires_ptxas = pytest.mark.skipif(_ptxas_missing(), reason="ptxas not found")


def assemble(ptx: str, arch: str = "sm_90a"):
    """Assemble `ptx` for `arch` with ptxas (uncached); raise PTXAssemblyError if rejected."""
    return _assemble(ptx, arch, cache=False)


def written(k, dtype):
    """A fresh register of `dtype` that holds a value: `mov` of 0 (1 for a .pred; 8-bit types by
    `cvt` from a u32). Form tests read such registers as inputs: the builder refuses a register
    that is read but never written."""
    from layoutkit.ptx.builder import TYPES, Imm

    r = k.reg(dtype)
    if r.type.is_pred:
        k.emit("mov.pred", (r, Imm(1, r.type)), defs=(r,))
    elif r.type.bits == 8:
        u = k.reg("u32")
        k.emit("mov.u32", (u, Imm(0, TYPES["u32"])), defs=(u,))
        k.emit(f"cvt.{'u8' if r.type.name == 'b8' else r.type.name}.u32", (r, u), defs=(r,))
    else:
        k.emit(f"mov.b{r.type.bits}", (r, Imm(0, TYPES[f"b{r.type.bits}"])), defs=(r,))
    return r


def written_regs(k, dtype, count):
    """`count` registers from `written`."""
    return tuple(written(k, dtype) for _ in range(count))
