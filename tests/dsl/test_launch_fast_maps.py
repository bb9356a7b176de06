"""The launch fast path of kernels with TMA tensor maps (layoutkit.dsl.core.launch_maps) on the
CPU: after a first checked launch, plain calls launch with the maps of their resolvers' caches
(encoded again for a new address or new extents of equal facts) and pack the bytes the checked
path packs; other facts, and arguments the checked path refuses, go through it and its errors.
Fakes: tests/dsl/fake_hopper.py, its maps' bytes written from the encoding's arguments here.
"""
import struct

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.core.launch_maps import HELD_NONE, MISS, entry_source, hidden_entry
from layoutkit.dsl.core.launch_plan import plan_from_json, plan_to_json, tensor_map_json

from . import spec_cache_kernels as K
from .fake_gpu import BASE, Tensor
from .fake_hopper import FakeHopper

copy = lk.kernel(K.tma_copy.fn, num_warps=4)    # maps over a's fields and over M, K (of c)
GRID = (4, 2)


class MapsOfArguments(FakeHopper):
    """FakeHopper whose maps hold their encoding's address, dims and strides (so the packed
    parameters say which map a launch took); `maps` records (rank, address) per encoding."""

    def encode(self, dtype, rank, address, dims, strides, *rest):
        err, made = super().encode(dtype, rank, address)
        values = [int(address)] + [int(d) for d in dims] + [int(s) for s in strides]
        struct.pack_into(f"<{len(values)}Q", made.buffer, 0, *values)
        return err, made


@pytest.fixture
def gpu(monkeypatch):
    fake = MapsOfArguments(monkeypatch, [copy])
    yield fake
    fake.reset()


@pytest.fixture
def checked(monkeypatch):
    """The calls that went through Kernel.launch (the checked path)."""
    calls = []

    def spy(grid, *args, _real=copy.launch, **kwargs):
        calls.append(args)
        return _real(grid, *args, **kwargs)
    monkeypatch.setitem(copy.__dict__, "launch", spy)
    return calls


def operands(m=256, k=128, stride=128, at=BASE):
    """(a, out, c, M, K) of copy: a and out (m, k) bf16 of row stride `stride`, c at `at`'s
    third 16 MiB."""
    a = Tensor(at, "bfloat16", (m, k), strides=(stride, 1))
    out = Tensor(at + (1 << 24), "bfloat16", (m, k), strides=(stride, 1))
    return a, out, Tensor(at + (2 << 24), "bfloat16", (m * k,)), m, k


def a_map(address, m, k, stride) -> bytes:
    """The bytes of MapsOfArguments' map of an (m, k) bf16 tensor of row stride `stride`."""
    return struct.pack("<4Q", address, k, m, stride * 2)


def packed_by_the_checked_path(gpu, args) -> bytes:
    type(copy).launch(copy, GRID, *args)             # Kernel.launch itself, past the spy
    return gpu.calls.pop().packed


def test_a_second_launch_takes_the_cached_maps_and_packs_what_the_checked_path_packs(gpu, checked):
    args = operands()
    copy[GRID](*args)
    copy[GRID](*args)
    assert len(checked) == 1 and len(gpu.calls) == 2
    assert gpu.maps == [(2, BASE), (2, BASE + (2 << 24))]       # encoded once, by the first
    first, second = gpu.calls
    assert first.spec is second.spec and first.packed == second.packed
    assert a_map(BASE, 256, 128, 128) in second.packed
    assert second.packed == packed_by_the_checked_path(gpu, args)


def test_a_new_address_encodes_its_map_on_the_fast_path(gpu, checked):
    copy[GRID](*operands())
    moved = operands(at=BASE + (3 << 24))
    copy[GRID](*moved)
    assert len(checked) == 1
    assert gpu.maps[2:] == [(2, BASE + (3 << 24)), (2, BASE + (5 << 24))]
    assert gpu.calls[-1].packed == packed_by_the_checked_path(gpu, moved)
    copy[GRID](*operands())                          # back: the first maps, kept
    assert len(gpu.maps) == 4 and len(checked) == 1
    assert gpu.calls[-1].packed == gpu.calls[0].packed


@pytest.mark.parametrize("shape", [dict(m=512), dict(k=64, stride=64), dict(stride=136),
                                   dict(m=208, k=96, stride=96)])
