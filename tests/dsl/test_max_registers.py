"""lk.kernel(max_registers=N): the .maxnreg register cap (layoutkit/dsl/core/kernel.py)."""
from __future__ import annotations

import pytest

import layoutkit as lk
from tests.dsl import kernels, sync_kernels

AXPB = kernels.axpb.fn


def test_the_cap_reaches_the_ptx_and_ptxas_keeps_it():
    capped = lk.kernel(AXPB, num_warps=4, max_registers=32)
    args = (lk.Pointer[lk.f32], lk.Pointer[lk.f32], 1000, 2.0, 1.0, 4)
    lines = capped.ptx(*args).splitlines()
    assert lines[lines.index(".reqntid 128, 1, 1") + 1] == ".maxnreg 32"
    assert capped.resources(*args).registers <= 32
    plain = lk.kernel(AXPB, num_warps=4)
    assert ".maxnreg" not in plain.ptx(*args)
    assert "max_registers=32" in capped.identity() and "max_registers" not in plain.identity()


@pytest.mark.parametrize("value, num_warps, rule", [
    (True, 4, "24..255"), (12, 4, "24..255"), (256, 4, "24..255"), (96.0, 4, "24..255"),
    (72, 32, "24..64"),      # 65536 registers over 1024 threads: 64 each
])
def test_a_cap_outside_the_range_names_the_rule(value, num_warps, rule):
    with pytest.raises(lk.KernelDefinitionError) as err:
        lk.kernel(AXPB, num_warps=num_warps, max_registers=value)
    text = str(err.value)
    assert f"max_registers={value!r}" in text and rule in text and "axpb" in text


def test_warp_roles_and_a_cap_conflict():
    k = lk.kernel(sync_kernels.ring_pingpong.fn, num_warps=12, max_registers=128)
    with pytest.raises(lk.TraceError, match="warp roles both set the register budget"):
        k.ptx(lk.Pointer[lk.i32], 64)
