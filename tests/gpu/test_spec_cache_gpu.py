"""GPU tests (marker `gpu`) of the on-disk specialization cache and the autotuner: a new process
with a warm cache launches without tracing and computes exactly what the traced kernel does
(a TMA kernel; gemm_hopper.gemm, whose host code reads the IR's shared memory for its
occupancy query); lk.autotune with the CUDA-event timer picks a config whose result is right.
Each process check runs in its own interpreter with a cache directory of the test's own."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]

CHECKS = {
    "tma_copy": '''
        from tests.dsl import spec_cache_kernels as K
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(200, 72, device="cuda", generator=gen).to(torch.bfloat16)
        out = torch.full_like(a, float("nan"))
        c = torch.full_like(a, float("nan"))
        K.tma_copy[(4, 2)](a, out, c, 200, 72)
        torch.cuda.synchronize()
        assert torch.equal(out, a) and torch.equal(c, a)
        print("RESULT", ",".join(traced) or "-", "/".join(sorted(sources)))
    ''',
    "gemm": '''
        import recipes.gemm_hopper as g
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(1000, 520, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(520, 776, device="cuda", generator=gen).to(torch.bfloat16)
        start = time.perf_counter()
        c = g.gemm(a, b)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        want = (a.double() @ b.double())
        err = ((c.double() - want).abs().max() / want.abs().max()).item()
        assert err < 2e-2, err
        print(f"first gemm() call {first * 1e3:.1f} ms", file=sys.stderr)
        print("RESULT", ",".join(traced) or "-", "/".join(sorted(sources)))
    ''',
}


def run(check: str, cache: Path) -> list[str]:
    script = textwrap.dedent('''
        import sys, time
        import torch
        import layoutkit.dsl as lk
        traced, sources = [], set()
        real = lk.Kernel._trace
        lk.Kernel._trace = lambda self, *a: traced.append(self.name) or real(self, *a)
        made = lk.Kernel._specialization

        def specialization(self, key, values):
            spec = made(self, key, values)
            sources.add(spec.source)
            return spec
        lk.Kernel._specialization = specialization
    ''') + textwrap.dedent(CHECKS[check])
    env = dict(os.environ, LAYOUTKIT_SPEC_CACHE="1", LAYOUTKIT_CACHE_DIR=str(cache),
               PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    sys.stderr.write(done.stderr)
    return done.stdout.split("RESULT", 1)[1].split()


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_a_new_process_with_a_warm_cache_launches_without_tracing(check, tmp_path):
    cold = run(check, tmp_path)
    warm = run(check, tmp_path)
    assert cold[0] != "-" and cold[1] == "traced"      # (gemm: its occupancy probe's key too)
    assert warm == ["-", "disk"]


def test_autotune_with_the_cuda_event_timer(tmp_path, monkeypatch):
    import layoutkit as lk
    from tests.dsl import spec_cache_kernels as K
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "1")
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(tmp_path))
    configs = [lk.Config(BLOCK=256, THREADS=128), lk.Config(BLOCK=1024, THREADS=128),
               lk.Config(BLOCK=2048, THREADS=256, num_warps=8)]
    tuned = lk.autotune(configs, key=["n"], reps=5, warmup=2, workers=2)(
        lk.kernel(K.axpy_tuned.fn, num_warps=4))
    n = 1 << 22
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    want = 2.0 * x.double() + y.double()
    ys = y.clone()
    tuned[lambda meta: (-(-meta["n"] // meta["BLOCK"]),)](x, ys, n, 2.0)
    # the timed runs accumulated into ys; the result of one launch from a fresh copy is exact
    ys = y.clone()
    best = tuned.best(lambda meta: (-(-meta["n"] // meta["BLOCK"]),), x, ys, n, 2.0)
    assert best in configs and set(tuned.report) == {str(c) for c in configs}
    tuned[lambda meta: (-(-meta["n"] // meta["BLOCK"]),)](x, ys, n, 2.0)
    torch.cuda.synchronize()
    assert torch.allclose(ys.double(), want, rtol=1e-6, atol=1e-6)
    print("autotune report (ms):", tuned.report, file=sys.stderr)
