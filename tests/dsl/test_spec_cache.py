"""The on-disk specialization cache (layoutkit.dsl.core.spec_cache): a kernel made again (as a new
process makes it) launches from disk without tracing; edits invalidate; corrupt entries and
concurrent writers are survived; what cannot be written down says why."""
import importlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.core import spec_cache
from layoutkit.dsl.core.fingerprint import NotCacheable, function_fingerprint
from layoutkit.ptx.cache import encode_entry

from . import spec_cache_kernels as K
from .fake_gpu import BASE, Tensor
from .fake_hopper import FakeHopper

T = lk.TensorSpec(lk.f32, (4096,))
ROOT = Path(__file__).resolve().parents[2]


def again(k, **options):
    """The kernel made anew from its function, as another process would make it."""
    return lk.Kernel(k.fn, k.num_warps, cluster=k.cluster, debug=k.debug, target=k.target,
                     do_not_specialize=k.do_not_specialize, **options)


def no_trace(monkeypatch, k):
    def refuse(*args):
        raise AssertionError(f"{k.name} was traced")
    monkeypatch.setattr(k, "_trace", refuse)


def entries(cache_dir) -> list[Path]:
    return sorted(cache_dir.rglob("*.lkc"))


def test_a_kernel_made_again_launches_from_disk_without_tracing(cache, monkeypatch):
    first = again(K.scale)
    made = first.specialize(T, T, 2.0, VALUES=4)
    assert made.source == "traced" and entries(cache) == []      # stored once assembled
    made.cubin
    (entry,) = entries(cache)
    assert entry.parent.name == "tests.dsl.spec_cache_kernels.scale"
    second = again(K.scale)
    no_trace(monkeypatch, second)
    loaded = second.specialize(T, T, 2.0, VALUES=4)
    assert loaded.source == "disk"
    assert loaded.ptx == made.ptx and loaded.cubin.data == made.cubin.data
    assert loaded.param_specs() == made.param_specs()
    assert (loaded.shared_bytes, loaded.cluster, loaded.ir.name, loaded.ir.num_warps) == \
        (made.shared_bytes, None, "scale", 4)
    assert loaded.timings["trace"] == made.timings["trace"]      # what making it took, then


def test_a_loaded_specialization_traces_when_its_ir_is_read(cache):
    again(K.scale).specialize(T, T, 2.0, VALUES=4).cubin
    loaded = again(K.scale).specialize(T, T, 2.0, VALUES=4)
    assert loaded.source == "disk" and loaded._traced is None
    assert "store" in str(loaded.ir) and loaded._traced is not None


def test_other_facts_and_other_constexprs_are_other_entries(cache):
    k = again(K.scale)
    for args in ((T, T, 2.0, 4), (lk.TensorSpec(lk.f32, (4095,)), T, 2.0, 4), (T, T, 2.0, 2)):
        k.specialize(*args).cubin
    assert len(entries(cache)) == 3


def test_each_change_the_fingerprint_sees(tmp_path, cache, monkeypatch):
    """A kernel module edited between 'processes': its body, a helper, a global it reads."""
    source = textwrap.dedent('''
        import layoutkit.dsl as lk
        from layoutkit.algebra import Layout
        OFFSET = 1.0

        def shifted(v):
            return v + OFFSET

        @lk.kernel(num_warps=1)
        def bump(x: lk.Tensor[lk.f32, 1]):
            tv = lk.tv_layout(Layout(32), Layout(1))
            part = x.tile((32,), (0,)).partition(tv)
            lk.store(part, shifted(lk.load(part)))
    ''')
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    monkeypatch.syspath_prepend(str(module_dir))
    path = module_dir / "edited_kernel.py"
    spec = lk.TensorSpec(lk.f32, (32,))

    def load(text):
        path.write_text(text)
        sys.modules.pop("edited_kernel", None)
        importlib.invalidate_caches()
        return importlib.import_module("edited_kernel").bump

    versions = [source, source.replace("OFFSET = 1.0", "OFFSET = 2.0"),
                source.replace("return v + OFFSET", "return v + OFFSET * 1.0"),
                source.replace("lk.store(part, shifted", "lk.store(part,  shifted")]
    seen = []
    for text in versions:
        k = load(text)
        spec_made = k.specialize(spec)
        assert spec_made.source == "traced"      # a miss each time: its entry is new
        spec_made.cubin
        seen.append(function_fingerprint(k.fn))
    assert len(set(seen)) == len(versions)
    k = load(versions[1])                        # an old version again: its entry is served
    assert k.specialize(spec).source == "disk"


