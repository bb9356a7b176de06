"""Errors of a kernel run on the CPU interpreter: each names the CTA and thread, the op and the
rule, and carries the op's source line (the user's kernel code)."""
from __future__ import annotations

from ..core.errors import DSLError


class InterpreterError(DSLError):
    """Base of every error the CPU interpreter reports for a kernel (or its arguments)."""


class MemoryFaultError(InterpreterError):
    """An access outside its buffer or argument array, or misaligned for its width (the GPU
    would fault or corrupt other data)."""


class RaceError(InterpreterError):
    """An access to data that an asynchronous operation (a TMA copy, an un-waited wgmma) or
    another thread may still be writing or reading: its result would depend on timing."""


class UnwrittenReadError(InterpreterError):
    """A read of shared memory that nothing wrote before it: shared memory starts undefined, so
    the kernel would read garbage on the GPU."""


class DeadlockError(InterpreterError):
    """No thread can run and no asynchronous operation is pending, yet some threads have not
    finished; the message lists who waits on what."""


class DivergenceError(InterpreterError):
    """Threads that must execute one collective instruction together (shfl.sync, a barrier
    with a thread count) reached different ones, or disagree on its operands."""


class ExecutionError(InterpreterError):
    """Any other fault of a kernel at run time (integer division by zero, a runaway loop, an
    argument the interpreter cannot run with)."""


__all__ = ["InterpreterError", "MemoryFaultError", "RaceError", "UnwrittenReadError",
           "DeadlockError", "DivergenceError", "ExecutionError"]
