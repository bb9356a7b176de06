"""@lk.autotune (layoutkit.dsl.core.autotune) on the fake GPU with a fake timer: every candidate
compiled and timed on the call's arguments, the fastest launched, the winner kept per key in
memory and on disk, failing candidates dropped, and every misuse named."""
import json

import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.core.autotune import Autotuner, Config, autotune

from . import spec_cache_kernels as K
from .fake_gpu import BASE, FakeGPU, Tensor

CONFIGS = [Config(BLOCK=256, THREADS=128), Config(BLOCK=512, THREADS=128),
           Config(BLOCK=1024, THREADS=256, num_warps=8)]
LABELS = ["BLOCK=256, THREADS=128", "BLOCK=512, THREADS=128",
          "BLOCK=1024, THREADS=256, num_warps=8"]


class FakeTimer:
    """Times each candidate by a table (ms per BLOCK value), launching it `reps` times."""

    def __init__(self, ms_by_label):
        self.ms, self.calls = ms_by_label, []

    def __call__(self, candidates, reps, warmup):
        self.calls.append(sorted(candidates))
        for launch in candidates.values():
            for _ in range(warmup + reps):
                launch()
        return {label: self.ms[label] for label in candidates}


def grid(meta):
    return (-(-meta["n"] // meta["BLOCK"]),)


def tensors(n):
    return Tensor(BASE, shape=(n,)), Tensor(BASE + (1 << 24), shape=(n,))


def tuner(timer, **options):
    kernel = lk.kernel(K.axpy_tuned.fn, num_warps=4)
    return autotune(CONFIGS, key=["n"], timer=timer, reps=2, warmup=1, workers=1,
                    **options)(kernel)


@pytest.fixture
def gpu(monkeypatch):
    def install(*kernels):
        return FakeGPU(monkeypatch, kernels)
    return install


def test_the_fastest_config_runs_and_is_kept(cache, gpu):
    timer = FakeTimer(dict(zip(LABELS, (3.0, 2.0, 1.0))))
    t = tuner(timer)
    fake = gpu(t.kernel, t.kernel_for(CONFIGS[2]))
    x, y = tensors(4096)
    t[grid](x, y, 4096, 2.0)
    assert timer.calls == [sorted(LABELS)]
    assert len(fake.calls) == 3 * 3 + 1                  # 3 timed runs each, then the winner
    assert sorted({(c.grid, c.block) for c in fake.calls[:9]}) == \
        [((4, 1, 1), 256), ((8, 1, 1), 128), ((16, 1, 1), 128)]
    winner = fake.calls[-1]
    assert (winner.grid, winner.block, winner.spec.key[4]) == ((4, 1, 1), 256, ("int", 1024))
    t[grid](x, y, 4096, 3.0)                             # same key: no tuning
    assert len(timer.calls) == 1 and len(fake.calls) == 11
    assert t.report == dict(zip(LABELS, (3.0, 2.0, 1.0)))


def test_a_new_key_tunes_again_and_a_new_process_reads_the_winner(cache, gpu):
    timer = FakeTimer(dict(zip(LABELS, (1.0, 2.0, 3.0))))
    t = tuner(timer)
    fake = gpu(t.kernel, t.kernel_for(CONFIGS[2]))
    for n in (4096, 1000):
        x, y = tensors(n)
        t[grid](x, y, n, 2.0)
    assert len(timer.calls) == 2
    (path,) = (cache.parent / "autotune").iterdir()
    table = json.loads(path.read_text())
    assert [entry["config"] for entry in table.values()] == [LABELS[0]] * 2
    fresh_timer = FakeTimer({})
    again = tuner(fresh_timer)                            # another process's tuner
    fake.kernels += [again.kernel]
    x, y = tensors(1000)
    again[grid](x, y, 1000, 2.0)
    assert fresh_timer.calls == [] and fake.calls[-1].spec.key[4] == ("int", 256)


def test_a_config_that_does_not_compile_is_dropped(cache, gpu):
    configs = [Config(BLOCK=100), Config(BLOCK=512)]      # 100: not 128 threads' multiple
    timer = FakeTimer({"BLOCK=512": 1.0})
    t = autotune(configs, key="n", timer=timer, reps=1, warmup=0, workers=1)(
        lk.kernel(K.axpy_body, num_warps=4))
    gpu(t.kernel)
    x, y = tensors(4096)
    assert t.best(grid, x, y, 4096, 2.0) == configs[1]
    assert set(t.report) == {"BLOCK=100", "BLOCK=512"}
    assert "LayoutError" in t.report["BLOCK=100"] or "TraceError" in t.report["BLOCK=100"] \
        or "spec_cache_kernels.py" in t.report["BLOCK=100"]


def test_no_config_compiling_is_an_error_naming_each(cache, gpu):
    t = autotune([Config(BLOCK=100)], key="n", timer=FakeTimer({}), workers=1)(
        lk.kernel(K.axpy_body, num_warps=4))
    gpu(t.kernel)
    x, y = tensors(4096)
    with pytest.raises(lk.DSLError, match="autotune axpy_body: no config compiles:\n  BLOCK=100: "):
        t[grid](x, y, 4096, 2.0)


def test_candidates_compile_in_parallel_workers(cache, gpu):
    timer = FakeTimer(dict(zip(LABELS, (2.0, 1.0, 3.0))))
    t = tuner(timer, progress=False)
    t.workers = 2
    gpu(t.kernel, t.kernel_for(CONFIGS[2]))
    x, y = tensors(4096)
    t[grid](x, y, 4096, 2.0)
    sources = {s.source for k in (t.kernel, t.kernel_for(CONFIGS[2])) for s in k._cache.values()}
    assert sources == {"precompiled"}


@pytest.mark.parametrize("configs, key, message", [
    ([], ["n"], "configs must be a non-empty list of lk.Config"),
    ([Config(n=3)], ["n"], "config n=3 sets 'n', which is not a constexpr of the kernel "
                           "(constexprs: BLOCK)"),
    ([Config(BLOCK=256)], ["m"], "key names 'm', which is not a parameter (x, y, n, a, BLOCK)"),
])
def test_misuse_is_named(configs, key, message):
    with pytest.raises(lk.KernelDefinitionError, match=message.replace("(", r"\(")
                       .replace(")", r"\)")):
        autotune(configs, key)(lk.kernel(K.axpy_body, num_warps=4))
    with pytest.raises(lk.KernelDefinitionError, match="decorates an @lk.kernel"):
        Autotuner(K.axpy_body, CONFIGS, ["n"])


def test_config_text():
    assert str(Config(BLOCK=256, STAGES=2, num_warps=8)) == "BLOCK=256, STAGES=2, num_warps=8"
    assert str(Config(BN=128, cluster=[2, 1, 1])) == "BN=128, cluster=(2, 1, 1)"
    assert str(Config()) == "(defaults)" and Config(A=1) == Config(A=1)


def test_a_config_may_set_the_cluster_shape():
    t = tuner(FakeTimer({}))
    clustered = t.kernel_for(Config(BLOCK=256, THREADS=128, cluster=2))
    assert clustered.cluster == (2, 1, 1) and clustered.num_warps == 4
    assert t.kernel_for(Config(BLOCK=512, THREADS=128, cluster=(2, 1, 1))) is clustered
    assert t.kernel_for(CONFIGS[0]) is t.kernel
    with pytest.raises(lk.KernelDefinitionError, match=r"cluster=\(9, 1, 1\) has 9 CTAs"):
        t.kernel_for(Config(BLOCK=256, THREADS=128, cluster=9))


def test_a_default_runs_without_a_sweep_until_tune_runs_one(cache, gpu):
    timer = FakeTimer(dict(zip(LABELS, (3.0, 1.0, 2.0))))
    seen = []

    def default(args):
        seen.append((args["n"], args["BLOCK"]))
        return CONFIGS[2] if args["n"] > 2048 else CONFIGS[0]
    t = tuner(timer, default=default)
    fake = gpu(t.kernel, t.kernel_for(CONFIGS[2]))
    x, y = tensors(4096)
    t[grid](x, y, 4096, 2.0)                             # the default: no compile sweep, no timing
    assert timer.calls == [] and seen == [(4096, None)] and t.report == {}
    assert (fake.calls[-1].grid, fake.calls[-1].block) == ((4, 1, 1), 256)
    t[grid](x, y, 4096, 2.0)                             # kept per key: asked once
    assert seen == [(4096, None)] and len(fake.calls) == 2
    assert not (cache.parent / "autotune").exists()      # a default is not a winner on disk
    assert t.tune(grid, x, y, 4096, 2.0) == CONFIGS[1]   # the sweep, now
    assert timer.calls == [sorted(LABELS)] and t.report == dict(zip(LABELS, (3.0, 1.0, 2.0)))
    t[grid](x, y, 4096, 2.0)
    assert (fake.calls[-1].grid, fake.calls[-1].block) == ((8, 1, 1), 128)
    again = tuner(FakeTimer({}), default=default)        # another process: the tuned winner
    fake.kernels += [again.kernel]
    again[grid](x, y, 4096, 2.0)
    assert seen == [(4096, None)] and fake.calls[-1].spec.key[4] == ("int", 512)
    small = tensors(1000)                                # a key never tuned: its default
    again[grid](*small, 1000, 2.0)
    assert seen[-1] == (1000, None) and fake.calls[-1].spec.key[4] == ("int", 256)


def test_a_constant_default_and_bad_defaults():
    t = tuner(FakeTimer({}), default=CONFIGS[1])
    assert t._default(()) == CONFIGS[1]
    with pytest.raises(lk.KernelDefinitionError, match="default must be an lk.Config or a "
                       "function of the arguments returning one, got 3"):
        tuner(FakeTimer({}), default=3)
    with pytest.raises(lk.KernelDefinitionError, match=r"config n=1 sets 'n', which is not a "
                       "constexpr"):
        tuner(FakeTimer({}), default=Config(n=1))
    t = tuner(FakeTimer({}), default=lambda args: "BLOCK=256")
    with pytest.raises(lk.KernelDefinitionError, match="the default function returned "
                       "'BLOCK=256', not an lk.Config"):
        t._default((None,) * 5)


def test_launch_remembered_launches_what_the_tuner_chooses_and_forgets_at_a_sweep(cache, gpu):
    timer = FakeTimer(dict(zip(LABELS, (3.0, 1.0, 2.0))))
    t = tuner(timer, default=CONFIGS[2])
    fake = gpu(t.kernel, t.kernel_for(CONFIGS[2]))
    x, y = tensors(4096)
    facts = ("n", 4096)
    for _ in range(2):
        t.launch_remembered(facts, grid, x, y, 4096, 2.0)
    assert timer.calls == [] and len(t._remembered) == 1
    assert [(c.grid, c.block, c.spec.key[4]) for c in fake.calls] == \
        [((4, 1, 1), 256, ("int", 1024))] * 2
    t[grid](x, y, 4096, 2.0)                             # the same launch through t[grid]
    assert fake.calls[-1].spec is fake.calls[0].spec and fake.calls[-1].packed == \
        fake.calls[0].packed
    assert t.tune(grid, x, y, 4096, 2.0) == CONFIGS[1] and t._remembered == {}
    t.launch_remembered(facts, grid, x, y, 4096, a=2.0)
    assert (fake.calls[-1].grid, fake.calls[-1].block) == ((8, 1, 1), 128)
    with pytest.raises(lk.KernelArgumentError, match="has no parameter 'b'"):
        t.launch_remembered(facts, grid, x, y, 4096, 2.0, b=1)
