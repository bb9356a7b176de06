"""benchmarks/bench_gemm_fp8.py and recipes/gemm_fp8.benchmark's control flow without a GPU: the
configs each option times, --promote's rule, the table's error columns, a failed check printed as
a row with the AssertionError after the table, the --accuracy table. The GPU calls are replaced
by float64 products on the CPU (torch's fp8 dtypes work there)."""
import pytest

from tests.benchmark_scripts import loaded_benchmark

torch = pytest.importorskip("torch")

from recipes import gemm_fp8  # noqa: E402


@pytest.fixture
def bench(monkeypatch):
    with loaded_benchmark("bench_gemm_fp8.py") as module:
        monkeypatch.setattr(module, "load_recipe", lambda name: gemm_fp8)
        yield module


@pytest.fixture
def on_cpu(monkeypatch):
    """torch.randn / rand on the CPU whatever the device; gemm_fp8 and torch._scaled_mm as the
    float64 reference (gemm_fp8 off by 2^-5 for a PROMOTE = 0 config at K > 1000); timings of
    1 ms; the bare launches run the same reference."""
    randn, rand = torch.randn, torch.rand
    monkeypatch.setattr(torch, "randn", lambda *a, device=None, **k: randn(*a, **k))
    monkeypatch.setattr(torch, "rand", lambda *a, device=None, **k: rand(*a, **k))

    def ours(a, b, sa=None, sb=None, out=None, *, out_dtype=None, config=None):
        d = gemm_fp8.reference(a, b, sa, sb)
        if config is not None and gemm_fp8.promotion(config) == 0 and a.shape[1] > 1000:
            d = d * (1 + 2 ** -5)
        return d.to(out_dtype or torch.bfloat16)

    def scaled_mm(a, b, sa, sb, out_dtype=None, use_fast_accum=False):
        return gemm_fp8.reference(a, b, sa, sb).to(out_dtype)

    class Timing:
        median_ms = 1.0
    import layoutkit.tools.benchmarking as benchmarking
    monkeypatch.setattr(gemm_fp8, "gemm_fp8", ours)
    monkeypatch.setattr(gemm_fp8, "bare_launches",
                        lambda a, b, sa, sb, config: lambda: ours(a, b, sa, sb, config=config))
    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    monkeypatch.setattr(benchmarking, "interleaved",
                        lambda fns, reps: {name: (f(), Timing())[1] for name, f in fns.items()})


def test_each_option_times_its_configs(bench, monkeypatch):
    seen = []
    monkeypatch.setattr(gemm_fp8, "benchmark",
                        lambda reps, shapes, configs: seen.append((shapes, configs)))
    bench.main(["--shapes", "main"])
    bench.main(["--shapes", "main", "--sweep", "--fast-accum", "--promote", "2,8"])
    assert seen[0] == ([(4096, 4096, 4096), (8192, 8192, 8192)], None)
    configs = seen[1][1]
    assert configs[:len(gemm_fp8.CONFIGS)] == list(gemm_fp8.CONFIGS)
    assert configs[len(gemm_fp8.CONFIGS):-2] == list(gemm_fp8.FAST_ACCUM_CONFIGS)
    assert [c.PROMOTE for c in configs[-2:]] == [2, 8]
    assert configs[-1].BN == gemm_fp8.CONFIGS[0].BN


@pytest.mark.parametrize("argv, message", [
    (["--promote", "0"], "error: --promote 0: k-steps per promotion, each >= 1"),
    (["--promote", "4,-1"], "error: --promote 4,-1: k-steps per promotion, each >= 1"),
    (["--part", "3/2"], "error: --part 3/2: I/N with 1 <= I <= N")])
def test_bad_options_are_refused(bench, argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err


def test_a_failed_check_is_a_row_and_raises_after_the_table(on_cpu, capsys):
    configs = [gemm_fp8.CONFIGS[0], gemm_fp8.FAST_ACCUM_CONFIGS[0]]
    with pytest.raises(AssertionError, match=r"gemm_fp8 16x32x2000 tensorwise .*PROMOTE=0.*: "
                                             r"error 0\.03"):
        gemm_fp8.benchmark(reps=1, shapes=[(16, 32, 200), (16, 32, 2000)], configs=configs)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| error | cuBLASLt error | bare | ratio (bare) |")
    assert len(lines) == 2 + 8
    failed = [x for x in lines if "FAILED" in x]
    assert len(failed) == 2 and all("16x32x2000" in x and "PROMOTE=0" in x for x in failed)
    timed = [x for x in lines[2:] if "FAILED" not in x]
    assert all(x.split(" | ")[6] == "1.000" for x in timed)            # ratio vs cuBLASLt
    assert all(x.split(" | ")[8] == x.split(" | ")[9] for x in timed)      # errors
    assert all(x.split(" | ")[10:] == ["0.0", "1.000 |"] for x in timed)  # bare: same time


def test_accuracy_table(bench, on_cpu, capsys):
    bench.accuracy(gemm_fp8, [(16, 32, 2000)], [0, 4])
    header, rule, row = capsys.readouterr().out.splitlines()
    assert header == "| M x N x K | PROMOTE 0 | PROMOTE 4 | cuBLASLt | fast-accum |"
    cells = [float(x) for x in row.strip("| ").split(" | ")[1:]]
    assert cells[0] > 2 ** -6 and cells[1] == cells[2] == cells[3] < 2 ** -20
