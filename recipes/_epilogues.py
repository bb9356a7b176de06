"""Fused GEMM epilogues: functions of an f32 accumulator chunk and its Fragment (see
recipes/_gemm_kernel.py), traced into the kernel after the main loop, before the cast to C's
type (and into recipes/_gemm_splitk.py's reduction of split-K partials). `fused(...)` builds
the epilogue D = act(alpha * acc + beta * C + bias) + residual: a bias (an (M, N) view of an
N-vector, strides (0, 1): one load per column of the thread's fragment), C and a residual
((M, N) tensors, one load per value), alpha and beta (f32 parameters) and an activation:

    relu(x) = max(x, 0)
    silu(x) = h + h tanh(h),  h = x / 2                     (x * sigmoid(x))
    gelu(x) = h + h tanh(u),  h = x / 2,  u = sqrt(2/pi) (x + 0.044715 x^3)
            = 0.5 x (1 + tanh(u))                           (torch's approximate="tanh")

tanh is the SFU's tanh.approx.f32 (lk.tanh: one MUFU, no division; its error <= 2^-10.987), so
silu's and gelu's errors are <= |x| 2^-12 absolute: where 1 + tanh cancels (x < -3, |gelu(x)|
< 4e-3; silu(x) < 0.15) it is absolute, not relative, as in other fast GEMM epilogues. (The
forms x / (1 + 2^(...)) divided by IEEE div.rn.f32, whose slow path ran wherever 2^(...)
overflowed: a 4096^3 gelu epilogue took 1.56x the plain GEMM's time.) torch's exact (erf) gelu
differs from the tanh form by up to 4.7e-4 absolute; the recipe computes the tanh form. Every
step is f32.

A fused epilogue is split in two (FusedEpilogue): `load(fragment)` issues the chunk's global
loads (C, bias, residual) and `apply(acc, loaded)` computes D, so the GEMM kernel can issue a
tile's loads before its main loop (their latency and bandwidth then hide behind the MMAs;
calling the epilogue does both in turn). One input, `staged_operand`'s, the kernel may instead
bring into shared memory by TMA (its tile's first chunk, into the C buffer, during the main
loop); the host then hands it over TMA-ready.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import layoutkit as lk

GELU_C = math.sqrt(2 / math.pi)
GELU_CUBIC = 0.044715


def relu(x):
    return lk.maximum(x, 0.0)


def silu(x):
    half = x * 0.5
    return half + half * lk.tanh(half)


def gelu(x):
    half = x * 0.5
    u = x * (GELU_C + (GELU_C * GELU_CUBIC) * (x * x))
    return half + half * lk.tanh(u)


ACTIVATIONS = {"relu": relu, "silu": silu, "gelu": gelu}      # the host's names for them


def _f32(x):
    return x if x.dtype == lk.f32 else lk.cast(x, lk.f32)


NAMES = ("c", "bias", "residual")          # the epilogue's tensors, in load order


def staged_operand(c, residual, out) -> str | None:
    """The epilogue input the GEMM kernel stages through shared memory by TMA, given the
    element types of C (`c`, None when beta = 0), the residual and the output: C when present
    (it is the output's type), else a residual of the output's type (the C buffer holds one
    chunk of it); None."""
    if c is not None:
        return "c"
    return "residual" if residual is not None and residual == out else None


class FusedEpilogue:
    """acc -> act(alpha * acc + beta * C + bias) + residual (see fused), in two steps: `load`
    the chunk's tensors, `apply` the arithmetic; calling it does both."""

    def __init__(self, bias, act, alpha, c, beta, residual):
        self.bias, self.act, self.alpha, self.c, self.beta, self.residual = \
            bias, act, alpha, c, beta, residual

    def tensors(self) -> dict:
        """The global tensors the epilogue reads by name (NAMES' order, absent ones left out)."""
        return {n: getattr(self, n) for n in NAMES if getattr(self, n) is not None}

    def staged(self, out_dtype) -> str | None:
        """staged_operand of this epilogue's tensors for an output of `out_dtype`."""
        return staged_operand(*(None if t is None else t.dtype for t in (self.c, self.residual)),
                              out_dtype)

    def load_bytes(self, values: int) -> int:
        """Register bytes per thread that `load` holds for a chunk of `values` accumulator
        values (each tensor's element size per value; a bias's repeated rows count too)."""
        return sum(t.dtype.nbytes for t in self.tensors().values()) * values

    def load(self, at, skip=()) -> dict:
        """The chunk's loaded tensors by name (register tensors in the chunk's layout) at
        Fragment `at`, but for the names in `skip` (given to apply by their loader)."""
        return {n: at.load(t) for n, t in self.tensors().items() if n not in skip}

    def apply(self, acc, values: dict):
        """D of the f32 chunk `acc` given the chunk's loaded tensors by name (`load`'s)."""
        x = acc if self.alpha is None else acc * self.alpha
        if "c" in values:
            x = x + _f32(values["c"]) * self.beta
        if "bias" in values:
            x = x + _f32(values["bias"])
        if self.act is not None:
            x = self.act(x)
        if "residual" in values:
            x = x + _f32(values["residual"])
        return x

    def __call__(self, acc, at):
        return self.apply(acc, self.load(at))


def fused(bias=None, act=None, *, alpha=None, c=None, beta=None, residual=None):
    """The epilogue acc -> act(alpha * acc + beta * C + bias) + residual (each part optional):
    `bias` an (M, N) global tensor whose row mode has stride 0, `c` and `residual` (M, N)
    global tensors (bf16 or f32 each, any strides), `alpha` and `beta` f32 scalars (kernel
    parameters; alpha None is 1, beta goes with c), `act` a function of ACTIVATIONS or None.
    A FusedEpilogue: callable as epilogue(acc, fragment), or in its load / apply steps."""
    return FusedEpilogue(bias, act, alpha, c, beta, residual)


@dataclass(frozen=True)
class Epilogue:
    """What a kernel's epilogue computes, as a kernel factory's key: D = act(alpha * acc +
    beta * C + bias) + residual. `c`, `bias`, `residual`: the element type of that tensor
    (lk.bf16 or lk.f32) or None when absent; `activation` a function of ACTIVATIONS or None;
    `scaled`: alpha is a parameter (else 1)."""

    c: object = None
    bias: object = None
    activation: object = None
    residual: object = None
    scaled: bool = False

    def __bool__(self) -> bool:
        return self != Epilogue()

    def parameters(self) -> list[tuple[str, object]]:
        """The kernel parameters (name, annotation) this epilogue reads, in launch order: the
        (M, N) tensors C (`c_in`), bias (an expanded N-vector) and residual, then alpha and
        beta."""
        params = [(name, lk.Tensor[t, 2]) for name, t in
                  (("c_in", self.c), ("bias", self.bias), ("residual", self.residual))
                  if t is not None]
        return params + [(name, lk.f32) for name, present in
                         (("alpha", self.scaled), ("beta", self.c is not None)) if present]

    def staged(self, out_type) -> str | None:
        """staged_operand of this epilogue for an output of `out_type` (the host hands that
        tensor to the kernel TMA-ready)."""
        return staged_operand(self.c, self.residual, out_type)

    def function(self, values: dict):
        """The epilogue (see fused) over the kernel's parameter `values` by name; None when
        this epilogue does nothing."""
        return from_parameters(values, self.activation) if self else None


def from_parameters(values: dict, activation=None):
    """fused(...) of a kernel's epilogue parameters (Epilogue.parameters' names, those absent
    left out) and an activation: what a kernel body calls (a plain function, so the kernel's
    on-disk cache fingerprint can read it; the Epilogue class has generated methods)."""
    return fused(values.get("bias"), activation, alpha=values.get("alpha"),
                 c=values.get("c_in"), beta=values.get("beta"), residual=values.get("residual"))
