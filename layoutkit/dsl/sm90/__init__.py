"""layoutkit.dsl.sm90: the Hopper (sm_90a) pipeline - mbarrier arrays and ring states, warp
roles with register budgets, named barriers, clusters, TMA copies (`sm90.tma`) and warpgroup MMA
(`sm90.wgmma`).
"""
from .mbarrier import (MbarrierArray, MbarrierRef, expect_tx, fence_mbarrier_init,
                       fence_proxy_async, mbarrier_array, mbarrier_arrive, mbarrier_expect_tx,
                       mbarrier_init, mbarrier_wait)
from .pipeline import RingState, consumer_state, producer_state
from .roles import (elect_one, named_barrier_arrive, named_barrier_sync, thread_id_in_warpgroup,
                    warp_id_in_warpgroup, warp_role, warpgroup_id)
from .cluster import (block_id_in_cluster, block_rank_in_cluster, cluster_id, cluster_shape,
                      cluster_size, cluster_sync, num_clusters)
from .tma import TmaError, tma_load, tma_store, tma_store_commit, tma_store_wait, tma_swizzle
from .stmatrix import stmatrix
from .dsmem import dsmem_load, dsmem_store, dsmem_store_async
from . import mbarrier_ops, role_ops  # noqa: F401  (the IR op definitions of this family)
from .wgmma import (AccumulatorUseError, warpgroup_stack, wgmma, wgmma_a_layout,
                    wgmma_accumulator, wgmma_accumulator_layout, wgmma_commit, wgmma_fence,
                    wgmma_wait)

__all__ = ["MbarrierArray", "MbarrierRef", "expect_tx", "fence_mbarrier_init",
           "fence_proxy_async", "mbarrier_array", "mbarrier_arrive", "mbarrier_init",
           "mbarrier_wait", "RingState", "consumer_state", "producer_state",
           "elect_one", "named_barrier_arrive", "named_barrier_sync",
           "thread_id_in_warpgroup", "warp_id_in_warpgroup", "warp_role",
           "warpgroup_id", "block_id_in_cluster", "block_rank_in_cluster", "cluster_id",
           "cluster_shape", "cluster_size", "cluster_sync", "num_clusters",
           "TmaError", "tma_load", "tma_store", "tma_store_commit", "tma_store_wait",
           "tma_swizzle",
           "AccumulatorUseError", "warpgroup_stack", "wgmma", "wgmma_a_layout",
           "wgmma_accumulator", "wgmma_accumulator_layout", "wgmma_commit", "wgmma_fence",
           "wgmma_wait", "stmatrix", "dsmem_load", "dsmem_store",
           "dsmem_store_async", "mbarrier_expect_tx"]
