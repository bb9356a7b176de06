"""layoutkit.dsl: the kernel language - tracing to a verified IR, lowering to PTX, launch.

Imports: layoutkit.algebra, layoutkit.sync, layoutkit.ptx, numpy, sympy.

>>> import layoutkit.dsl as lk
>>> from layoutkit.algebra import Layout
>>> @lk.kernel(num_warps=4)
... def axpb(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32, a: lk.f32, b: lk.f32):
...     tv = lk.tv_layout(Layout(128), Layout(4))              # 128 threads x 4 values
...     tile = (lambda t: t.tile((512,), (lk.block_id(0),)).partition(tv))
...     X = tile(lk.global_tensor(x, Layout(n)))
...     lk.store(tile(lk.global_tensor(y, Layout(n))), lk.load(X) * a + b)
>>> "ld.global.v4.f32" in axpb.ptx(lk.Pointer[lk.f32], lk.Pointer[lk.f32], 4096, 2.0, 1.0)
True
"""
from .core import (Block, ConstexprError, DSLError, DType, Function, Kernel, KernelArgumentError,
                   KernelDefinitionError, LayoutMismatchError, Op, Pointer, PointerType,
                   Tensor, TensorSpec, TensorType,
                   RegisterTensor, Scalar, SharedMemoryError, Specialization, TraceError, TVLayout,
                   Value, VerifierError, bf16, block_id, bool_, cast, constexpr, exp2, f16, f32,
                   f64, fma, full, i32, i64, kernel, log2, maximum, minimum, rsqrt, sqrt,
                   thread_id, tv_layout, u32, verify, where)
from .lang import (GlobalTensor, PointerArg, SharedTensor, barrier, broadcast, convert_layout, eq,
                   global_tensor, if_, in_bounds, load, ne, range, reduce_max,  # noqa: A004
                   reduce_sum, shared_tensor, store, thread_sum)
from .sm80 import (MmaLayouts, cp_async, cp_async_commit, cp_async_wait, ldmatrix, mma_sync,
                   mma_sync_layouts)
from .sm90 import (AccumulatorUseError, MbarrierArray, MbarrierRef, RingState, TmaError,
                   block_id_in_cluster, block_rank_in_cluster, cluster_id, cluster_shape,
                   cluster_size, cluster_sync, consumer_state, elect_one, expect_tx,
                   fence_mbarrier_init, fence_proxy_async, lane_id, mbarrier_array,
                   mbarrier_arrive, mbarrier_init, mbarrier_wait, named_barrier_arrive,
                   named_barrier_sync, num_clusters, producer_state, thread_id_in_warpgroup,
                   tma_load, tma_store, tma_store_commit, tma_store_wait, warp_id,
                   warp_id_in_warpgroup, warp_role, warpgroup_id, warpgroup_stack, wgmma,
                   wgmma_a_layout, wgmma_accumulator, wgmma_accumulator_layout, wgmma_commit,
                   wgmma_fence, wgmma_wait)
from .check import ProtocolError, ProtocolWarning, protocol_check_skipped
from .core import BoundsWarning
from . import sm80, sm90  # noqa: E402  (the per-target namespaces: lk.sm80, lk.sm90)

__all__ = [
    "kernel", "Kernel", "Specialization",
    "Pointer", "PointerType", "Tensor", "TensorType", "TensorSpec", "DType", "constexpr",
    "i32", "i64", "u32", "f16", "bf16", "f32", "f64", "bool_",
    "thread_id", "block_id", "range", "if_", "eq", "ne",
    "global_tensor", "GlobalTensor", "PointerArg", "load", "store", "in_bounds",
    "shared_tensor", "SharedTensor", "barrier",
    "reduce_max", "reduce_sum", "thread_sum", "broadcast", "convert_layout",
    "cp_async", "cp_async_commit", "cp_async_wait", "ldmatrix", "mma_sync",
    "mma_sync_layouts", "MmaLayouts",
    "TVLayout", "tv_layout", "RegisterTensor", "Scalar", "full",
    "cast", "exp2", "fma", "log2", "maximum", "minimum", "rsqrt", "sqrt", "where",
    "Function", "Block", "Op", "Value", "verify",
    "wgmma", "wgmma_fence", "wgmma_commit", "wgmma_wait", "wgmma_accumulator",
    "wgmma_accumulator_layout", "wgmma_a_layout", "warpgroup_stack",
    "AccumulatorUseError",
    "mbarrier_array", "MbarrierArray", "MbarrierRef", "mbarrier_init", "fence_mbarrier_init",
    "mbarrier_arrive", "expect_tx", "mbarrier_wait", "fence_proxy_async",
    "producer_state", "consumer_state", "RingState",
    "warp_role", "elect_one", "named_barrier_sync", "named_barrier_arrive",
    "warp_id", "lane_id", "warpgroup_id", "warp_id_in_warpgroup", "thread_id_in_warpgroup",
    "cluster_sync", "cluster_shape", "cluster_size", "block_rank_in_cluster",
    "block_id_in_cluster", "cluster_id", "num_clusters",
    "DSLError", "KernelDefinitionError", "KernelArgumentError", "ConstexprError",
    "LayoutMismatchError", "TraceError", "SharedMemoryError", "VerifierError",
    "tma_load", "tma_store", "tma_store_commit", "tma_store_wait", "TmaError",
    "ProtocolError", "ProtocolWarning", "protocol_check_skipped", "BoundsWarning",
    "sm80", "sm90",
]
