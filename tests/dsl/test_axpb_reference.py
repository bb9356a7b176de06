"""The GPU tests' check of y = a * x + b accepts what the hardware computes, fused or not, and
still refuses a wrong value: exercised on values where the two roundings differ most."""
import numpy as np

from .axpb_reference import ULP, axpb_mismatches


def near_cancellation(a: float, b: float, count: int = 64) -> np.ndarray:
    """f32 values around -b/a, where a*x + b cancels (its bits stepped one ulp at a time)."""
    centre = np.array([-b / a], np.float32).view(np.int32)[0]
    return (centre + np.arange(-count // 2, count // 2, dtype=np.int32)).view(np.float32)


def test_fused_and_unfused_roundings_both_pass():
    for a, b in ((3.0, 1.0), (1.5, -0.25), (-2.0, 0.75)):
        x = np.concatenate([near_cancellation(a, b),
                            np.random.default_rng(0).standard_normal(1000).astype(np.float32)])
        fused = (x.astype(np.float64) * a + b).astype(np.float32)          # FFMA: one rounding
        unfused = x * np.float32(a) + np.float32(b)                         # two roundings
        assert axpb_mismatches(fused, x, a, b).size == 0
        assert axpb_mismatches(unfused, x, a, b).size == 0


def test_the_roundings_differ_beyond_allclose_defaults_near_cancellation():
    """Why the old check (np/torch allclose against the float32 x * a + b) failed on the GPU."""
    x = near_cancellation(3.0, 1.0)
    fused = (x.astype(np.float64) * 3.0 + 1.0).astype(np.float32)
    assert not np.allclose(fused, x * np.float32(3.0) + np.float32(1.0))


def test_a_wrong_value_is_refused():
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    y = (x.astype(np.float64) * 3.0 + 1.0).astype(np.float32)
    for index, wrong in ((0, y[0] * (1 + 8 * ULP) + 8 * ULP), (999, 0.0), (500, np.nan)):
        bad = y.copy()
        bad[index] = wrong
        assert axpb_mismatches(bad, x, 3.0, 1.0).tolist() == [index]
