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
from .control import if_, range  # noqa: A004
from .convert import convert_layout
from .errors import (ConstexprError, DSLError, KernelArgumentError, KernelDefinitionError,
                     LayoutMismatchError, SharedMemoryError, TraceError, VerifierError)
from .global_tensor import GlobalTensor, PointerArg, global_tensor
from .ir import Block, Function, Op, Value
from .kernel import Kernel, Specialization, kernel
from .memory import in_bounds, load, store
from .reduce import broadcast, reduce_max, reduce_sum
from .shared import SharedTensor, barrier, shared_tensor
from .tracer import block_id, thread_id
from .types import (DType, Pointer, PointerType, bf16, bool_, constexpr, f16, f32, f64, i32, i64,
                    u32)
from .values import (RegisterTensor, Scalar, TVLayout, cast, exp2, fma, full, maximum, minimum,
                     rsqrt, sqrt, tv_layout, where)
from .verifier import verify

__all__ = [
    "kernel", "Kernel", "Specialization",
    "Pointer", "PointerType", "DType", "constexpr",
    "i32", "i64", "u32", "f16", "bf16", "f32", "f64", "bool_",
    "thread_id", "block_id", "range", "if_",
    "global_tensor", "GlobalTensor", "PointerArg", "load", "store", "in_bounds",
    "shared_tensor", "SharedTensor", "barrier",
    "reduce_max", "reduce_sum", "broadcast", "convert_layout",
    "TVLayout", "tv_layout", "RegisterTensor", "Scalar", "full",
    "cast", "exp2", "fma", "maximum", "minimum", "rsqrt", "sqrt", "where",
    "Function", "Block", "Op", "Value", "verify",
    "DSLError", "KernelDefinitionError", "KernelArgumentError", "ConstexprError",
    "LayoutMismatchError", "TraceError", "SharedMemoryError", "VerifierError",
]
