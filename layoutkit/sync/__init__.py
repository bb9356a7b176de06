"""layoutkit.sync: mbarriers, named barriers, fences, warp roles and the barrier-protocol checker.

Imports: layoutkit.ptx only. The primitives and the reasoning behind them; the DSL's barrier and
role ops are thin wrappers over these. Nothing here waits unless the author wrote the wait.
"""
from .errors import (BarrierTimeoutError, DebugRecordError, MbarrierLayoutError,  # noqa: F401
                     NamedBarrierError, PipelineStateError, ProtocolViolation, RoleBudgetError,
                     SyncError)
from .pipeline_state import MAX_STAGES, PipelineState  # noqa: F401
from .roles import (REGISTERS_PER_SM, SETMAXNREG_RANGE, WARPGROUP_THREADS,  # noqa: F401
                    RoleSplit, WarpRole, entry_register_cap)
from .named_barriers import (NAMED_BARRIER_COUNT, WHOLE_CTA_ID, NamedBarrier,  # noqa: F401
                             NamedBarrierAllocator)
from .mbarrier_layout import (MAX_ARRIVE_COUNT, MBARRIER_BYTES, MbarrierPlacement,  # noqa: F401
                              MbarrierLayout)
from .mbarrier_ops import (BarrierRegion, BarrierSlot, RingRegisters, arrive,  # noqa: F401
                           arrive_expect_tx, declare_mbarriers, emit_expect_tx, init_mbarriers,
                           wait)
from .debug_record import (ERROR_BUFFER_PARAM, RECORD_BYTES, RECORD_MAGIC, DebugTable,  # noqa: F401
                           TimeoutRecord, WaitSite, decode, raise_if_timed_out)
from .bounded_wait import DEFAULT_TIMEOUT_S, BoundedWaits  # noqa: F401
from .error_buffer import WaitErrorBuffer  # noqa: F401
from .barrier_ops import (cluster_arrive, emit_cluster_sync, cluster_wait, cta_sync,  # noqa: F401
                          emit_elect_one, emit_fence_proxy_async, named_arrive, named_sync)
from .role_split_emit import (RoleContext, check_directives, emit_role_split,  # noqa: F401
                              set_role_registers, warpgroup_index)
from .kernel_model import Finding, KernelProtocol, Site  # noqa: F401
from .commit_groups import CommitGroups  # noqa: F401
from .async_copy_rules import KIND as CP_ASYNC_KIND  # noqa: F401  (the cp.async events' kind)
from .kernel_check import check_kernel  # noqa: F401
