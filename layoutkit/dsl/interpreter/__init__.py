"""layoutkit.dsl.interpreter: run a kernel's IR on the CPU with numpy, deterministically.

Every thread of every CTA is a coroutine over the verified IR; a seeded adversarial scheduler
interleaves them (and completes asynchronous copies when it chooses), so a seed fixes one
interleaving and different seeds explore others. Numerics follow PTX (bf16/f16 rounding to
nearest even, f32 in float32, integer wrap-around, truncating division); shared accesses apply
the buffer's swizzle as the lowering does; out-of-bounds and misaligned accesses, races
(happens-before on shared memory, accesses to data an asynchronous operation still owns) and
deadlocks are errors that name the op's source line.

    >>> import numpy as np
    >>> import layoutkit.dsl as lk
    >>> from layoutkit.algebra import Layout
    >>> @lk.kernel(num_warps=1)
    ... def double(x: lk.Pointer[lk.f32], n: lk.i32):
    ...     tv = lk.tv_layout(Layout(32), Layout(2))
    ...     X = lk.global_tensor(x, Layout(n)).tile((64,), (lk.block_id(0),)).partition(tv)
    ...     lk.store(X, lk.load(X) * 2.0)
    >>> x = np.arange(100, dtype=np.float32)
    >>> _ = interpret(double, 2, x, 100)
    >>> bool((x == 2 * np.arange(100)).all())
    True

Op families plug in with `executor.handler` (one module per family: ops_scalar, ops_memory,
ops_block, ops_control, ...).
"""
from . import (ops_block, ops_control, ops_mbarrier, ops_memory, ops_roles,  # noqa: F401
               ops_mma, ops_scalar, ops_tma, ops_wgmma)  # (each registers its ops' handlers)
from .checking import check_on_cpu, relative_to_max
from .errors import (DeadlockError, DivergenceError, ExecutionError, InterpreterError,
                     MemoryFaultError, RaceError)
from .executor import HANDLERS, Step, handler
from .launch import Execution, from_bf16, interpret, run_ir, to_bf16
from .scheduler import AsyncOperation

__all__ = ["interpret", "run_ir", "check_on_cpu", "relative_to_max", "Execution",
           "to_bf16", "from_bf16", "handler", "Step", "HANDLERS",
           "AsyncOperation", "InterpreterError", "MemoryFaultError", "RaceError",
           "DeadlockError", "DivergenceError", "ExecutionError"]
