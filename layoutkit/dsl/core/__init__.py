"""layoutkit.dsl.core: the kernel language's spine - the IR and its verifier, the tracer and
the runtime values it builds, element types, `@kernel` (specialize, trace, check, lower,
assemble) and the launch paths. Nothing here knows a particular memory op or instruction family.
"""
from .errors import (ConstexprError, DSLError, KernelArgumentError, KernelDefinitionError,
                     LayoutMismatchError, SharedMemoryError, TraceError, VerifierError)
from .bounds import BoundsWarning
from .types import (DType, Pointer, PointerType, Tensor, TensorType, bf16, bool_, constexpr,
                    e4m3, e5m2, f16, f32, f64, i32, i64, u32)
from .tensor_args import TensorSpec
from .ir import Block, Function, Op, Value
from .tracer import block_id, lane_id, thread_id, warp_id
from .values import (RegisterTensor, Scalar, TVLayout, cast, exp2, fma, full, log2, maximum,
                     minimum, rsqrt, sqrt, tanh, tv_layout, where)
from .verifier import verify
from .kernel import Kernel, Specialization, kernel

__all__ = ["ConstexprError", "DSLError", "KernelArgumentError", "KernelDefinitionError",
           "LayoutMismatchError", "SharedMemoryError", "TraceError", "VerifierError",
           "BoundsWarning", "DType", "Pointer", "PointerType", "Tensor", "TensorType", "TensorSpec", "bf16",
           "bool_", "constexpr", "e4m3", "e5m2", "f16", "f32", "f64",
           "i32", "i64", "u32", "Block", "Function", "Op", "Value", "block_id", "thread_id",
           "warp_id", "lane_id",
           "RegisterTensor", "Scalar", "TVLayout", "cast", "exp2", "fma", "full", "log2",
           "maximum", "minimum", "rsqrt", "sqrt", "tanh", "tv_layout", "where", "verify",
           "Kernel", "Specialization", "kernel"]
