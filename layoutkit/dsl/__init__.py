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
                   Value, VerifierError, bf16, block_id, bool_, cast, constexpr, e4m3, e5m2,
                   exp2, f16, f32,
                   f64, fma, full, i32, i64, kernel, lane_id, log2, maximum, minimum, rsqrt,
                   sqrt, tanh, thread_id, tv_layout, u32, verify, warp_id, where)
from .lang import (GlobalTensor, PointerArg, SharedTensor, atomic_add, barrier, broadcast,
                   convert_layout, eq,
                   assume, global_tensor, if_, in_bounds, index_value, load, ne,
                   range, reduce_max, reduce_sum, shared_tensor, store,  # noqa: A004
                   thread_sum)
from . import sm80, sm90  # (the per-target namespaces: lk.sm80, lk.sm90)
from .check import ProtocolError, ProtocolWarning, protocol_check_skipped
from .core import BoundsWarning
from .core.autotune import Config, autotune
from .core.choice_tuner import ChoiceTuner

__all__ = [
    "kernel", "Kernel", "Specialization", "autotune", "Config", "ChoiceTuner",
    "Pointer", "PointerType", "Tensor", "TensorType", "TensorSpec", "DType", "constexpr",
    "i32", "i64", "u32", "f16", "bf16", "f32", "f64", "bool_", "e4m3", "e5m2",
    "thread_id", "warp_id", "lane_id", "block_id", "range", "if_", "eq", "ne",
    "global_tensor", "GlobalTensor", "PointerArg", "assume", "index_value", "load", "store",
    "in_bounds", "atomic_add",
    "shared_tensor", "SharedTensor", "barrier",
    "reduce_max", "reduce_sum", "thread_sum", "broadcast", "convert_layout",
    "TVLayout", "tv_layout", "RegisterTensor", "Scalar", "full",
    "cast", "exp2", "fma", "log2", "maximum", "minimum", "rsqrt", "sqrt", "tanh", "where",
    "Function", "Block", "Op", "Value", "verify",
    "DSLError", "KernelDefinitionError", "KernelArgumentError", "ConstexprError",
    "LayoutMismatchError", "TraceError", "SharedMemoryError", "VerifierError",
    "ProtocolError", "ProtocolWarning", "protocol_check_skipped", "BoundsWarning",
    "sm80", "sm90",
]

# The target-specific ops live only in their namespace: `lk.sm90.tma_load` is an AttributeError that
# names `lk.sm90.tma_load`, never a silent alias.
_NAMESPACE_OF = {name: space.__name__.rsplit(".", 1)[1] for space in (sm80, sm90)
                 for name in space.__all__}


def missing_attribute(module: str, name: str) -> AttributeError:
    """The AttributeError for `module.name`; a target-specific op's names its namespace."""
    space = _NAMESPACE_OF.get(name)
    if space is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return AttributeError(f"lk.{name} moved to lk.{space}.{name}: the ops of one target are "
                          f"spelled through its namespace (lk.sm80, lk.sm90)")


def __getattr__(name):
    raise missing_attribute(__name__, name)
