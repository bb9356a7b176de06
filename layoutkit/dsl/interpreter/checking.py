"""`check_on_cpu`: run a kernel under the interpreter with several seeds and compare its outputs
with a reference - what a recipe's `check_cpu()` calls (`layoutkit run RECIPE --cpu`).

Each seed runs on fresh copies of the array arguments (a strided view, such as a Tensor
argument's slice, is copied with the memory it spans, so its strides stay); the outputs must be
bit-identical across seeds (a result that depends on the interleaving is a race the detector
missed) and within `tolerance` of the reference under `error(got, want)` (default: the largest
absolute difference relative to the largest |want|). bf16 and fp8 outputs (uint16 / uint8 bit
patterns for a Pointer[bf16] or Tensor[bf16, n] parameter, ...) are compared as their float
values.
"""
from __future__ import annotations

import numpy as np

from ..core.kernel import Kernel
from ..core.types import PointerType, TensorType
from .launch import from_bf16, from_fp8, interpret, tensor_span


def relative_to_max(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (0 when both are all zero)."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    diff = float(np.max(np.abs(got - want))) if want.size else 0.0
    return diff / scale if scale else diff


def _fresh(a):
    """A copy of an array argument with the same strides (a copy of the memory it spans)."""
    if not isinstance(a, np.ndarray):
        return a
    if a.flags.c_contiguous or any(s < 0 for s in a.strides):
        return a.copy()
    return np.lib.stride_tricks.as_strided(tensor_span("", a).copy(), a.shape, a.strides)


def _values(array: np.ndarray, dtype) -> np.ndarray:
    if dtype.name == "bf16" and array.dtype == np.uint16:
        return from_bf16(array).astype(np.float64)
    if dtype.storage_only and array.dtype == np.uint8:
        return from_fp8(array, dtype).astype(np.float64)
    return array.astype(np.float64)


def check_on_cpu(kernel: Kernel, grid, *args, expect: dict, tolerance: float = 0.0,
                 error=relative_to_max, seeds=(0, 1), **kwargs) -> float:
    """Run `kernel[grid](*args, **kwargs)` on the CPU once per seed; `expect` maps output
    parameter names to reference arrays. Returns the worst error; AssertionError when an
    output differs between seeds or exceeds `tolerance`."""
    names = [p.name for p in kernel.params]
    unknown = sorted(set(expect) - set(names))
    if unknown:
        raise ValueError(f"check_on_cpu: kernel {kernel.name} has no parameter {unknown[0]!r}; "
                         f"parameters: {', '.join(names)}")
    positions = {name: i for i, name in enumerate(names)}
    worst, first = 0.0, None
    for seed in seeds:
        fresh = [_fresh(a) for a in args]
        given = {k: _fresh(v) for k, v in kwargs.items()}
        interpret(kernel, grid, *fresh, seed=seed, **given)
        outputs = {}
        for name in expect:
            at = positions[name]
            outputs[name] = fresh[at] if at < len(fresh) else given[name]
        if first is None:
            first = (seed, outputs)
        else:
            for name, array in outputs.items():
                if not np.array_equal(array, first[1][name], equal_nan=True):
                    bad = np.argwhere(array != first[1][name])[0]
                    raise AssertionError(
                        f"kernel {kernel.name}: output {name} at {tuple(int(i) for i in bad)} "
                        f"differs between seed {first[0]} and seed {seed}: the result depends on "
                        "the interleaving of threads (an unsynchronized access)")
        for name, array in outputs.items():
            dtype = kernel.params[positions[name]].annotation
            dtype = dtype.dtype if isinstance(dtype, (PointerType, TensorType)) else dtype
            got, want = _values(array, dtype), np.asarray(expect[name], dtype=np.float64)
            err = error(got.reshape(want.shape), want)
            if not err <= tolerance:
                raise AssertionError(f"kernel {kernel.name} on the CPU interpreter (seed {seed}): "
                                     f"output {name} has error {err:.3g} over the tolerance "
                                     f"{tolerance:.3g}")
            worst = max(worst, err)
    return worst


__all__ = ["check_on_cpu", "relative_to_max"]
