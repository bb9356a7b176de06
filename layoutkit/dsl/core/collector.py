"""No cyclic garbage collection while a kernel is traced, checked and lowered.

Making a specialization allocates hundreds of thousands of short-lived objects (sympy
expressions, IR ops, protocol events, PTX instructions), nearly all freed by reference counting
(a GEMM's trace leaves ~2k objects in cycles, its lowering ~6k); the collections those
allocations trigger scan every tracked object of the process, ~0.1 s per full collection once
sympy and a few kernels are loaded. Paused, the cycles wait for the first collection after.
"""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused():
    """The `with` body runs with the cyclic collector disabled (re-enabled after, if it was)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
