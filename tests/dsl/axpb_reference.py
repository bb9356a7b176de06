"""What the GPU may write for y = a * x + b in f32, and the check the GPU tests make of it.

ptxas contracts the axpb kernel's `mul.f32` + `add.f32` (no rounding modifier: contraction
allowed, PTX ISA "mul"/"add") into one FFMA, which rounds the exact a*x + b once; torch's
`x * a + b` rounds twice. Where a*x + b nearly cancels (x near -b/a), the two differ by up to
half an ulp of a*x, which is far beyond torch.allclose's default atol=1e-8: a test comparing the
kernel with the float32 `x * a + b` fails for about a third of random 1000-element draws (the
GPU failure of test_unaligned_pointer_uses_the_scalar_specialization, whose unseeded randn
made it depend on what ran before it in the process). The check here compares with the exact
value and a bound that either rounding meets.
"""
import numpy as np

ULP = 2.0 ** -23      # f32 machine epsilon: a rounding errs by at most ULP/2 of its value


def axpb_exact(x, a: float, b: float) -> np.ndarray:
    """a * x + b in float64: exact for f32 x, a and b up to the last ulp of the result."""
    return np.asarray(x, np.float64) * a + b


def axpb_tolerance(x, a: float, b: float) -> np.ndarray:
    """Per element, the largest |y - exact| of a fused (one rounding) or unfused (a*x rounded,
    then the sum) f32 evaluation: ULP/2 of a*x plus ULP/2 of the result <= ULP * (|a*x| + |b|)."""
    return ULP * (np.abs(np.asarray(x, np.float64) * a) + abs(b)) + np.finfo(np.float32).tiny


def axpb_mismatches(y, x, a: float, b: float) -> np.ndarray:
    """Indices where y is no f32 evaluation of a * x + b (empty when all match)."""
    y = np.asarray(y, np.float64)
    return np.flatnonzero(~(np.abs(y - axpb_exact(x, a, b)) <= axpb_tolerance(x, a, b)))
