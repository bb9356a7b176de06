"""layoutkit.tools.benchmarking: the statistics and units (the GPU timing itself runs in benchmarks/)."""
import pytest

from layoutkit.tools.benchmarking import Timing, gbps, interleaved, tflops


def test_median_and_spread_of_a_timing():
    t = Timing("k", (1.0, 2.0, 3.0, 4.0, 100.0))
    assert t.median_ms == 3.0
    assert t.spread == pytest.approx((52.0 - 1.5) / 3.0)


def test_units():
    assert tflops(2 * 8192 ** 3, 1.6) == pytest.approx(687.19, rel=1e-4)
    assert gbps(4.8e9, 1.0) == pytest.approx(4800.0)


@pytest.mark.parametrize("kwargs, message", [({"reps": 0}, "reps = 0"),
                                             ({"warmup": -1}, "warmup = -1")])
def test_bad_repetition_counts_raise_before_touching_a_gpu(kwargs, message):
    with pytest.raises(ValueError, match=message):
        interleaved({"a": lambda: None}, **kwargs)


def test_no_candidates_raises():
    with pytest.raises(ValueError, match="at least one candidate"):
        interleaved({})
