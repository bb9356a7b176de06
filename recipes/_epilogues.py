"""Fused GEMM epilogues: functions of an f32 accumulator chunk and its Fragment (see
recipes/_gemm_kernel.py), traced into the kernel after the main loop, before the cast to C's
type. `fused(bias, activation)` builds the epilogue of a bias (an (M, N) view of an N-vector,
strides (0, 1): one load per column of the thread's fragment) and an activation function:

    relu(x) = max(x, 0)
    silu(x) = x / (1 + 2^(-x log2 e))                       (x * sigmoid(x))
    gelu(x) = x / (1 + 2^(-2 log2 e * u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
            = 0.5 x (1 + tanh(u))                           (torch's approximate="tanh")

2^y is the SFU's ex2.approx (lk.exp2); at the extremes it gives 0 or inf, and the quotients
the exact limits (x or -0). Every step is f32.
"""
from __future__ import annotations

import math

import layoutkit as lk

LOG2E = math.log2(math.e)
GELU_C = math.sqrt(2 / math.pi)
GELU_CUBIC = 0.044715


def relu(x):
    return lk.maximum(x, 0.0)


def silu(x):
    return x / (1.0 + lk.exp2(x * -LOG2E))


def gelu(x):
    u = GELU_C * (x + GELU_CUBIC * x * x * x)
    return x / (1.0 + lk.exp2(u * (-2 * LOG2E)))


ACTIVATIONS = {"relu": relu, "silu": silu, "gelu": gelu}      # the host's names for them


def fused(bias=None, act=None):
    """The epilogue acc -> act(acc + bias) (each part optional): `bias` an (M, N) global tensor
    whose row mode has stride 0 (bf16 or f32), `act` a function of ACTIVATIONS or None."""
    def epilogue(acc, at):
        x = acc
        if bias is not None:
            b = at.load(bias)
            x = x + (b if b.dtype == lk.f32 else lk.cast(b, lk.f32))
        return x if act is None else act(x)
    return epilogue
