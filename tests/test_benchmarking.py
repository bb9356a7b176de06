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


class _FakeTorch:
    """Just what _ramp_clocks touches: products and fills counted, one current device."""
    bfloat16 = int32 = None

    def __init__(self):
        self.products = self.fills = self.syncs = 0
        torch = self

        class Tensor:
            def to(self, dtype):
                return self

            def __matmul__(self, other):
                torch.products += 1
                return self

            def fill_(self, value):
                torch.fills += 1

        class Cuda:
            @staticmethod
            def current_device():
                return 7

            @staticmethod
            def synchronize():
                torch.syncs += 1

        self.cuda = Cuda
        self.randn = self.empty = lambda *a, **k: Tensor()


def test_the_clock_ramp_keeps_the_gpu_busy_once_per_device(monkeypatch):
    from layoutkit.tools import benchmarking
    monkeypatch.setattr(benchmarking, "RAMP_SECONDS", 0.02)
    monkeypatch.setattr(benchmarking, "_ramped", set())
    fake = _FakeTorch()
    benchmarking._ramp_clocks(fake)
    assert fake.products >= 4 and fake.fills >= 4 and fake.syncs >= 1
    done = (fake.products, fake.fills, fake.syncs)
    benchmarking._ramp_clocks(fake)
    assert (fake.products, fake.fills, fake.syncs) == done