def test_new_extents_or_strides_of_the_same_facts_encode_new_maps(gpu, checked, shape):
    copy[GRID](*operands())
    args = operands(**shape)
    copy[GRID](*args)
    m, k, stride = args[3], args[4], args[0].stride(0)
    assert len(checked) == 1 and gpu.maps[2] == (2, BASE)      # a's map, then c's if M, K moved
    assert len(gpu.maps) == 3 + ((m, k) != (256, 128))
    assert a_map(BASE, m, k, stride) in gpu.calls[-1].packed
    assert gpu.calls[-1].packed == packed_by_the_checked_path(gpu, args)


@pytest.mark.parametrize("shape", [dict(m=200), dict(k=72, stride=72)])
def test_a_changed_fact_takes_the_checked_path_and_its_own_specialization(gpu, checked, shape):
    copy[GRID](*operands())
    args = operands(**shape)
    copy[GRID](*args)
    assert len(checked) == 2 and gpu.calls[-1].spec is not gpu.calls[0].spec
    copy[GRID](*args)
    assert len(checked) == 2                         # then its own fast launches
    assert gpu.calls[-1].packed == gpu.calls[-2].packed


def test_a_stride_tma_cannot_take_is_refused_by_the_checked_path(gpu, checked):
    copy[GRID](*operands())
    with pytest.raises(lk.KernelArgumentError, match="stride a_stride0 = 60 elements = 120 bytes"):
        copy[GRID](*operands(k=60, stride=60))       # 120-byte rows
    assert len(checked) == 2


def test_arguments_the_checked_path_refuses_still_raise_its_errors(gpu, checked):
    a, out, c, m, k = operands()
    copy[GRID](a, out, c, m, k)
    host = Tensor(BASE + (3 << 24), "bfloat16", (m, k), device=-1, strides=(k, 1))
    with pytest.raises(lk.KernelArgumentError, match="host memory"):
        copy[GRID](host, out, c, m, k)
    same_address_on_host = Tensor(BASE, "bfloat16", (m, k), device=-1, strides=(k, 1))
    with pytest.raises(lk.KernelArgumentError, match="host memory"):
        copy[GRID](same_address_on_host, out, c, m, k)
    with pytest.raises(lk.KernelArgumentError, match="a tensor of f32"):
        copy[GRID](Tensor(BASE, "float32", (m, k), strides=(k, 1)), out, c, m, k)
    with pytest.raises(lk.KernelArgumentError, match="not a tensor"):
        copy[GRID](np.zeros((m, k), np.uint16).tolist(), out, c, m, k)
    assert len(checked) == 5 and len(gpu.calls) == 1
    copy[GRID](a, out, c, m, k)
    assert len(checked) == 5 and len(gpu.calls) == 2


def test_a_map_that_fails_to_encode_on_the_fast_path_goes_to_the_checked_path(gpu, checked,
                                                                            monkeypatch):
    copy[GRID](*operands())
    spec = gpu.calls[0].spec
    resolver = spec.plan.hidden[0][1]
    real = resolver.encode

    def refuse_once(key, _seen=[]):
        if not _seen:
            _seen.append(key)
            raise resolver._fail("refused by the test")
        return real(key)
    monkeypatch.setattr(resolver, "encode", refuse_once)
    copy._fast.launchers.clear()
    copy[GRID](*operands())                          # remembered again, with refuse_once
    args = operands(at=BASE + (3 << 24))
    copy[GRID](*args)                                # the entry's MISS; the checked path encodes
    assert len(checked) == 3 and gpu.maps[-2][1] == BASE + (3 << 24)


def test_a_specialization_from_the_disk_cache_gets_the_same_entry(gpu):
    copy[GRID](*operands())
    spec = gpu.calls[0].spec
    plan = plan_from_json(plan_to_json(spec.plan, spec.ir))
    for (name, traced), (_, loaded) in zip(spec.plan.hidden, plan.hidden):
        assert tensor_map_json(None, name, loaded) == tensor_map_json(spec.ir, name, traced)

    class Loaded:
        ir = None
    Loaded.plan = plan
    launched = []
    entry = hidden_entry(list(copy.params), Loaded, lambda *args: launched.append(args))
    a, out, c, m, k = operands()
    fields = (*a.shape, *a.stride(), out, *out.shape, *out.stride(), c, m, k)
    assert entry(a, *fields, a.ptr, out.ptr, c.ptr) is None
    maps = launched[0][-5:-3]
    assert [(t.encoding.global_address, t.encoding.global_dims) for t in maps] == \
        [(BASE, (128, 256)), (BASE + (2 << 24), (128, 256))]


