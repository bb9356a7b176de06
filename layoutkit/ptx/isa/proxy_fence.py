"""Cross-proxy fences: fence.proxy.async and fence.proxy.tensormap::generic.

Rules (PTX ISA "membar/fence", hopper-ptx.md §4): data written with st.shared/stmatrix (the
generic proxy) must be fenced with `fence.proxy.async.shared::cta` by every writer, then a
barrier, before TMA stores or wgmma read it (async proxy); data that TMA itself wrote needs
only the mbarrier wait. `fence.proxy.async` takes an optional space (global, shared::cta,
shared::cluster; none = all), PTX 8.0, sm_90. A tensor map in GLOBAL memory modified with
ordinary stores needs `fence.proxy.tensormap::generic.release.scope` by the writer and
`.acquire.scope [addr], 128` by the user before TMA reads it (PTX 8.3); by-value kernel
parameters need neither.
"""
from __future__ import annotations

from ..builder import KernelBuilder, PTXBuildError
from .checks import choose
from .hopper_operands import SM90_PTX80, TENSORMAP_FENCE, global_address

ASYNC_SPACES = ("global", "shared::cta", "shared::cluster")
SCOPES = ("cta", "cluster", "gpu", "sys")
TENSORMAP_BYTES = 128


def fence_proxy_async(k: KernelBuilder, space: str | None = None, *, pred=None) -> None:
    """Order this thread's generic-proxy accesses to `space` with later async-proxy ones.

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); fence_proxy_async(k, "shared::cta"); k.body_lines()[-1]
    '    fence.proxy.async.shared::cta;'
    """
    if space is not None:
        choose("fence.proxy.async", "space", space, ASYNC_SPACES)
    k.emit("fence.proxy.async" + (f".{space}" if space else ""), pred=pred, requires=SM90_PTX80)


def fence_proxy_tensormap(k: KernelBuilder, sem: str, scope: str = "gpu", addr=None, *,
                          pred=None) -> None:
    """`release` after writing a global tensor map (no address); `acquire` before TMA uses it
    (`addr` = the tensor map's 64-bit generic address; 128 bytes are covered)."""
    choose("fence.proxy.tensormap::generic", "sem", sem, ("release", "acquire"))
    choose("fence.proxy.tensormap::generic", "scope", scope, SCOPES)
    instr = f"fence.proxy.tensormap::generic.{sem}.{scope}"
    if (sem == "acquire") != (addr is not None):
        raise PTXBuildError("the acquire form names the tensor map address, the release form "
                            "takes none", instruction=instr, operand="addr", value=addr)
    operands = () if addr is None else (global_address(k, instr, "addr", addr), TENSORMAP_BYTES)
    k.emit(instr, operands, pred=pred, requires=TENSORMAP_FENCE)


__all__ = ["ASYNC_SPACES", "fence_proxy_async", "fence_proxy_tensormap"]