def test_options_of_the_kernel_are_part_of_its_entries(cache):
    """Same key (n = 17 is '+' either way), other do_not_specialize: another kernel."""
    k = again(K.axpy)
    k.specialize(T, T, 17, 2.0, BLOCK=512).cubin
    other = again(K.axpy_any_n)
    assert other.key(T, T, 17, 2.0, 512) == k.key(T, T, 17, 2.0, 512)
    assert other.specialize(T, T, 17, 2.0, BLOCK=512).source == "traced"
    assert again(K.axpy).specialize(T, T, 17, 2.0, BLOCK=512).source == "disk"


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "not an ELF"])
def test_a_corrupt_entry_is_deleted_and_traced_again(cache, damage):
    made = again(K.scale).specialize(T, T, 2.0, VALUES=4)
    made.cubin
    (entry,) = entries(cache)
    blob = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(blob[:len(blob) // 2])
    elif damage == "flip":
        entry.write_bytes(blob[:100] + bytes([blob[100] ^ 1]) + blob[101:])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:                                    # digest and key right, payload not a cubin
        import dataclasses
        fake = dataclasses.replace(made.cubin, data=b"\x7fELF" + b"\0" * 60)
        extra = json.loads(blob[blob.index(b'{"arch"'):].decode())["extra"]
        entry.write_bytes(encode_entry(entry.stem, fake, extra, with_ptx=True))
    k = again(K.scale)
    assert k.specialize(T, T, 2.0, VALUES=4).source == "traced"
    assert not entry.exists() or entry.read_bytes() != blob[:len(blob) // 2]
    k.specialize(T, T, 2.0, VALUES=4).cubin                      # stored afresh
    assert again(K.scale).specialize(T, T, 2.0, VALUES=4).source == "disk"


def test_a_plan_that_does_not_read_is_a_miss(cache):
    made = again(K.scale).specialize(T, T, 2.0, VALUES=4)
    made.cubin
    (entry,) = entries(cache)
    from layoutkit.ptx.cache import decode_entry
    cubin, extra = decode_entry(entry.read_bytes(), entry.stem)
    extra["plan"]["params"] = "garbage"
    entry.write_bytes(encode_entry(entry.stem, cubin, extra, with_ptx=True))
    assert again(K.scale).specialize(T, T, 2.0, VALUES=4).source == "traced"
    assert not entry.exists()


def test_concurrent_writers_leave_a_whole_entry(cache):
    made = again(K.scale).specialize(T, T, 2.0, VALUES=4)
    made.cubin
    (entry,) = entries(cache)
    store = again(K.scale).disk_cache()
    seen, stop = [], threading.Event()

    def write():
        while not stop.is_set():
            store.store(made, made.arch)

    def read():
        for _ in range(200):
            seen.append(store.load(made.key, made.arch) is not None)
    writers = [threading.Thread(target=write) for _ in range(3)]
    for w in writers:
        w.start()
    read()
    stop.set()
    for w in writers:
        w.join()
    assert all(seen) and entries(cache) == [entry]
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".tmp-")]


def test_processes_writing_the_same_entry_at_once(cache, tmp_path):
    """Four processes make the same specialization at once; every entry afterwards reads."""
    script = ("import sys; sys.path.insert(0, %r)\n"
              "import layoutkit.dsl as lk\nfrom tests.dsl import spec_cache_kernels as K\n"
              "T = lk.TensorSpec(lk.f32, (4096,))\n"
              "specs = [K.scale.specialize(T, T, 2.0, VALUES=v) for v in (1, 2, 4)]\n"
              "print(*[s.cubin and s.source for s in specs])\n") % str(ROOT)
    env = {**os.environ, "LAYOUTKIT_SPEC_CACHE": "1", "LAYOUTKIT_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                             text=True) for _ in range(4)]
    assert [r.wait(timeout=600) for r in runs] == [0] * 4
    assert len(entries(cache)) == 3
    # read back by another process (this one's environment digest is older: the tree it was
    # computed from may have changed since, on a machine where the source is being edited)
    check = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=600)
    assert check.stdout.split() == ["disk"] * 3


def test_a_new_process_launches_from_disk_without_tracing(cache, tmp_path):
    """Through kernel[grid] on the fake GPU, in two fresh processes: the second never traces."""
    script = textwrap.dedent('''
        import sys; sys.path.insert(0, %r)
        from pytest import MonkeyPatch
        import layoutkit.dsl as lk
        from tests.dsl import spec_cache_kernels as K
        from tests.dsl.fake_gpu import BASE, Tensor
        from tests.dsl.fake_hopper import FakeHopper
        traced = []
        real = lk.Kernel._trace
        lk.Kernel._trace = lambda self, *a: traced.append(self.name) or real(self, *a)
        with MonkeyPatch.context() as mp:
            gpu = FakeHopper(mp, [K.tma_copy])
            a = Tensor(BASE, "bfloat16", (256, 128), strides=(128, 1))
            out = Tensor(BASE + (1 << 24), "bfloat16", (256, 128), strides=(128, 1))
            c = Tensor(BASE + (2 << 24), "bfloat16", (256, 128))
            K.tma_copy[(4, 2)](a, out, c, 256, 128)
            print(traced, next(iter(K.tma_copy._cache.values())).source, gpu.maps,
                  gpu.calls[0].packed.hex())
    ''') % str(ROOT)
    env = {**os.environ, "LAYOUTKIT_SPEC_CACHE": "1", "LAYOUTKIT_CACHE_DIR": str(tmp_path)}
    outs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=600) for _ in range(2)]
    assert [o.returncode for o in outs] == [0, 0], outs[0].stderr + outs[1].stderr
    cold, warm = (o.stdout.split(" ", 2) for o in outs)
    assert cold[:2] == ["['tma_copy']", "traced"] and warm[:2] == ["[]", "disk"]
    assert cold[2] == warm[2]           # the same tensor maps encoded, the same parameters packed


