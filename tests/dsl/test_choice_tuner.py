"""lk.ChoiceTuner (layoutkit.dsl.core.choice_tuner) on the fake GPU with a fake timer: a
recipe-level choice among dataclass configs, each candidate's launches compiled and timed, the
fastest kept per key in memory and on disk (a new tuner, as in a new process, reads it), the
default for a key never swept, candidates that do not compile dropped, corrupt entries survived,
and every misuse named. recipes.gemm_hopper's TUNER is the user of it (its sweep on the H200:
`layoutkit tune gemm_hopper`)."""
import json
from dataclasses import dataclass

import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.core.choice_tuner import ChoiceTuner

from . import spec_cache_kernels as K
from .fake_gpu import BASE, FakeGPU, Tensor
from .test_autotune import FakeTimer


@dataclass(frozen=True)
class Choice:
    """A recipe's config: the block size and whether to run the kernel twice (two launches)."""
    BLOCK: int = 256
    TWICE: bool = False


KERNEL = lk.kernel(K.axpy_body, num_warps=4)


def launches(cfg: Choice, n: int = 4096):
    x, y = Tensor(BASE, shape=(n,)), Tensor(BASE + (1 << 24), shape=(n,))
    step = (KERNEL, (-(-n // cfg.BLOCK),), (x, y, n, 2.0), {"BLOCK": cfg.BLOCK})
    return [step, step] if cfg.TWICE else [step]


def tuner(timer, default=lambda key: Choice(), sources=(K.axpy_body,)):
    return ChoiceTuner("tests.axpy_choice", Choice, default=default, sources=sources,
                       timer=timer, reps=2, warmup=1, workers=1, progress=False)


@pytest.fixture
def gpu(monkeypatch):
    return FakeGPU(monkeypatch, [KERNEL])


def test_the_default_until_a_sweep_then_the_winner_in_every_process(cache, gpu):
    seen = []

    def default(key):
        seen.append(key)
        return Choice(BLOCK=512)
    timer = FakeTimer({"Choice(BLOCK=256, TWICE=False)": 2.0,
                       "Choice(BLOCK=512, TWICE=True)": 1.0})
    t = tuner(timer, default)
    assert t.choose((4096, "N")) == Choice(BLOCK=512) and seen == [(4096, "N")]
    assert t.choose((4096, "N")) == Choice(BLOCK=512) and len(seen) == 1     # kept per key
    assert timer.calls == [] and not (cache.parent / "autotune").exists()
    space = [Choice(), Choice(BLOCK=512, TWICE=True)]
    assert t.tune((4096, "N"), {c: launches(c) for c in space}) == space[1]
    assert timer.calls == [sorted(map(str, space))]
    assert len(gpu.calls) == 3 * 1 + 3 * 2                    # warm-up + reps, each launch
    assert {c.grid for c in gpu.calls} == {(16, 1, 1), (8, 1, 1)}
    assert t.choose((4096, "N")) == space[1] and t.report == {str(space[0]): 2.0,
                                                               str(space[1]): 1.0}
    again = tuner(FakeTimer({}), default)                     # another process's tuner
    assert again.choose((4096, "N")) == space[1] and len(seen) == 1
    assert again.choose((1000, "N")) == Choice(BLOCK=512) and seen[-1] == (1000, "N")
    (path,) = (cache.parent / "autotune").iterdir()
    assert path.name.startswith("tests.axpy_choice-")
    entry = json.loads(path.read_text())[repr((4096, "N"))]
    assert entry["config"] == {"BLOCK": 512, "TWICE": True}


def test_a_candidate_that_does_not_compile_is_dropped_and_none_is_an_error(cache, gpu):
    timer = FakeTimer({"Choice(BLOCK=512, TWICE=False)": 1.0})
    t = tuner(timer)
    bad, good = Choice(BLOCK=100), Choice(BLOCK=512)          # 100: not 128 threads' multiple
    assert t.tune((1,), {bad: launches(bad), good: launches(good)}) == good
    assert set(t.report) == {str(bad), str(good)} and isinstance(t.report[str(bad)], str)
    with pytest.raises(lk.DSLError, match=r"tune tests.axpy_choice: no config compiles:\n"
                       r"  Choice\(BLOCK=100, TWICE=False\): "):
        t.tune((2,), {bad: launches(bad)})


def test_corrupt_or_foreign_entries_read_as_absent(cache, gpu):
    t = tuner(FakeTimer({"Choice(BLOCK=512, TWICE=False)": 1.0}))
    t.tune((1,), {Choice(BLOCK=512): launches(Choice(BLOCK=512))})
    (path,) = (cache.parent / "autotune").iterdir()
    table = json.loads(path.read_text())
    table[repr((2,))] = {"config": {"BLOCK": 512, "STAGES": 3}}     # a field the type lacks
    table[repr((3,))] = {"config": "BLOCK=512"}
    table[repr((4,))] = ["not", "an", "entry"]
    path.write_text(json.dumps(table))
    again = tuner(FakeTimer({}), default=lambda key: Choice(BLOCK=1024))
    assert [again.choose((i,)) for i in (1, 2, 3, 4)] == \
        [Choice(BLOCK=512)] + [Choice(BLOCK=1024)] * 3
    path.write_text("{not json")
    assert tuner(FakeTimer({}), default=lambda key: Choice()).choose((1,)) == Choice()


def test_the_file_follows_the_sources_and_the_cache_switch(cache, gpu, monkeypatch):
    t = tuner(FakeTimer({"Choice(BLOCK=512, TWICE=False)": 1.0}))
    t.tune((1,), {Choice(BLOCK=512): launches(Choice(BLOCK=512))})
    other = tuner(FakeTimer({}), sources=(K.axpy_tuned,))     # other kernel source: other file
    assert other.choose((1,)) == Choice()
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "0")            # the cache off: nothing read
    assert tuner(FakeTimer({})).choose((1,)) == Choice()


def test_misuse_is_named():
    with pytest.raises(lk.KernelDefinitionError, match="config_type must be a dataclass type"):
        ChoiceTuner("x", dict, default=lambda key: {})
    with pytest.raises(lk.KernelDefinitionError, match="default must be a function of the key"):
        ChoiceTuner("x", Choice, default=Choice())
    with pytest.raises(lk.KernelDefinitionError, match="sources are Python functions or "
                       "lk.kernels, got 'gemm_tiles'"):
        ChoiceTuner("x", Choice, default=lambda key: Choice(), sources=("gemm_tiles",))
    t = tuner(FakeTimer({}), default=lambda key: "BLOCK=256")
    with pytest.raises(lk.KernelDefinitionError, match=r"the default of key \(1,\) is "
                       r"'BLOCK=256', not a Choice"):
        t.choose((1,))
    with pytest.raises(lk.KernelDefinitionError, match="candidates must be a non-empty dict"):
        t.tune((1,), {})
    with pytest.raises(lk.KernelDefinitionError, match="candidates must be a non-empty dict"):
        t.tune((1,), {"BLOCK=256": []})


def test_gemm_chooses_through_its_tuner():
    from recipes import gemm_hopper as gh
    assert isinstance(gh.TUNER, ChoiceTuner) and gh.TUNER.config_type is gh.Config
    key = (4096, 4096, 4096, "N", 132, "fake H200")
    assert gh.TUNER.default(key) == gh.config_for(4096, 4096, 4096, 132)
    assert gh.TUNER.default((16, 4096, 4096, "K", 132, "x")) == gh.config_for(16, 4096, 4096, 132)
