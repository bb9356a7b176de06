"""TRANSITION ONLY (removed when every op is an OpDef): ops not yet converted dispatch through
the per-facet registries they used before."""
from __future__ import annotations

_LEGACY = {"load", "store", "shared_load", "shared_store", "barrier",
           "shfl", "for", "if", "yield", "cp_async", "cp_async_commit", "cp_async_wait",
           "ldmatrix", "mma_sync", "mbarrier_init", "fence_mbarrier_init", "fence_proxy_async",
           "mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_wait", "warp_role",
           "elect_one", "named_barrier", "special_reg", "cluster_sync", "tma_load", "tma_store",
           "tma_store_commit", "tma_store_wait", "wgmma", "wgmma_commit", "wgmma_fence",
           "wgmma_wait", "wgmma_undef"}
_RELEVANT = {"mbarrier_init", "fence_mbarrier_init", "mbarrier_arrive",
             "mbarrier_arrive_expect_tx", "mbarrier_wait", "tma_load", "tma_store",
             "tma_store_commit", "tma_store_wait", "wgmma", "wgmma_commit", "wgmma_wait",
             "named_barrier", "fence_proxy_async", "cluster_sync"}
_EVENTS = _RELEVANT | {"shared_store", "shared_load", "barrier"}
_MADE: dict = {}


class LegacyOp:
    def __init__(self, name):
        self.name = name
        self.emits_events = name in _EVENTS
        self.synchronizes = name in _RELEVANT
        self.targets = frozenset({"sm_80", "sm_90a"})

    def verify(self, op):
        from .verifier import legacy_check
        legacy_check(op)

    def lower(self, op, lw):
        getattr(lw, "op_" + op.name)(op)

    def interpret(self, op, compiler):
        from ..interpreter import (ops_mbarrier, ops_roles,  # noqa: F401
                                   ops_tma, ops_wgmma)
        from ..interpreter.executor import HANDLERS
        return HANDLERS[op.name](op, compiler)

    def effects(self, op, ex, mask, loops):
        handler = getattr(ex, "op_" + op.name, None)
        if handler is not None:
            handler(op, mask, loops)

    def check_value(self, op, args):
        return None


def legacy(name):
    if name not in _LEGACY:
        return None
    if name not in _MADE:
        _MADE[name] = LegacyOp(name)
    return _MADE[name]
