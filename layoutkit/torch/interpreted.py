"""The CPU implementation of every layoutkit operator: the recipe's own kernel, run by
layoutkit's CPU interpreter (layoutkit.dsl.interpreter) on the CPU tensors' memory.

Slow but real: each thread of each CTA is interpreted, under the interpreter's race and
deadlock checking, so a CPU result is the kernel's result, not a torch re-implementation.
That is what lets `torch.library.opcheck`, torch.compile and autograd tests run with real
outputs on a machine without a GPU. It is meant for tests and tiny shapes (measured on one
core, tracing included): a 4 x 64 softmax or layernorm about 0.1 s; a 16 x 16 x 16 GEMM (a
cluster of two 384-thread CTAs) or a 16-token attention head 1 to 3 s; the norms' backward
kernels (persistent CTAs of 1024 threads) 3 to 10 s. Inputs past CPU_ELEMENT_LIMIT elements are
refused instead of running for hours.
"""
from __future__ import annotations

import torch

CPU_ELEMENT_LIMIT = 1 << 16     # elements of any one tensor an interpreted call takes


def refuse_large(op: str, **tensors) -> None:
    """ValueError naming the op and the tensor when a CPU tensor has over CPU_ELEMENT_LIMIT
    elements (the interpreter would take minutes to hours)."""
    for name, t in tensors.items():
        if t.numel() > CPU_ELEMENT_LIMIT:
            raise ValueError(
                f"layoutkit.{op}: {name} is a CPU tensor of shape {tuple(t.shape)} "
                f"({t.numel()} elements); on CPU tensors the kernel runs in layoutkit's CPU "
                f"interpreter, which takes at most {CPU_ELEMENT_LIMIT} elements per tensor "
                "(it is for tests): move the tensors to a CUDA device")


def host_array(t: torch.Tensor):
    """A numpy array sharing t's memory and strides (bf16 as its uint16 bit patterns, fp8 as
    uint8 ones: the interpreter's data of those types): what the interpreter reads and
    writes."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8).numpy()
    return t.numpy()


def run(kernel, grid, *args, **constexprs) -> None:
    """kernel[grid](*args, **constexprs) in the CPU interpreter; tensor arguments are CPU
    tensors, read and written in place."""
    from layoutkit.dsl.interpreter import interpret

    def host(x):
        return host_array(x) if isinstance(x, torch.Tensor) else x
    interpret(kernel, grid, *map(host, args), **{k: host(v) for k, v in constexprs.items()})


def run_launches(launches) -> None:
    """A row recipe's `launches(...)` ([(kernel, grid, args, constexprs)], in order) in the CPU
    interpreter: the same description its GPU path launches."""
    for kernel, grid, args, constexprs in launches:
        run(kernel, grid, *args, **constexprs)


def cpu_floats(count: int) -> torch.Tensor:
    """The `floats(count)` of a recipe's `launches` here: an uninitialised f32 CPU tensor."""
    return torch.empty(count, dtype=torch.float32)
