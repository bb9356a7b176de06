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