def test_tensor_maps_and_packing_from_disk_match_the_traced_ones(cache, monkeypatch):
    """Ragged shapes, another tensor's strides: the rebuilt tensor-map expressions give what
    the traced resolvers give."""
    calls = []
    for k in (again(K.tma_copy), again(K.tma_copy)):
        gpu = FakeHopper(monkeypatch, [k])
        for m, kk, stride in ((256, 128, 128), (200, 72, 80), (65, 8, 8)):
            a = Tensor(BASE, "bfloat16", (m, kk), strides=(stride, 1))
            out = Tensor(BASE + (1 << 24), "bfloat16", (m, kk), strides=(stride, 1))
            k[(4, 2)](a, out, Tensor(BASE + (2 << 24), "bfloat16", (m, kk)), m, kk)
        calls.append((gpu.maps, [c.packed for c in gpu.calls],
                      sorted({s.source for s in k._cache.values()})))
    assert calls[0][:2] == calls[1][:2]
    assert calls[0][2] == ["traced"] and calls[1][2] == ["disk"]


def test_a_debug_build_keeps_its_wait_table(cache):
    B = lk.TensorSpec(lk.bf16, (256, 128))
    made = again(K.tma_copy_debug).specialize(B, B, lk.Pointer[lk.bf16], 256, 128)
    made.cubin
    loaded = again(K.tma_copy_debug).specialize(B, B, lk.Pointer[lk.bf16], 256, 128)
    assert loaded.source == "disk"
    table, again_table = made.plan.sink.table, loaded.plan.sink.table
    assert again_table.barriers == table.barriers == ["full"]
    assert [(s.barrier, s.location) for s in again_table.sites] == \
        [(s.barrier, s.location) for s in table.sites]
    assert loaded.plan.sink is not made.plan.sink


