"""layoutkit.dsl.lang: the target-independent language over tensors - global tensors, shared
tensors and the block barrier, loads and stores, reductions and broadcasts, layout conversion,
runtime control flow (`range`, `if_`).
"""
from . import control_ops, memory_ops, scalar_ops  # noqa: F401  (the op definitions)
from .atomic import atomic_add
from .control import eq, if_, ne, range  # noqa: A004
from .convert import convert_layout
from .global_tensor import GlobalTensor, PointerArg, global_tensor
from .assume import assume
from .index_value import index_value
from .memory import in_bounds, load, store
from .reduce import broadcast, reduce_max, reduce_sum, thread_sum
from .shared import SharedTensor, barrier, shared_tensor

__all__ = ["atomic_add", "eq", "if_", "ne", "range", "convert_layout", "GlobalTensor", "PointerArg",
           "global_tensor", "assume", "index_value", "in_bounds", "load", "store", "broadcast",
           "reduce_max", "reduce_sum", "thread_sum", "SharedTensor", "barrier", "shared_tensor"]
