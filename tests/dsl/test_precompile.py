"""kernel.precompile (layoutkit.dsl.core.precompile): specializations made in forked workers come
back as the ones a trace here makes, fill the on-disk cache, and a failing call raises its own
error."""
import io
import re

import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.core.progress import Progress

from . import spec_cache_kernels as K
from .test_spec_cache import again, entries

T, R = lk.TensorSpec(lk.f32, (4096,)), lk.TensorSpec(lk.f32, (4095,))
CALLS = [(T, T, 2.0, 4), dict(x=R, y=T, a=1.0, VALUES=4), (T, T, 2.0, 2), (T, T, 3.0, 4)]


def test_workers_make_what_a_trace_here_makes(cache):
    k = again(K.scale)
    made = k.precompile(CALLS, workers=2)
    assert [s.source for s in made] == ["precompiled", "precompiled", "precompiled",
                                        "precompiled"]
    assert made[0] is made[3]                        # one key, one specialization
    here = again(K.scale)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYOUTKIT_SPEC_CACHE", "0")
        traced = [here.specialize(*c) if isinstance(c, tuple) else here.specialize(**c)
                  for c in CALLS]
    assert [s.ptx for s in made] == [s.ptx for s in traced]
    assert [s.cubin.data for s in made] == [s.cubin.data for s in traced]
    assert [s.param_specs() for s in made] == [s.param_specs() for s in traced]
    assert len(entries(cache)) == 3                 # the workers stored them
    assert {again(K.scale).specialize(*c).source for c in CALLS if isinstance(c, tuple)} \
        == {"disk"}


def test_with_the_cache_off_the_entries_still_come_back(cache, monkeypatch):
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "0")
    made = again(K.scale).precompile(CALLS[:2], workers=2)
    assert [s.source for s in made] == ["precompiled"] * 2 and not cache.exists()


def test_hidden_tensor_maps_come_back_rebuilt(cache):
    B = lk.TensorSpec(lk.bf16, (256, 128))
    k = again(K.tma_copy)
    made = k.precompile([(B, B, lk.Pointer[lk.bf16], 256, 128),
                         (lk.TensorSpec(lk.bf16, (200, 72), strides=(80, 1)), B,
                          lk.Pointer[lk.bf16], 200, 72)], workers=2)
    assert [[name for name, _ in s.plan.hidden] for s in made] == [["tmap_a", "tmap_c"]] * 2
    assert [type(r).__name__ for _, r in made[1].plan.hidden] == ["MapResolver"] * 2


def test_what_is_held_or_on_disk_is_not_made_again(cache):
    k = again(K.scale)
    first = k.specialize(*CALLS[0])
    first.cubin
    assert k.precompile(CALLS[:1], workers=2)[0] is first
    assert again(K.scale).precompile(CALLS[:1], workers=2)[0].source == "disk"


def test_serial_with_one_worker(cache):
    made = again(K.scale).precompile(CALLS[:2], workers=1)
    assert [s.source for s in made] == ["traced", "traced"] and len(entries(cache)) == 2


def test_a_failing_call_raises_its_own_error_from_here(cache):
    k = again(K.scale)
    with pytest.raises(lk.TraceError) as info:
        k.precompile([CALLS[0], (T, T, 2.0, 0)], workers=2)     # Layout(0): no layout
    assert "spec_cache_kernels.py:18: LayoutError: Layout: shape = 0" in str(info.value)
    assert k.key(*CALLS[0]) in k._cache                  # the good one was kept


@pytest.mark.parametrize("specs, message", [
    ((T, T, 2.0, 4), "precompile takes a list of argument specs (tuples or dicts), got tuple"),
    ([T], "precompile: item 0 is a TensorSpec; give a tuple of arguments or a dict"),
    ([(T, T)], "kernel scale: missing argument"),
])
def test_argument_specs_are_checked(specs, message):
    with pytest.raises(lk.KernelArgumentError, match=re.escape(message)):
        K.scale.precompile(specs)


def test_the_plain_progress_line():
    out = io.StringIO()
    bar = Progress(2, "precompile scale", True, out)
    bar.update()
    bar.update("done")
    bar.close()
    assert out.getvalue() == "precompile scale: 1/2\nprecompile scale: 2/2 (done)\n"
    quiet = io.StringIO()
    Progress(2, "x", None, quiet).update()
    assert quiet.getvalue() == ""                   # not a terminal: off by default
