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
    >>> from layoutkit.dsl.interpreter import interpret
    >>> @lk.kernel(num_warps=1)
    ... def double(x: lk.Pointer[lk.f32], n: lk.i32):
    ...     tv = lk.tv_layout(Layout(32), Layout(2))
    ...     X = lk.global_tensor(x, Layout(n)).tile((64,), (lk.block_id(0),)).partition(tv)
    ...     lk.store(X, lk.load(X) * 2.0)
    >>> x = np.arange(100, dtype=np.float32)
    >>> _ = interpret(double, 2, x, 100)
    >>> bool((x == 2 * np.arange(100)).all())
    True

Each op runs through its definition's `interpret` facet (layoutkit.dsl.core.opdef); this package
holds the machine they run on: threads, scheduler, memories, barriers, race and deadlock
detection.
"""
from .errors import (DeadlockError, DivergenceError, ExecutionError, InterpreterError,
                     MemoryFaultError, RaceError, UnwrittenReadError)
from .executor import Step
from .scheduler import AsyncOperation

# The entry points run kernels, so they need layoutkit.dsl.core.kernel, which needs the op
# definitions, which need this package's machinery: they are imported on first use.
_ENTRY_POINTS = {"check_on_cpu": "checking", "relative_to_max": "checking",
                 "Execution": "launch", "from_bf16": "launch", "interpret": "launch",
                 "run_ir": "launch", "to_bf16": "launch", "to_fp8": "launch",
                 "from_fp8": "launch"}


def __getattr__(name):
    module = _ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["interpret", "run_ir", "check_on_cpu", "relative_to_max", "Execution",
           "to_bf16", "from_bf16", "to_fp8", "from_fp8", "Step",
           "AsyncOperation", "InterpreterError", "MemoryFaultError", "RaceError",
           "UnwrittenReadError", "DeadlockError", "DivergenceError", "ExecutionError"]