def test_no_entry_for_a_map_expression_it_does_not_compute_nor_another_hidden_parameter(gpu):
    copy[GRID](*operands())
    spec = gpu.calls[0].spec
    name, resolver = spec.plan.hidden[0]
    data = dict(tensor_map_json(spec.ir, name, resolver))
    data["dims"] = [["floor", ["*", ["q", 1, 2], ["s", "M"]]], 64]
    resolver.json = data

    class Spec:
        ir, plan = spec.ir, spec.plan
    try:
        assert hidden_entry(list(copy.params), Spec, print) is None
    finally:
        del resolver.json
    Spec.plan = type("Plan", (), {"hidden": (("wait_errors", object()),), "name": "x"})
    assert hidden_entry(list(copy.params), Spec, print) is None


def test_a_tensor_off_every_device_is_a_miss_before_any_encoding(gpu):
    params = [lk.core.arguments.parameter("c", lk.Pointer[lk.bf16])]
    source = entry_source(params, [(0, [64], [1], {})])
    namespace = {"cache0": {}.get, "encode0": None, "MISS": MISS, "launch": None,
                 "KernelArgumentError": lk.KernelArgumentError, "held": HELD_NONE}
    exec(source, namespace)
    assert namespace["entry"](Tensor(BASE, "bfloat16", device=-1), BASE) is MISS


def held_entry_example():
    """launch_maps' docstring example (a's map over its fields, c's over M) exec'd with a map
    cache and encoder that record their keys, and a launch that records the maps it gets."""
    params = [lk.core.arguments.parameter("a", lk.Tensor[lk.bf16, 2]),
              lk.core.arguments.parameter("c", lk.Pointer[lk.bf16]),
              lk.core.arguments.parameter("M", lk.i32)]
    maps = [(0, [["s", "a_shape1"], ["s", "a_shape0"]], [1, ["s", "a_stride0"]],
             {"a_shape1": ["field", 0, "shape", 1], "a_shape0": ["field", 0, "shape", 0],
              "a_stride0": ["field", 0, "stride", 0]}),
            (1, [64, ["s", "M"]], [1, 64], {"M": ["arg", 2]})]
    looked, launched = [], []
    namespace = {"MISS": MISS, "KernelArgumentError": lk.KernelArgumentError, "held": HELD_NONE,
                 "launch": lambda *args: launched.append(args[7:9])}
    for j in range(2):
        namespace[f"cache{j}"] = lambda key: looked.append(key) or None
        namespace[f"encode{j}"] = lambda key: ("map", key)          # a map stands for its key
    exec(entry_source(params, maps), namespace)
    return namespace["entry"], looked, launched


def test_an_entry_holds_the_last_maps_for_the_same_inputs_and_no_others():
    entry, looked, launched = held_entry_example()
    a, c = Tensor(BASE, "bfloat16", (256, 128), strides=(128, 1)), Tensor(BASE + (1 << 24), "bfloat16")
    # a, a's extents and strides, c, M, then the pointers
    base = [a, 256, 128, 128, 1, c, 4096, BASE, BASE + (1 << 24)]
    entry(*base)
    entry(*base)
    assert len(looked) == 2 and launched[0] == launched[1]        # the second: no cache lookup
    base_maps = launched[0]
    for i, value in [(1, 512), (2, 64), (3, 136), (6, 2048), (7, BASE + 256), (8, BASE + 512)]:
        call = list(base)
        call[i] = value
        entry(*call)
        _, pa, dims_a, strides_a = launched[-1][0][1]
        _, pc, dims_c, _ = launched[-1][1][1]
        assert (pa, dims_a, strides_a) == (call[7], (call[2], call[1]), (1, call[3]))
        assert (pc, dims_c) == (call[8], (64, call[6]))
        entry(*base)
        assert launched[-1] == base_maps
    looked.clear()
    entry(*base[:4], 2, *base[5:])          # a's unit stride is in no map: the held maps
    assert looked == [] and launched[-1] == base_maps