def test_a_kernel_reading_a_mutable_global_says_why_it_is_not_cached(cache):
    k = again(K.reads_a_list)
    x = np.zeros(32, np.float32)
    k.specialize(x).cubin
    assert entries(cache) == []
    assert k.disk_cache().reason == (
        "kernel reads_a_list: global LIST_GLOBAL (read by reads_a_list) is a list ([1, 2]), "
        "which the specialization cache cannot write down (it keys on numbers, strings, "
        "tuples, frozen dataclasses, layouts, functions, classes and modules; a list, dict or "
        "other mutable object could change between processes)")
    note = cache / "tests.dsl.spec_cache_kernels.reads_a_list" / spec_cache.NOT_CACHEABLE
    assert note.read_text() == k.disk_cache().reason
    (info,) = spec_cache.spec_cache_info()
    assert info.entries == 0 and info.not_cacheable == k.disk_cache().reason


def test_a_constexpr_without_a_stable_text_is_traced_each_time(cache):
    class Opaque:
        def __hash__(self):
            return 1
    k = again(K.scale)
    with pytest.raises(lk.TraceError):                 # VALUES must be an int to trace
        k.specialize(T, T, 2.0, VALUES=Opaque())
    assert k.disk_cache().entry_key(k.key(T, T, 2.0, Opaque()), "sm_90a") is None
    note = (cache / k.disk_cache().label / spec_cache.NOT_CACHEABLE).read_text()
    assert note.startswith("kernel scale: a specialization is not cached: the specialization "
                           "key[3][1] is a Opaque (")


def test_an_unchecked_specialization_is_not_stored(cache):
    k = again(K.scale)
    with lk.protocol_check_skipped():
        spec = k.specialize(T, T, 2.0, VALUES=4)
    spec.cubin
    # a kernel without barriers passes the check trivially, but under the skip it is unchecked
    assert spec.protocol_checked is False and entries(cache) == []


def test_the_cache_off_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "0")
    again(K.scale).specialize(T, T, 2.0, VALUES=4).cubin
    assert not cache.exists()
    assert again(K.scale).specialize(T, T, 2.0, VALUES=4).source == "traced"


def test_info_lists_entries_per_kernel_and_clear_removes_them(cache):
    again(K.scale).specialize(T, T, 2.0, VALUES=4).cubin
    again(K.scale).specialize(T, T, 2.0, VALUES=2).cubin
    again(K.axpy).specialize(T, T, 4096, 2.0, BLOCK=512).cubin
    info = {i.label: i for i in spec_cache.spec_cache_info()}
    assert {label: i.entries for label, i in info.items()} == {
        "tests.dsl.spec_cache_kernels.axpy_body": 1, "tests.dsl.spec_cache_kernels.scale": 2}
    lines = info["tests.dsl.spec_cache_kernels.scale"].lines(verbose=True)
    assert lines[0].startswith("tests.dsl.spec_cache_kernels.scale: 2 specialization(s), ")
    assert sorted(line.split("  (")[0].strip() for line in lines[1:]) == [
        "x=(16):(1) y=(16):(1) a=- VALUES=2; sm_90a", "x=(16):(1) y=(16):(1) a=- VALUES=4; sm_90a"]
    assert spec_cache.spec_cache_clear() == 3 and spec_cache.spec_cache_info() == []


def test_fingerprint_refuses_a_function_without_source():
    namespace = {}
    exec("def f(x):\n    return x\n", namespace)
    with pytest.raises(NotCacheable, match="function f has no source file to read"):
        function_fingerprint(namespace["f"])


def test_an_lru_cached_helper_is_fingerprinted_by_its_function():
    import functools

    def make(helper):
        def kernel_like(x):
            return helper(x)
        return kernel_like

    @functools.lru_cache(maxsize=None)
    def plus_one(n):
        return n + 1

    @functools.lru_cache(maxsize=None)
    def plus_two(n):
        return n + 2
    assert function_fingerprint(make(plus_one)) == function_fingerprint(make(plus_one))
    assert function_fingerprint(make(plus_one)) != function_fingerprint(make(plus_two))
