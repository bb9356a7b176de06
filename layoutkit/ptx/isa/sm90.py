"""The Hopper (sm_90/sm_90a) instruction namespace: everything in sm80 plus the sm_90 forms.

Hopper families (mbarrier, TMA, wgmma, setmaxnreg, named barriers, elect, cluster) are
separate modules of this package that build on `layoutkit.ptx.builder` and `isa.checks`;
each is re-exported here by adding its import and names below.
"""
from __future__ import annotations

from .sm80 import *  # noqa: F401,F403  (the newer namespace re-exports the older)
from .sm80 import __all__ as _sm80_all
from .matrix import stmatrix
from .memory import cvta_param
# Hopper families. Builders whose module name qualifies them (mbarrier.init, tma.load,
# wgmma.fence) are re-exported here under that qualified name.
from .mbarrier import (arrive as mbarrier_arrive, arrive_drop as mbarrier_arrive_drop,
                       arrive_expect_tx as mbarrier_arrive_expect_tx,
                       arrive_remote as mbarrier_arrive_remote, expect_tx as mbarrier_expect_tx,
                       fence_init as fence_mbarrier_init, init as mbarrier_init,
                       inval as mbarrier_inval, test_wait as mbarrier_test_wait,
                       test_wait_parity as mbarrier_test_wait_parity,
                       try_wait as mbarrier_try_wait, try_wait_parity as mbarrier_try_wait_parity)
from .mbarrier_wait import (wait_parity as mbarrier_wait_parity,
                            wait_parity_bounded as mbarrier_wait_parity_bounded)
from .tma import (bulk_copy, commit_group as bulk_commit_group,
                  create_policy as createpolicy_fractional, load as tma_load,
                  prefetch as tma_prefetch, prefetch_tensormap, reduce as tma_reduce,
                  store as tma_store, wait_group as bulk_wait_group)
from .wgmma import (commit_group as wgmma_commit_group, fence as wgmma_fence,
                    mma_async as wgmma_mma_async, wait_group as wgmma_wait_group)
from .wgmma_descriptor import (advance_descriptor as wgmma_advance_descriptor,
                               descriptor as wgmma_descriptor,
                               make_descriptor as wgmma_make_descriptor)
from .cluster import (barrier_cluster_arrive, barrier_cluster_wait, elect_sync, getctarank,
                      mapa)
from .dsmem import ld_shared_cluster, red_async, st_async, st_shared_cluster
from .named_barrier import bar_arrive, bar_red, bar_sync, barrier_arrive, barrier_sync
from .proxy_fence import fence_proxy_async, fence_proxy_tensormap
from .setmaxnreg import setmaxnreg

__all__ = [*_sm80_all, "cvta_param", "stmatrix",
           "fence_mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_drop",
           "mbarrier_arrive_expect_tx", "mbarrier_arrive_remote", "mbarrier_expect_tx",
           "mbarrier_init", "mbarrier_inval", "mbarrier_test_wait", "mbarrier_test_wait_parity",
           "mbarrier_try_wait", "mbarrier_try_wait_parity", "mbarrier_wait_parity",
           "mbarrier_wait_parity_bounded",
           "bulk_commit_group", "bulk_copy", "bulk_wait_group", "createpolicy_fractional",
           "prefetch_tensormap", "tma_load", "tma_prefetch", "tma_reduce", "tma_store",
           "wgmma_advance_descriptor", "wgmma_commit_group", "wgmma_descriptor", "wgmma_fence",
           "wgmma_make_descriptor", "wgmma_mma_async", "wgmma_wait_group",
           "bar_arrive", "bar_red", "bar_sync", "barrier_arrive", "barrier_cluster_arrive",
           "barrier_cluster_wait", "barrier_sync", "elect_sync", "fence_proxy_async",
           "fence_proxy_tensormap", "getctarank", "ld_shared_cluster", "mapa", "red_async",
           "setmaxnreg", "st_async", "st_shared_cluster"]
